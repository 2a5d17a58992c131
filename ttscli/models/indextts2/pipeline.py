"""IndexTTS2 pipeline: text -> GPT semantic codes -> S2Mel (flow matching) mel -> BigVGAN -> 22.05 kHz.

Every request speaks in a cloned voice (``--ref``, or a voice saved with ``--save-voice``); the
emotion comes from one of (upstream ``infer_generator``):

- the speaker reference itself (the default);
- an emotion reference clip (``--emotion-ref``), blended with the speaker's by ``--emotion-alpha``;
- an eight-weight vector (``--emotion happy=0.8,calm=0.2``; emotion.py), scaled by ``--emotion-alpha``;
- a text (``--instruct "..."``, or ``--emotion-from-text`` for the text being spoken) that
  upstream's Qwen3 classifier (``qwen0.6bemo4-merge/``) turns into that vector.

The text is cut into upstream's segments (text.py: at most 120 BPE pieces each); each segment is
one GPT pass (beam sampling with upstream's defaults: 3 beams, top-k 30, top-p 0.8, temperature
0.8, repetition penalty 10), the GPT's latent of its codes, S2Mel's 25 Euler steps with CFG 0.7
behind the reference's mel, and BigVGAN; segments are joined with upstream's 200 ms of silence.
Audio streams a segment at a time, as upstream's ``stream_return`` does (the flow attends over a
whole segment, so a finer cut would change the audio); ``--quick-first-segment N`` makes the
first segment end after about N pieces so the first audio comes sooner.

``--tokens N`` / ``--duration S`` force a segment's code count (the stop code is barred before,
and the codes end there): upstream's released code has no duration mode, so this is ttscli's own
forced length, for a text that is one segment.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from ttscli.errors import GenerationError, LimitReached, UsageError
from ttscli.lm.sample import KeyStream, SamplingParams
from ttscli.models.base import Pipeline, Request
from ttscli.models.indextts2.config import IndexTTS2Args
from ttscli.models.indextts2.gpt import CodeLimitReached
from ttscli.models.indextts2.emotion import EmotionMatrices, blend, parse_vector, scale_vector
from ttscli.models.indextts2.text import MAX_SEGMENT_TOKENS, split_segments
from ttscli.models.indextts2.voice import Voice
from ttscli.voicefile import is_voice_file

SAMPLE_RATE = 22050
HOP = 256
FRAMES_PER_CODE = 1.72              # S2Mel's mel frames per semantic code
CODES_PER_SECOND = SAMPLE_RATE / HOP / FRAMES_PER_CODE
INTERVAL_SILENCE_S = 0.2
MAX_CODES = 1500                    # upstream max_mel_tokens per segment
DEFAULTS = {"temperature": 0.8, "top_k": 30, "top_p": 0.8, "repetition_penalty": 10.0, "do_sample": True,
            "num_beams": 3, "inference_timesteps": 25, "cfg_rate": 0.7, "emotion_alpha": 1.0}


def silence() -> np.ndarray:
    """Upstream's pause between segments."""
    return np.zeros(int(round(INTERVAL_SILENCE_S * SAMPLE_RATE)), np.float32)


@dataclass
class Plan:
    """One request's decoding: its voice, the GPT's conditioning (speaker latents ``[1, 32, D]``,
    emotion vector ``[1, D]``), sampling, beams, forced length, text segments and code limits."""

    voice: Voice
    cond: mx.array
    emo: mx.array
    params: SamplingParams
    beams: int
    forced: int | None
    segs: list[list[int]]
    max_codes: int
    min_codes: int


class IndexTTS2Pipeline(Pipeline):
    sample_rate = SAMPLE_RATE
    # upstream segments the text itself (120 pieces); the engine only cuts very long texts
    max_chunk_chars = 2000
    ref_sample_rate = SAMPLE_RATE
    independent_generations = True     # caches and keys live in each generation

    def __init__(self, spec: Any, args: IndexTTS2Args, gpt, s2mel, codec, vocoder, tokenizer, encoder=None,
                 emotions: EmotionMatrices | None = None, default_voice: Voice | None = None,
                 backends: dict[str, str] | None = None, emotion_classifier=None):
        super().__init__()
        self.spec, self.args, self.gpt, self.s2mel, self.codec, self.vocoder = spec, args, gpt, s2mel, codec, vocoder
        self.tokenizer, self.encoder, self.emotions, self.default_voice = tokenizer, encoder, emotions, default_voice
        self.emotion_classifier = emotion_classifier
        self.backends = dict(backends or {})
        self._voice_cache: tuple[Any, Voice] | None = None
        self._emo_cache: tuple[str, np.ndarray] | None = None

    # -- voice and emotion ---------------------------------------------------------------------------
    def voice(self, r: Request) -> Voice:
        if r.voice is not None:
            if not is_voice_file(r.voice):
                raise UsageError(f"IndexTTS2 has no preset voice {r.voice!r}: clone one with --ref, or pass a "
                                 "voice saved with --save-voice (.safetensors)")
            return Voice.load(Path(r.voice), self.gpt.args.model_dim, self.s2mel.args.length_regulator.channels)
        if r.ref_audio is None:
            if self.default_voice is None:
                raise UsageError("IndexTTS2 speaks in a cloned voice: give --ref (a recording of up to 15 s), "
                                 "or --voice with a voice saved by --save-voice")
            return self.default_voice
        key = (id(r.ref_audio), r.ref_sample_rate)
        if self._voice_cache is not None and self._voice_cache[0] == key:
            v = self._voice_cache[1]
        else:
            if self.encoder is None:
                raise UsageError("this IndexTTS2 load has no reference encoders (random weights)")
            v = self.encoder.voice(r.ref_audio, r.ref_sample_rate or SAMPLE_RATE)
            self._voice_cache = (key, v)
        if r.save_voice:
            v.save(Path(r.save_voice))
        return v

    def emotion_vector(self, r: Request, voice: Voice) -> np.ndarray:
        """The emotion vector of the request (module docstring), refusing combinations upstream
        would silently resolve."""
        k = r.knobs
        alpha = float(k.get("emotion_alpha", DEFAULTS["emotion_alpha"]))
        given = [n for n, on in (("--emotion", "emotion" in k), ("--emotion-ref", "emotion_ref" in k),
                                 ("--instruct", r.instruct is not None),
                                 ("--emotion-from-text", bool(k.get("emotion_from_text")))) if on]
        if len(given) > 1:
            raise UsageError(f"IndexTTS2 takes one emotion source; got {' and '.join(given)}")
        if "emotion_ref" in k:
            e = self._emotion_reference(str(k["emotion_ref"]))
            return voice.emovec + alpha * (e - voice.emovec)
        if "emotion" in k or r.instruct is not None or k.get("emotion_from_text"):
            if "emotion" in k:
                weights = parse_vector(str(k["emotion"]))
            else:
                weights = self._classify(r.instruct if r.instruct is not None else r.text)
            if self.emotions is None:
                raise UsageError("this IndexTTS2 folder has no emotion matrices (feat1.pt, feat2.pt)")
            rng = np.random.default_rng(r.seed) if k.get("emotion_random") else None
            rows = self.emotions.rows(voice.style, rng)
            return blend(voice.emovec, scale_vector(weights, alpha), rows)
        return voice.emovec

    def _emotion_reference(self, path: str) -> np.ndarray:
        if self._emo_cache is not None and self._emo_cache[0] == path:
            return self._emo_cache[1]
        if self.encoder is None:
            raise UsageError("this IndexTTS2 load has no reference encoders (random weights): --emotion-ref needs "
                             "the w2v-BERT and conditioner weights")
        from ttscli.audio import read_reference

        wav, sr = read_reference(path, max_seconds=15.0)
        e = self.encoder.emotion(wav, sr)
        self._emo_cache = (path, e)
        return e

    def _classify(self, text: str) -> list[float]:
        if self.emotion_classifier is None:
            raise UsageError("emotion from text needs upstream's emotion classifier (qwen0.6bemo4-merge/ in the "
                             "model folder); or give --emotion NAME=WEIGHT,...")
        return self.emotion_classifier.weights(text)

    # -- generation ----------------------------------------------------------------------------------
    def sampling(self, r: Request) -> tuple[SamplingParams, int]:
        k = r.knobs
        p = SamplingParams(temperature=float(k.get("temperature", DEFAULTS["temperature"])),
                           top_k=int(k.get("top_k", DEFAULTS["top_k"])), top_p=float(k.get("top_p", DEFAULTS["top_p"])),
                           repetition_penalty=float(k.get("repetition_penalty", DEFAULTS["repetition_penalty"])),
                           do_sample=bool(k.get("do_sample", DEFAULTS["do_sample"])))
        return p, int(k.get("num_beams", DEFAULTS["num_beams"]))

    def forced_codes(self, r: Request) -> int | None:
        k = r.knobs
        if "tokens" in k and "duration" in k:
            raise UsageError("give --tokens or --duration, not both")
        if "tokens" in k:
            return int(k["tokens"])
        if "duration" in k:
            return max(1, int(round(float(k["duration"]) * CODES_PER_SECOND)))
        return None

    def segments(self, r: Request) -> list[list[int]]:
        pieces = self.tokenizer.pieces(r.text)
        quick = int(r.knobs.get("quick_first_segment", 0))
        most = min(int(r.knobs.get("segment_tokens", MAX_SEGMENT_TOKENS)), self.gpt.args.max_text_tokens)
        segs = [self.tokenizer.ids(s) for s in split_segments(pieces, most, quick)]
        if not segs:
            raise UsageError("IndexTTS2: the text has nothing to speak")
        return segs

    def plan(self, r: Request) -> Plan:
        """What a request decodes with, checked before any code is drawn."""
        voice = self.voice(r)
        emovec = self.emotion_vector(r, voice)
        params, beams = self.sampling(r)
        forced = self.forced_codes(r)
        segs = self.segments(r)
        if forced is not None and len(segs) > 1:
            raise UsageError(f"--tokens / --duration set the length of one segment; this text makes {len(segs)} "
                             "segments (--segment-tokens): give a shorter text")
        max_codes = r.max_frames or min(MAX_CODES, self.gpt.args.max_mel_tokens)
        if forced is not None:
            max_codes = forced
        min_codes = forced if forced is not None else (max_codes if r.ignore_eos else 0)
        capacity = getattr(self.gpt.decoder, "capacity", None)      # a converted GPT's fixed KV cache
        if capacity is not None:
            # conditioning rows, the framed text, the start code, then the codes
            need = self.gpt.args.cond_rows + max(map(len, segs)) + 2 + 1 + max_codes
            if need > capacity:
                raise UsageError(f"a segment's prompt and {max_codes} codes need {need} positions; the Core ML GPT "
                                 f"holds {capacity} (convert again with a larger --capacity, lower --max-frames, "
                                 "or use --backend code_decoder=mlx)")
        return Plan(voice, mx.array(voice.cond_latents)[None], mx.array(np.asarray(emovec, np.float32))[None],
                    params, beams, forced, segs, max_codes, min_codes)

    def limit_reached(self, max_codes: int) -> LimitReached:
        return LimitReached(f"IndexTTS2 reached its limit of {max_codes} codes in a segment without the stop "
                            f"code (--max-frames raises it, up to {self.gpt.args.max_mel_tokens}; --segment-tokens "
                            "makes segments shorter)")

    def generate(self, r: Request) -> Iterator[np.ndarray]:
        t_start = time.perf_counter()
        plan = self.plan(r)
        keys = KeyStream(r.seed)
        for i, ids in enumerate(plan.segs):
            if i:
                yield silence()
            wav = self._segment(r, plan, ids, keys)
            if self.stats.first_audio_s is None:
                self.stats.first_audio_s = time.perf_counter() - t_start
            yield wav

    def codes(self, embeds: mx.array, plan: Plan, key: mx.array) -> list[int]:
        st = self.stats
        out: list[int] = []
        t = time.perf_counter()
        try:
            for c in self.gpt.generate(embeds, plan.params, max_tokens=plan.max_codes, min_tokens=plan.min_codes,
                                       key=key, num_beams=plan.beams):
                now = time.perf_counter()
                if not out:
                    st.prefill_s += now - t
                    st.prefill_tokens += embeds.shape[1]
                else:
                    st.frame_s.append(now - t)
                t = now
                out.append(int(c))
        except CodeLimitReached:
            raise self.limit_reached(plan.max_codes) from None
        st.frames += len(out)
        return out

    def _segment(self, r: Request, plan: Plan, ids: list[int], keys: KeyStream) -> np.ndarray:
        embeds = self.gpt.prompt(plan.cond, plan.emo, np.asarray(ids, np.int64)[None])
        t0 = time.perf_counter()
        codes = self.codes(embeds, plan, keys.next())
        self.stats.extra["gpt_s"] = self.stats.extra.get("gpt_s", 0.0) + time.perf_counter() - t0
        return self.decode(r, plan.voice, embeds, ids, codes, keys.next())

    def decode(self, r: Request, voice: Voice, embeds: mx.array, ids: list[int], codes: list[int],
               key: mx.array) -> np.ndarray:
        """One segment's codes -> its waveform: the latent, S2Mel and BigVGAN."""
        if not codes:
            raise GenerationError("the IndexTTS2 GPT ended a segment before its first code")
        st = self.stats
        t1 = time.perf_counter()
        mel = self.mel(voice, embeds, ids, codes, r, key)
        t2 = time.perf_counter()
        wav = self.vocoder(mel)[0]
        mx.eval(wav)
        t3 = time.perf_counter()
        st.extra["s2mel_s"] = st.extra.get("s2mel_s", 0.0) + t2 - t1
        st.extra["vocoder_s"] = st.extra.get("vocoder_s", 0.0) + t3 - t2
        st.decoder_s += t3 - t1
        st.decoder_frames += mel.shape[1]
        return np.array(wav, np.float32)

    def rows(self):
        """Requests as rows of one GPT batch (ttscli.models.indextts2.rows), each request's beams
        its own rows. The rows run the MLX GPT-2 stack: with the GPT's float32 ONNX graph as the
        code decoder that is the same arithmetic (the graph is built from these weights), and one
        batched step reads the weights once for every row; a quantized graph's numbers are its
        own, so an int8/int4 code decoder takes one request at a time instead."""
        if self.backends.get("code_decoder", "mlx") not in ("mlx", "onnx-float32"):
            return None
        from ttscli.models.indextts2.rows import IndexTTS2Rows

        return IndexTTS2Rows(self)

    def mel(self, voice: Voice, embeds: mx.array, ids: list[int], codes: list[int], r: Request,
            key: mx.array) -> mx.array:
        """S2Mel of one segment's codes: ``[1, frames, 80]`` after the reference's prompt frames."""
        k = r.knobs
        steps = int(k.get("inference_timesteps", DEFAULTS["inference_timesteps"]))
        cfg = float(k.get("cfg_rate", DEFAULTS["cfg_rate"]))
        c = mx.array(np.asarray(codes, np.int32))[None]
        latent = self.gpt.latent(embeds, np.asarray(ids, np.int64)[None], c)
        content = self.s2mel.project_latent(latent) + self.codec.vq2emb(c)
        from ttscli.models.indextts2.s2mel import code_frames

        cond = self.s2mel.length_regulator(content, code_frames(len(codes)))
        prompt = mx.array(voice.prompt_cond)[None].astype(cond.dtype)
        mu = mx.concatenate([prompt, cond], axis=1)
        noise = mx.random.normal((1, mu.shape[1], 80), key=key)
        ref_mel = mx.array(voice.ref_mel)[None]
        mel = self.s2mel.cfm.inference(mu, ref_mel, mx.array(voice.style)[None], noise, steps, cfg)
        return mel[:, ref_mel.shape[1]:]

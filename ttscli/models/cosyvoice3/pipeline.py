"""CosyVoice3 pipeline: text -> Qwen2 LM speech tokens -> DiT flow mel -> causal HiFT -> 24 kHz.

Every mode speaks in a cloned voice (the published checkpoint has no preset speakers); the
request picks the mode as upstream's ``CosyVoice3`` methods do:

- zero-shot (``--ref`` + ``--ref-text``): the LM continues the reference's transcript and speech
  tokens (``inference_zero_shot``);
- cross-lingual (``--ref`` with ``--x-vector-only``, or a voice without transcript): the LM sees
  only the text, the reference voices the flow (``inference_cross_lingual``);
- instruct (``--ref`` + ``--instruct``): the instruction replaces the transcript, no reference
  tokens in the LM (``inference_instruct2``).

Upstream's examples put ``You are a helpful assistant.`` and ``<|endofprompt|>`` (which its LM
requires once in the prompt) in front of the transcript, the instruction or the text; a prompt
that already holds ``<|endofprompt|>`` is taken as written.

Streaming follows upstream's ``CosyVoice3Model.tts``: a first hop of 25 tokens plus what pads the
reference to whole 25-token chunks, then hops doubling up to 100, each pass waiting for 3 tokens
of lookahead; each pass re-runs the chunk-masked flow over every token so far and HiFT over the
whole mel so far, releasing only audio no later frame can change; the last pass runs the flow
without the mask (upstream's ``token2wav`` there is called with its default ``stream=False``).
Upstream's non-streamed path attends over the whole utterance in every frame, so streamed and
non-streamed audio differ as they do upstream; the streamed pieces join to exactly what those
passes make (no crossfade is needed: HiFT's released samples are final).
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from ttscli.codecs.s3gen import next_hop
from ttscli.codecs.s3gen.dit import fixed_noise
from ttscli.errors import UsageError
from ttscli.models.base import Pipeline, Request
from ttscli.models.cosyvoice3.config import CosyVoice3Args
from ttscli.models.cosyvoice3.frontend import END_OF_PROMPT, SYSTEM, Voice
from ttscli.models.cosyvoice3.llm import Draw
from ttscli.voicefile import is_voice_file

SAMPLE_RATE = 24000
TOKEN_HOP = 25                 # upstream token_hop_len: the DiT's static chunk in tokens
MIN_TOKEN_TEXT_RATIO, MAX_TOKEN_TEXT_RATIO = 2, 20
SINE_NOISE_SEED = 1


@dataclass
class LMPrompt:
    """What the LM gets for one chunk: text ids (prompt text first), reference speech tokens, and
    upstream's length bounds (from the text's own ids)."""
    text_ids: list[int]
    speech: list[int]
    min_len: int
    max_len: int


def ensure_end_of_prompt(text: str) -> str:
    return text if END_OF_PROMPT in text else f"{SYSTEM}{END_OF_PROMPT}{text}"


class CosyVoice3Pipeline(Pipeline):
    sample_rate = SAMPLE_RATE
    max_chunk_chars = 200            # upstream splits text at about 80 text tokens
    ref_sample_rate = SAMPLE_RATE
    independent_generations = True   # KV cache, draws and stream state live in each generation

    def __init__(self, spec: Any, args: CosyVoice3Args, lm, flow, hift, tokenizer, encoder=None,
                 default_voice: Voice | None = None, backends: dict[str, str] | None = None,
                 speakers: dict[str, Voice] | None = None):
        super().__init__()
        self.speakers = dict(speakers or {})      # spk2info.pt's, the first the default voice
        self.spec, self.args, self.lm, self.flow, self.hift = spec, args, lm, flow, hift
        self.tokenizer, self.encoder, self.default_voice = tokenizer, encoder, default_voice
        self.backends = dict(backends or {"code_decoder": "mlx", "flow_estimator": "mlx", "vocoder": "mlx"})
        self._voice_cache: tuple[Any, Voice] | None = None
        self._flow_noise = mx.array(fixed_noise(15000, args.flow.output_size))   # upstream: 300 s at 50 Hz

    # -- the voice and the prompt -------------------------------------------------------------------
    def voice(self, r: Request) -> Voice:
        """The request's voice: a stored speaker (``spk2info.pt``) or a saved one (``--voice
        v.safetensors``; ``--ref-text`` replaces its transcript), a reference encoded now
        (``--save-voice`` keeps it), or the default (the first stored speaker; random weights: a
        random prompt)."""
        if r.voice is not None:
            if r.voice in self.speakers:
                return self.speakers[r.voice]
            if not is_voice_file(r.voice):
                have = ", ".join(self.speakers) or "none in this folder's spk2info.pt"
                raise UsageError(f"CosyVoice3 has no voice {r.voice!r} (stored speakers: {have}): clone one with "
                                 "--ref, or pass a voice saved with --save-voice (.safetensors)")
            v = Voice.load(Path(r.voice), self.args.speech_token_size)
            return replace(v, text=r.ref_text) if r.ref_text is not None else v
        if r.ref_audio is None:
            if self.default_voice is None and self.speakers:
                return next(iter(self.speakers.values()))
            if self.default_voice is None:
                raise UsageError("CosyVoice3 speaks in a cloned voice: give --ref (with --ref-text for zero-shot "
                                 "cloning, alone for cross-lingual, with --instruct for instructions)")
            return self.default_voice
        key = (id(r.ref_audio), r.ref_sample_rate, r.ref_text, r.save_voice)
        if self._voice_cache is not None and self._voice_cache[0] == key:
            return self._voice_cache[1]
        if self.encoder is None:
            raise UsageError("this CosyVoice3 load has no reference encoders (random weights): cloning needs "
                             "a checkpoint folder with campplus.onnx and speech_tokenizer_v3.onnx")
        v = self.encoder.voice(r.ref_audio, r.ref_sample_rate or SAMPLE_RATE, r.ref_text)
        if r.save_voice:
            v.save(Path(r.save_voice))
        self._voice_cache = (key, v)
        return v

    def lm_prompt(self, r: Request, voice: Voice) -> LMPrompt:
        """The mode's prompt text and reference tokens (module docstring)."""
        text, speech, prompt = r.text, [], ""
        if r.knobs.get("x_vector_only"):
            voice = replace(voice, text=None, text_ids=None)
        if r.instruct:
            prompt = r.instruct if END_OF_PROMPT in r.instruct else f"{SYSTEM} {r.instruct}{END_OF_PROMPT}"
        elif voice.text:
            prompt, speech = ensure_end_of_prompt(voice.text), voice.tokens.tolist()
        elif not voice.text_ids:
            text = ensure_end_of_prompt(text)
        prompt_ids = self.tokenizer.encode(prompt) if prompt else []
        if voice.text_ids and not r.instruct and not voice.text:
            prompt_ids, speech = list(voice.text_ids), voice.tokens.tolist()
        ids = self.tokenizer.encode(text)
        if not ids:
            raise UsageError("nothing to say: the text gives no tokens")
        max_len = len(ids) * MAX_TOKEN_TEXT_RATIO if r.max_frames is None else int(r.max_frames)
        return LMPrompt(prompt_ids + ids, speech, len(ids) * MIN_TOKEN_TEXT_RATIO, max_len)

    def draw(self, r: Request) -> Draw:
        greedy = not r.knobs.get("do_sample", True)
        s = self.args.sampling
        sampling = type(s)(top_p=r.knobs.get("top_p", s.top_p), top_k=r.knobs.get("top_k", s.top_k),
                           win_size=s.win_size, tau_r=s.tau_r)
        return Draw(sampling, np.random.default_rng(r.seed), greedy=greedy)

    # -- generation ---------------------------------------------------------------------------------
    def tokens(self, r: Request, voice: Voice) -> Iterator[int]:
        p = self.lm_prompt(r, voice)
        embeds = self.lm.prompt(p.text_ids, p.speech)
        t0 = time.perf_counter()
        first = True
        for tok in self.lm.generate(embeds, self.draw(r), p.min_len, p.max_len, ignore_eos=r.ignore_eos):
            dt = time.perf_counter() - t0
            if first:
                self.stats.prefill_s += dt
                self.stats.prefill_tokens += embeds.shape[1]
                first = False
            else:
                self.stats.frame_s.append(dt)
            self.stats.frames += 1
            yield tok
            t0 = time.perf_counter()

    def mel(self, tokens: list[int], voice: Voice, *, streaming: bool, finalize: bool) -> np.ndarray:
        t0 = time.perf_counter()
        mel = self.flow(mx.array(np.asarray(tokens, np.int64)), mx.array(voice.tokens), mx.array(voice.feat),
                        mx.array(voice.embedding), self._flow_noise, streaming=streaming, finalize=finalize)
        out = np.array(mel, np.float32)
        self._add("flow_s", time.perf_counter() - t0)
        return out

    def wav(self, mel: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        n = mel.shape[0] * self.args.hift.upsample_scale
        rng = np.random.default_rng(SINE_NOISE_SEED)
        noise = mx.array(rng.random((n, self.args.hift.nb_harmonics + 1), dtype=np.float32))
        out = np.array(self.hift(mx.array(mel), noise)[0], np.float32)
        self._add("hift_s", time.perf_counter() - t0)
        return out

    def _add(self, key: str, dt: float) -> None:
        self.stats.decoder_s += dt
        self.stats.extra[key] = self.stats.extra.get(key, 0.0) + dt

    def checked_voice(self, request: Request) -> Voice:
        """The request's voice, after refusing a speed this pipeline cannot give it."""
        voice = self.voice(request)
        if request.speed <= 0:
            raise UsageError(f"--speed must be positive, got {request.speed}")
        if request.stream and request.speed != 1.0:
            raise UsageError("CosyVoice3 changes speed only without --stream (upstream stretches the whole mel)")
        return voice

    def whole(self, tokens: list[int], voice: Voice, speed: float) -> np.ndarray:
        """A one-shot utterance: the flow over every token without the chunk mask, the mel
        stretched to ``speed``, then HiFT (empty when the LM stopped at once)."""
        if not tokens:
            return np.zeros(0, np.float32)
        mel = self.mel(tokens, voice, streaming=False, finalize=True)
        if speed != 1.0:
            mel = stretch(mel, speed)
        return self.wav(mel)

    def generate(self, request: Request) -> Iterator[np.ndarray]:
        t_start = time.perf_counter()
        voice = self.checked_voice(request)
        if request.stream:
            yield from self._stream(request, voice, t_start)
            return
        toks = list(self.tokens(request, voice))
        self.stats.decoder_frames += len(toks)
        wav = self.whole(toks, voice, request.speed)
        if len(wav):
            self.stats.first_audio_s = self.stats.first_audio_s or time.perf_counter() - t_start
        yield wav

    def rows(self):
        """Requests as rows of one LM batch (ttscli.models.cosyvoice3.rows). The rows run the
        MLX LM: with the LM's float32 ONNX graph as the code decoder that is the same arithmetic
        (the graph is built from these weights), and one batched MLX step reads the weights once
        for every row; a quantized graph's numbers are its own, so an int8/int4 code decoder takes
        one request at a time instead."""
        if self.backends.get("code_decoder", "mlx") not in ("mlx", "onnx-float32"):
            return None
        from ttscli.models.cosyvoice3.rows import CosyVoice3Rows

        return CosyVoice3Rows(self)

    def _stream(self, r: Request, voice: Voice, t_start: float) -> Iterator[np.ndarray]:
        s = TokenStream(self, voice)

        def seen(piece: np.ndarray) -> np.ndarray:
            if self.stats.first_audio_s is None and len(piece):
                self.stats.first_audio_s = time.perf_counter() - t_start
            return piece

        for tok in self.tokens(r, voice):
            piece = s.add(tok)
            if piece is not None and len(piece):
                yield seen(piece)
        self.stats.decoder_frames += len(s.tokens)
        yield seen(s.end())


class TokenStream:
    """One streamed generation (module docstring): tokens go in as the LM draws them, audio
    comes out as each hop's pass releases it, the rest at ``end``. The single path and the
    batched rows both stream through it, so a streamed row is cut exactly as the request alone."""

    def __init__(self, pipe: CosyVoice3Pipeline, voice: Voice):
        self.pipe, self.voice = pipe, voice
        self.tokens: list[int] = []
        self.mel: np.ndarray | None = None      # the mel of the hops passed so far
        self.offset = 0                         # tokens whose mel is final
        self.released = 0                       # samples already handed out
        self.hop = TOKEN_HOP
        self.pad = -len(voice.tokens) % TOKEN_HOP   # the reference padded to whole hops

    def add(self, tok: int) -> np.ndarray | None:
        """Take one token; the audio a completed hop releases, or None (no pass yet)."""
        self.tokens.append(tok)
        flow = self.pipe.args.flow
        hop = self.hop + self.pad if self.offset == 0 else self.hop
        if len(self.tokens) - self.offset < hop + flow.pre_lookahead_len:
            return None
        mel = self.pipe.mel(self.tokens[: self.offset + hop + flow.pre_lookahead_len], self.voice,
                            streaming=True, finalize=False)
        self._add_mel(mel[self.offset * flow.token_mel_ratio:])
        self.offset += hop
        self.hop = next_hop(self.hop)
        return self._release(final=False)

    def end(self) -> np.ndarray:
        """The last pass: upstream runs the flow without the chunk mask (token2wav's stream=False)."""
        if not self.tokens:
            return np.zeros(0, np.float32)
        mel = self.pipe.mel(self.tokens, self.voice, streaming=False, finalize=True)
        self._add_mel(mel[self.offset * self.pipe.args.flow.token_mel_ratio:])
        return self._release(final=True)

    def _add_mel(self, mel: np.ndarray) -> None:
        self.mel = mel if self.mel is None else np.concatenate([self.mel, mel])

    def _release(self, final: bool) -> np.ndarray:
        audio = self.pipe.wav(self.mel)
        end = audio.shape[0] if final else self.pipe.hift.final_samples(self.mel.shape[0])
        piece, self.released = audio[self.released:end], max(self.released, end)
        return piece


def stretch(mel: np.ndarray, speed: float) -> np.ndarray:
    """Upstream's speed change: the mel linearly resampled in time to ``T / speed`` frames
    (``F.interpolate(mode="linear")``, half-pixel centres)."""
    n = mel.shape[0]
    m = max(int(n / speed), 1)
    pos = np.clip((np.arange(m) + 0.5) * (n / m) - 0.5, 0, n - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    w = (pos - lo)[:, None].astype(np.float32)
    return (mel[lo] * (1 - w) + mel[hi] * w).astype(np.float32)

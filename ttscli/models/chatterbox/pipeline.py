"""Chatterbox pipeline: text -> T3 speech tokens (voice-conditioned, CFG) -> S3Gen -> 24 kHz.

The voice is the default one from ``conds.pt``, a reference recording (``clone --ref``: voice
encoder + S3 tokens of its first 6 s for T3, S3Gen's reference dict from its first 10 s), or a
saved voice (``--voice v.safetensors``: the same tensors, nothing re-encoded).
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ttscli.codecs.s3gen import S3GenTimes, hop_tokens
from ttscli.errors import UsageError
from ttscli.voicefile import is_voice_file
from ttscli.models.base import Pipeline, Request
from ttscli.models.chatterbox.conds import Conditionals
from ttscli.models.chatterbox.t3 import T3Sampling
from ttscli.models.chatterbox.tokenizer import punc_norm

SAMPLE_RATE = 24000
S3_SR = 16000
ENC_COND_LEN = 6 * S3_SR          # T3's prompt tokens come from the first 6 s
DEC_COND_LEN = 10 * SAMPLE_RATE   # S3Gen's reference: the first 10 s
SPEECH_CODES = 6561               # ids below are speech; 6561 / 6562 are start / stop


def speech_tokens(tokens: list[int]) -> np.ndarray:
    """What upstream hands S3Gen: after a start-of-speech the sampler may have drawn, before a
    stop, and only real codes (T3's head also scores 1631 unused ids)."""
    t = np.asarray(tokens, np.int64)
    sos = np.flatnonzero(t == SPEECH_CODES)
    if sos.size:
        t = t[sos[0] + 1:]
    eos = np.flatnonzero(t == SPEECH_CODES + 1)
    if eos.size:
        t = t[:eos[0]]
    return t[t < SPEECH_CODES]


def s3gen_key(r: Request):
    """The key of S3Gen's random draws (the CFM's noise, HiFT's source) for a seeded request,
    derived from its seed apart from T3's key stream: a seeded request's audio is then the same
    whether it runs alone or as a row of a batch. None (no seed): MLX's global generator."""
    if r.seed is None:
        return None
    import mlx.core as mx

    return mx.random.split(mx.random.key(r.seed), 3)[2]


def perth_watermarker():
    """Resemble's Perth watermarker, as upstream applies it to every output.  It is a PyTorch
    model (resemble-perth ships its weights and runs offline, but needs torch and librosa), so
    ttscli does not depend on it: ``--watermark`` uses it when it is installed."""
    try:
        import perth
    except ImportError as e:
        raise UsageError("--watermark needs Resemble's Perth watermarker: pip install resemble-perth torch "
                         f"librosa (it runs on PyTorch; {e.name or 'perth'} is missing)") from None
    return perth.PerthImplicitWatermarker()



class ChatterboxPipeline(Pipeline):
    sample_rate = SAMPLE_RATE
    max_chunk_chars = 300             # upstream's advice: T3 degrades on long inputs; chunk by sentence
    ref_sample_rate = SAMPLE_RATE     # upstream loads references at 24 kHz, then derives 16 kHz
    independent_generations = True    # T3's cache, key stream and S3Gen's stream state per generation

    def __init__(self, spec: Any, t3, ve, tokenizer, s3gen, conds: Conditionals | None, decoder=None,
                 backends: dict[str, str] | None = None):
        super().__init__()
        self.spec, self.t3, self.ve, self.tokenizer, self.s3gen = spec, t3, ve, tokenizer, s3gen
        self.default_conds, self.decoder = conds, decoder
        self.backends = dict(backends or {"code_decoder": "mlx", "speech_decoder": "mlx", "voice_encoder": "mlx"})
        self._voice_cache: tuple[Any, Conditionals] | None = None

    # -- the voice ----------------------------------------------------------------------------------
    def conditionals(self, r: Request) -> Conditionals:
        if r.voice and not is_voice_file(r.voice):
            raise UsageError(f"Chatterbox has no preset voices ({r.voice!r}): clone one with --ref, "
                             "pass a saved voice .safetensors, or leave --voice out for the default voice")
        if is_voice_file(r.voice):
            return Conditionals.load(Path(r.voice))
        if r.ref_audio is None:
            if self.default_conds is None:
                raise UsageError("this Chatterbox folder has no conds.pt (default voice): clone with --ref")
            return self.default_conds
        key = (id(r.ref_audio), r.ref_sample_rate, r.save_voice)
        if self._voice_cache is not None and self._voice_cache[0] == key:
            return self._voice_cache[1]
        conds = self.clone_conditionals(np.asarray(r.ref_audio, np.float32).reshape(-1),
                                        r.ref_sample_rate or SAMPLE_RATE)
        if r.save_voice:
            conds.save(Path(r.save_voice))
        self._voice_cache = (key, conds)
        return conds

    def clone_conditionals(self, wav: np.ndarray, sample_rate: int) -> Conditionals:
        """The reference's ``prepare_conditionals`` on a mono recording."""
        from ttscli.audio import resample

        wav24 = wav if sample_rate == SAMPLE_RATE else resample(wav, sample_rate, SAMPLE_RATE)
        wav16 = resample(wav24, SAMPLE_RATE, S3_SR)
        gen = self.s3gen.embed_ref(wav24[:DEC_COND_LEN], SAMPLE_RATE)
        prompt = np.asarray(self.s3gen.tokenize(wav16[:ENC_COND_LEN], max_tokens=self.t3.args.speech_cond_prompt_len))
        speaker = self.ve.embed(wav16)
        return Conditionals(speaker, prompt.reshape(1, -1).astype(np.int64), 0.5, dict(gen))

    # -- generation ---------------------------------------------------------------------------------
    def sampling(self, r: Request) -> T3Sampling:
        k = r.knobs
        base = T3Sampling()
        return T3Sampling(temperature=k.get("temperature", base.temperature), min_p=k.get("min_p", base.min_p),
                          top_p=k.get("top_p", base.top_p),
                          repetition_penalty=k.get("repetition_penalty", base.repetition_penalty),
                          cfg_weight=k.get("cfg_weight", base.cfg_weight),
                          max_new_tokens=r.max_frames or base.max_new_tokens)

    def tokens(self, r: Request) -> Iterator[int]:
        """T3's speech tokens for one chunk, timing each (stats.frame_s). A token's time runs
        from when it was asked for, so what the consumer does in between (S3Gen's passes when
        streaming) is not T3's."""
        from ttscli.lm.sample import KeyStream

        conds = self.conditionals(r)
        cond = conds.t3_cond(r.knobs.get("exaggeration", 0.5))
        ids = self.tokenizer.encode(punc_norm(r.text))
        keys = KeyStream(r.seed)
        t0 = time.perf_counter()
        first = True
        for tok in self.t3.generate(cond, ids, self.sampling(r), decoder=self.decoder, keys=keys,
                                    ignore_eos=r.ignore_eos):
            dt = time.perf_counter() - t0
            if first:
                self.stats.prefill_s += dt
                self.stats.prefill_tokens += 34 + len(ids) + 4
                first = False
            else:
                self.stats.frame_s.append(dt)
            self.stats.frames += 1
            self.stats.extra["t3_s"] = self.stats.extra.get("t3_s", 0.0) + dt
            yield tok
            t0 = time.perf_counter()
        # the step that drew the stop token yields nothing but is T3's too
        self.stats.extra["t3_s"] = self.stats.extra.get("t3_s", 0.0) + time.perf_counter() - t0

    def generate(self, request: Request) -> Iterator[np.ndarray]:
        t_start = time.perf_counter()
        mark = bool(request.knobs.get("watermark", False))
        if mark and request.stream:
            raise UsageError("--watermark marks a whole utterance; it cannot be combined with --stream")
        watermarker = perth_watermarker() if mark else None
        first = self.first_chunk(request) if request.stream else 0
        conds = self.conditionals(request)
        if request.stream:
            yield from self._stream(request, conds, t_start, first)
            return
        toks = speech_tokens(list(self.tokens(request)))
        times = S3GenTimes()
        wav = np.asarray(self.s3gen.generate(toks, conds.gen, key=s3gen_key(request), times=times), np.float32)
        self._add_times(times)
        self.stats.decoder_frames += len(toks)
        if watermarker is not None:
            wav = np.asarray(watermarker.apply_watermark(wav, sample_rate=SAMPLE_RATE), np.float32)
        self.stats.first_audio_s = self.stats.first_audio_s or time.perf_counter() - t_start
        yield wav

    def rows(self):
        """Requests as rows of one T3 batch (ttscli.models.chatterbox.rows): an MLX T3 only
        (a converted one takes one row per call)."""
        if self.backends.get("code_decoder") != "mlx" or self.decoder is not None:
            return None
        from ttscli.models.chatterbox.rows import ChatterboxRows

        return ChatterboxRows(self)

    def first_chunk(self, r: Request) -> int:
        """Speech tokens in the first streamed chunk: the request's, or (None) the fewest from
        which S3Gen's first pass already yields audio. Fewer than that is refused: that chunk
        would make no sound and the first audio would wait for the next chunk."""
        need = self.s3gen.first_audio_tokens
        n = need if r.first_chunk_frames is None else int(r.first_chunk_frames)
        if n < need:
            look = self.s3gen.flow.a.pre_lookahead_len
            raise UsageError(f"--first-chunk-frames {n}: Chatterbox's first streamed audio needs at least {need} "
                             f"speech tokens ({look} of lookahead for the flow, {need - look - 1} of vocoder "
                             f"context, 1 to play); give {need} or more, or leave it out")
        if r.chunk_frames < 1:
            raise UsageError(f"--chunk-frames must be at least 1, got {r.chunk_frames}")
        return n

    def _add_times(self, times: S3GenTimes) -> None:
        s = self.stats
        s.decoder_s += times.total_s
        for k, v in (("s3gen_flow_s", times.flow_s), ("s3gen_hift_s", times.hift_s),
                     ("s3gen_passes", times.passes)):
            s.extra[k] = s.extra.get(k, 0) + v

    def _stream(self, r: Request, conds: Conditionals, t_start: float, first: int) -> Iterator[np.ndarray]:
        """Speech tokens go to S3Gen.stream in chunks: ``first`` of them, then ``r.chunk_frames``,
        then hops doubling up to 100 tokens as CosyVoice2 streams the same flow
        (:func:`~ttscli.codecs.s3gen.hop_tokens`); the chunk T3 ends on is marked last, so its pass
        is the final one.

        Only speech codes count towards a chunk (an unused id or a start/stop token is not sent,
        and would leave the first pass short of audio). Audio already played cannot be taken
        back, so a start-of-speech drawn mid-stream (after which the one-shot path, like upstream,
        keeps only what follows) is merely dropped here."""
        times = S3GenTimes()

        def chunks() -> Iterator[tuple[np.ndarray, bool]]:
            buf: list[int] = []
            sent = 0
            for tok in self.tokens(r):
                if tok < SPEECH_CODES:
                    buf.append(tok)
                if len(buf) >= hop_tokens(first, r.chunk_frames, sent):
                    self.stats.decoder_frames += len(buf)
                    yield np.asarray(buf, np.int64), False
                    buf, sent = [], sent + 1
            self.stats.decoder_frames += len(buf)
            yield np.asarray(buf, np.int64), True

        try:
            for piece in self.s3gen.stream(chunks(), conds.gen, key=s3gen_key(r), times=times):
                if self.stats.first_audio_s is None and len(piece):
                    self.stats.first_audio_s = time.perf_counter() - t_start
                yield np.asarray(piece, np.float32)
        finally:
            self._add_times(times)

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

from ttscli.errors import UsageError
from ttscli.voicefile import is_voice_file
from ttscli.generate import Request
from ttscli.models.base import Pipeline
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
        """T3's speech tokens for one chunk, timing each (stats.frame_s)."""
        from ttscli.lm.sample import KeyStream

        conds = self.conditionals(r)
        cond = conds.t3_cond(r.knobs.get("exaggeration", 0.5))
        ids = self.tokenizer.encode(punc_norm(r.text))
        keys = KeyStream(r.seed)
        t0 = time.perf_counter()
        first = True
        for tok in self.t3.generate(cond, ids, self.sampling(r), decoder=self.decoder, keys=keys,
                                    ignore_eos=r.ignore_eos):
            now = time.perf_counter()
            if first:
                self.stats.prefill_s += now - t0
                self.stats.prefill_tokens += 34 + len(ids) + 4
                first = False
            else:
                self.stats.frame_s.append(now - t0)
            self.stats.frames += 1
            t0 = now
            yield tok

    def generate(self, request: Request) -> Iterator[np.ndarray]:
        t_start = time.perf_counter()
        mark = bool(request.knobs.get("watermark", False))
        if mark and request.stream:
            raise UsageError("--watermark marks a whole utterance; it cannot be combined with --stream")
        watermarker = perth_watermarker() if mark else None
        conds = self.conditionals(request)
        if request.stream:
            yield from self._stream(request, conds, t_start)
            return
        toks = speech_tokens(list(self.tokens(request)))
        td = time.perf_counter()
        wav = np.asarray(self.s3gen.generate(toks, conds.gen), np.float32)
        self.stats.decoder_s += time.perf_counter() - td
        self.stats.decoder_frames += len(toks)
        if watermarker is not None:
            wav = np.asarray(watermarker.apply_watermark(wav, sample_rate=SAMPLE_RATE), np.float32)
        self.stats.first_audio_s = self.stats.first_audio_s or time.perf_counter() - t_start
        yield wav

    def _stream(self, r: Request, conds: Conditionals, t_start: float) -> Iterator[np.ndarray]:
        """Tokens go to S3Gen.stream in chunks (first chunk small, for early audio).

        Audio already played cannot be taken back, so a start-of-speech drawn mid-stream (after
        which the one-shot path, like upstream, keeps only what follows) is merely dropped here."""
        sizes = [max(1, r.first_chunk_frames)] + [max(1, r.chunk_frames)]

        def chunks() -> Iterator[np.ndarray]:
            buf: list[int] = []
            sent = 0
            for tok in self.tokens(r):
                buf.append(tok)
                if len(buf) >= (sizes[0] if sent == 0 else sizes[1]):
                    out = np.asarray([t for t in buf if t < SPEECH_CODES], np.int64)
                    buf = []
                    if out.size:
                        sent += 1
                        self.stats.decoder_frames += len(out)
                        yield out
            out = np.asarray([t for t in buf if t < SPEECH_CODES], np.int64)
            if out.size:
                self.stats.decoder_frames += len(out)
                yield out

        for piece in self.s3gen.stream(chunks(), conds.gen):
            if self.stats.first_audio_s is None:
                self.stats.first_audio_s = time.perf_counter() - t_start
            yield np.asarray(piece, np.float32)

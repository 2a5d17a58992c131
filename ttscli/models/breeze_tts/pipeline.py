"""Breeze TTS 2 pipeline: request -> prompt(s) -> frames -> 24 kHz audio.

Modes by what the request carries: plain text; ``--instruct`` (voice design); a reference
(``clone --ref --ref-text``, or a saved voice file) for voice clone; both for voice direction.
Audio comes from the Qwen3-TTS 12 Hz decoder in audio_tokenizer/ through one exact streaming
cache, so streamed chunks equal the one-shot decode. Upstream decodes only the generated
frames (the reference is not the decoder's left context).
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ttscli.errors import UsageError
from ttscli.models.base import Pipeline, Request
from ttscli.models.breeze_tts.config import GenerationConfig
from ttscli.models.breeze_tts.family import FAMILY
from ttscli.models.breeze_tts.loop import LoopConfig, generate_frames
from ttscli.models.breeze_tts.prompt import Voice, prompts
from ttscli.models.breeze_tts.voice import load_voice, save_voice
from ttscli.voicefile import is_voice_file

SAMPLE_RATE = 24000
KNOBS = ("cfg_scale",)


class BreezePipeline(Pipeline):
    sample_rate = SAMPLE_RATE
    max_chunk_chars = 400
    ref_sample_rate = SAMPLE_RATE
    independent_generations = True    # LM caches, key stream and speech decoder state per generation

    def __init__(self, spec: Any, model, gen: GenerationConfig, tokenizer, speech_decoder, code_decoder,
                 checkpoint: Path | None = None):
        super().__init__()
        self.spec = spec
        self.model = model
        self.gen = gen
        self.tokenizer = tokenizer
        self.speech_decoder = speech_decoder
        self.code_decoder = code_decoder
        self.checkpoint = checkpoint
        self.backends = {"code_decoder": "mlx", "code_predictor": "mlx", "speech_decoder": "mlx"}
        self._speech_encoder = None
        self._voice_cache: tuple[Any, Voice] | None = None

    @property
    def args(self):
        return self.model.args

    # ---------------------------------------------------------------- voices
    def speech_encoder(self):
        if self._speech_encoder is None:
            from ttscli.codecs.qwen3_12hz.encoder import load_speech_encoder

            if self.checkpoint is None:
                raise UsageError("cloning needs the real audio tokenizer (not available with random weights)")
            self._speech_encoder = load_speech_encoder(self.checkpoint / "audio_tokenizer")
        return self._speech_encoder

    def voice(self, r: Request) -> Voice | None:
        if is_voice_file(r.voice):
            if r.ref_audio is not None:
                raise UsageError("give either a saved voice (--voice x.safetensors) or reference audio (--ref), "
                                 "not both")
            return load_voice(Path(r.voice), self.args)
        if r.voice and r.voice not in ("S0", "[S0]"):
            raise UsageError(f"Breeze TTS 2 has no preset voice {r.voice!r}: describe one with --instruct, "
                             "clone one with --ref, or pass a saved voice .safetensors")
        if r.ref_audio is None:
            if r.save_voice:
                raise UsageError("--save-voice needs reference audio (--ref) to encode")
            return None
        if not r.ref_text:
            raise UsageError("Breeze clones from reference audio with its transcript: give --ref-text")
        wav = np.asarray(r.ref_audio, np.float32).reshape(-1)
        digest = hashlib.blake2b(wav.tobytes(), digest_size=16).hexdigest()
        key = (digest, r.ref_sample_rate, r.ref_text)
        if self._voice_cache and self._voice_cache[0] == key:
            v = self._voice_cache[1]
            if r.save_voice:
                save_voice(Path(r.save_voice), v, getattr(self.spec, "id", "?"), self.args)
            return v
        if r.ref_sample_rate and r.ref_sample_rate != SAMPLE_RATE:
            import soxr

            wav = soxr.resample(wav, r.ref_sample_rate, SAMPLE_RATE).astype(np.float32)
        codes = np.asarray(self.speech_encoder().encode(wav), np.int32)
        if codes.ndim != 2 or codes.shape[0] == 0:
            raise UsageError("the reference audio is too short to encode (no frame)")
        v = Voice(codes[:, :self.args.num_codebooks], r.ref_text)
        if r.save_voice:
            save_voice(Path(r.save_voice), v, getattr(self.spec, "id", "?"), self.args)
        self._voice_cache = (key, v)
        return v

    # ---------------------------------------------------------------- generation
    def loop_config(self, r: Request) -> LoopConfig:
        sampling = {k: v for k, v in r.knobs.items() if k not in KNOBS}
        cfg = LoopConfig.from_generation_config(self.gen, sampling, r.max_frames)
        cfg.ignore_eos = r.ignore_eos
        return cfg

    def cfg_scale(self, r: Request) -> float:
        v = r.knobs.get("cfg_scale")
        return 1.0 if v is None else float(v)

    def frames(self, r: Request) -> Iterator[np.ndarray]:
        cfg = self.loop_config(r)
        voice = self.voice(r)
        cond, uncond, scale = prompts(self.model, self.tokenizer, r.text, r.instruct, voice, self.cfg_scale(r))
        return generate_frames(self.model, self.code_decoder, cond, uncond, scale, cfg, seed=r.seed,
                               stats=self.stats)

    def rows(self):
        """Requests as rows of one backbone batch (ttscli.models.breeze_tts.rows): an MLX
        backbone only (a converted one takes one row per call)."""
        from ttscli.lm.decoder import MLXCodeDecoder

        if not isinstance(self.code_decoder, MLXCodeDecoder) or hasattr(self.code_decoder, "depth_frame"):
            return None
        from ttscli.models.breeze_tts.rows import BreezeRows

        return BreezeRows(self)

    def generate(self, request: Request) -> Iterator[np.ndarray]:
        from ttscli.codecs.qwen3_12hz.streaming import StreamingDecoder, decode_timed

        t0 = time.perf_counter()
        frames = self.frames(request)
        if request.stream:
            sd = StreamingDecoder(self.speech_decoder, FAMILY.first_chunk(request.first_chunk_frames),
                                  max(1, request.chunk_frames))
        else:
            sd = StreamingDecoder(self.speech_decoder, 50, 50)
        yield from decode_timed(sd, frames, request.stream, self.stats, t0)

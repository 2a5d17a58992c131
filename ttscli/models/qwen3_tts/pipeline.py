"""Qwen3-TTS pipeline: request -> voice prompt -> talker prompt -> frames -> 24 kHz audio.

Components and where they run: text tokenizer (``tokenizers``), talker behind
:class:`~ttscli.models.qwen3_tts.loop.CodeDecoder` (MLX, or Core ML when converted), code
predictor / embeddings / sampling (MLX), speaker encoder and speech encoder (MLX, Base clone
only, loaded on first use), speech decoder (``ttscli.codecs.qwen3_12hz``, MLX).
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Iterator

import mlx.core as mx
import numpy as np

from ttscli.errors import InputTooLongError, UsageError
from ttscli.lm import CodeDecoder
from ttscli.models.base import Pipeline, Request
from ttscli.models.qwen3_tts.config import GenerationConfig
from ttscli.models.qwen3_tts.family import FAMILY
from ttscli.models.qwen3_tts.loop import LoopConfig, generate_frames
from ttscli.models.qwen3_tts.model import Qwen3TTSModel
from ttscli.models.qwen3_tts.prompt import Prompt, VoicePrompt, prepare, ref_text_template
from ttscli.models.qwen3_tts.voice import load_voice, save_voice
from ttscli.voicefile import is_voice_file

SAMPLE_RATE = 24000
MAX_PROMPT = 4096


class Qwen3TTSPipeline(Pipeline):
    sample_rate = SAMPLE_RATE
    max_chunk_chars = 400
    ref_sample_rate = SAMPLE_RATE
    independent_generations = True    # talker cache, key stream and speech decoder state per generation

    def __init__(self, spec: Any, model: Qwen3TTSModel, gen: GenerationConfig, tokenizer, speech_decoder,
                 code_decoder: CodeDecoder, checkpoint: Path | None = None, random_weights: bool = False):
        super().__init__()
        self.spec = spec
        self.model = model
        self.gen = gen
        self.tokenizer = tokenizer
        self.speech_decoder = speech_decoder
        self.code_decoder = code_decoder
        # Core ML talkers keep their KV cache in per-request state, but the code predictor and
        # speech decoder here are MLX, and concurrent MLX evaluation is not safe: one chunk at a time
        # (Pipeline.concurrent_safe stays False).
        self.backends = {"code_decoder": "coreml" if type(code_decoder).__name__.startswith("CoreML") else "mlx",
                         "code_predictor": "mlx", "speech_decoder": "mlx"}
        self.checkpoint = checkpoint
        self.random_weights = random_weights
        self._speech_encoder = None
        self._voice_cache: tuple[Any, VoicePrompt] | None = None

    # ---------------------------------------------------------------- voices
    @property
    def args(self):
        return self.model.args

    def list_voices(self) -> list[str]:
        return self.args.speakers

    def speech_encoder(self):
        if self._speech_encoder is None:
            from ttscli.codecs.qwen3_12hz.encoder import load_speech_encoder

            if self.checkpoint is None:
                raise UsageError("in-context clone needs the real speech tokenizer; "
                                 "use --x-vector-only with random weights")
            self._speech_encoder = load_speech_encoder(self.checkpoint / "speech_tokenizer")
        return self._speech_encoder

    def voice_prompt(self, r: Request) -> VoicePrompt | None:
        """The clone voice for a Base model, from a saved file or the reference audio (cached per request)."""
        if not self.args.is_base:
            return None
        enc_dim = (self.args.speaker_encoder_config or {}).get("enc_dim", self.args.talker_config.hidden_size)
        if is_voice_file(r.voice):
            return load_voice(Path(r.voice), self.args.tts_model_size, enc_dim)
        if r.ref_audio is None:
            if self.random_weights:  # bench: any speaker vector will do
                return VoicePrompt(mx.random.normal((enc_dim,), key=mx.random.key(0)))
            raise UsageError("Base models clone a voice: give reference audio (--ref) "
                             "or a saved voice (--voice x.safetensors)")
        wav = np.asarray(r.ref_audio, np.float32).reshape(-1)
        # Every text chunk of one request carries the same reference: encode it once.
        digest = hashlib.blake2b(wav.tobytes(), digest_size=16).hexdigest()
        x_vector_only = bool(r.knobs.get("x_vector_only", False))
        key = (digest, r.ref_sample_rate, r.ref_text, x_vector_only)
        if self._voice_cache and self._voice_cache[0] == key:
            return self._voice_cache[1]
        if r.ref_sample_rate and r.ref_sample_rate != SAMPLE_RATE:
            import soxr

            wav = soxr.resample(wav, r.ref_sample_rate, SAMPLE_RATE).astype(np.float32)
        xvec = self.model.speaker_encoder.embed(mx.array(wav))
        if x_vector_only:
            voice = VoicePrompt(xvec)
        else:
            if not r.ref_text:
                raise UsageError("in-context clone needs the transcript of the reference (--ref-text), "
                                 "or use --x-vector-only")
            codes = mx.array(np.asarray(self.speech_encoder().encode(wav), np.int32))
            voice = VoicePrompt(xvec, codes, r.ref_text, self.tokenizer.encode(ref_text_template(r.ref_text)))
        mx.eval(voice.x_vector)
        if r.save_voice:
            save_voice(Path(r.save_voice), voice, getattr(self.spec, "id", "?"), self.args.tts_model_size)
        self._voice_cache = (key, voice)
        return voice

    # ---------------------------------------------------------------- generation
    def loop_config(self, r: Request) -> LoopConfig:
        sampling = {k: v for k, v in r.knobs.items() if k not in ("x_vector_only", "non_streaming_mode")}
        cfg = LoopConfig.from_generation_config(self.gen, sampling, r.max_frames)
        cfg.ignore_eos = r.ignore_eos
        return cfg

    def prompt_for(self, r: Request) -> tuple[Prompt, VoicePrompt | None]:
        """The talker prompt of one chunk request and its clone voice (None without one), after
        the checks of what this model can do; the one prompt builder of single and batched rows."""
        if self.args.is_base and r.voice and not is_voice_file(r.voice):
            raise UsageError(f"Base models have no preset voices ({r.voice!r}); clone one with --ref or pass a "
                             "saved voice .safetensors")
        if not self.args.is_base and (is_voice_file(r.voice) or r.ref_audio is not None):
            raise UsageError("voice cloning (reference audio or a saved voice file) needs a Base model, "
                             "e.g. qwen3-tts-0.6b-base")
        voice = self.voice_prompt(r)
        speaker = None if is_voice_file(r.voice) or self.args.is_base else r.voice
        if self.args.tts_model_type == "custom_voice" and not speaker:
            speaker = (getattr(self.spec, "defaults", {}) or {}).get("voice")
        prompt = prepare(self.model.talker, self.args, self.tokenizer, r.text, language=r.language,
                         speaker=speaker, instruct=r.instruct, voice=voice,
                         non_streaming=r.knobs.get("non_streaming_mode"))
        if prompt.embeds.shape[1] > MAX_PROMPT:
            raise InputTooLongError(f"the prompt is {prompt.embeds.shape[1]} tokens, "
                                    f"over the {MAX_PROMPT}-token limit; "
                                    "shorten the text chunk, instruction or reference audio")
        return prompt, voice

    def frames(self, r: Request) -> tuple[Iterator[np.ndarray], VoicePrompt | None]:
        prompt, voice = self.prompt_for(r)
        it = generate_frames(self.model.talker, self.code_decoder, prompt, self.loop_config(r),
                             seed=r.seed, stats=self.stats)
        return it, voice

    def rows(self):
        """Chunk requests as rows of one talker batch (ttscli.models.qwen3_tts.batched); the
        batch is one MLX forward, so an MLX talker only."""
        if self.backends["code_decoder"] != "mlx":
            return None
        from ttscli.models.qwen3_tts.batched import Qwen3Rows

        return Qwen3Rows(self)

    def speech_stream(self, voice: VoicePrompt | None, first_frames: int = 50, chunk_frames: int = 50):
        """The speech decoder for one chunk's frames (a ``StreamingDecoder``: exact, bounded
        chunks); an in-context voice's reference frames are already its left context (upstream
        decodes ref + generated in one pass and cuts the reference audio off)."""
        from ttscli.codecs.qwen3_12hz import StreamingDecoder

        sd = StreamingDecoder(self.speech_decoder, first_frames, chunk_frames)
        if voice is not None and voice.ref_codes is not None:
            mx.eval(self.speech_decoder(voice.ref_codes.astype(mx.int32), sd.cache))
        return sd

    def generate(self, request: Request) -> Iterator[np.ndarray]:
        from ttscli.codecs.qwen3_12hz.streaming import decode_timed

        t0 = time.perf_counter()
        frames, voice = self.frames(request)
        if request.stream:
            sd = self.speech_stream(voice, FAMILY.first_chunk(request.first_chunk_frames),
                                    max(1, request.chunk_frames))
        else:  # one-shot output, decoded in bounded chunks through one exact cache
            sd = self.speech_stream(voice)
        yield from decode_timed(sd, frames, request.stream, self.stats, t0)

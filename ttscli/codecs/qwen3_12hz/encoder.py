"""Qwen3-TTS-Tokenizer-12Hz encoder: 24 kHz waveform -> 16 codebook indices per 80 ms frame.

It is Mimi's encoder (:mod:`ttscli.codecs.mimi`) as the tokenizer publishes it: the
``encoder_config`` of ``speech_tokenizer/config.json`` is a MimiConfig, the weights are the
``encoder.*`` tensors of ``model.safetensors``. Only the first ``encoder_valid_num_quantizers``
levels are kept, as upstream does. Voice cloning uses it once per reference clip (Qwen3-TTS's
``speech_tokenizer/``, Breeze TTS's ``audio_tokenizer/``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttscli.checkpoint import load_strict, read_component
from ttscli.codecs.mimi import MimiArgs, MimiEncoder
from ttscli.config import read_json
from ttscli.errors import CheckpointError

PREFIX = "encoder."
IGNORED_PREFIXES = ("decoder.",)


@dataclass
class EncoderArgs(MimiArgs):
    """``encoder_config`` of speech_tokenizer/config.json (MimiConfig defaults) plus the top-level fields."""

    encoder_valid_num_quantizers: int = 16
    encode_downsample_rate: int = 1920

    @classmethod
    def from_config(cls, config: dict, source: str = "speech_tokenizer/config.json") -> "EncoderArgs":
        args = cls.from_section(config, "encoder_config", ("encoder_valid_num_quantizers", "encode_downsample_rate"),
                                source=source)
        args.check("speech_tokenizer encoder_config")
        if not args.num_semantic_quantizers < args.encoder_valid_num_quantizers <= args.num_quantizers:
            raise CheckpointError("speech_tokenizer config.json: encoder_valid_num_quantizers must be in "
                                  "(num_semantic_quantizers, num_quantizers]")
        return args


class SpeechEncoder(MimiEncoder):
    """Mimi's encoder, keeping the tokenizer's valid levels and its frame count."""

    def encode(self, wav_24k) -> np.ndarray:
        """Codes ``[ceil(N / 1920), encoder_valid_num_quantizers]`` int32 of one mono 24 kHz waveform."""
        codes = super().encode(wav_24k, self.args.encoder_valid_num_quantizers)
        return codes[: -(-len(wav_24k) // self.args.encode_downsample_rate)]


def load_speech_encoder(path: Path, dtype: str = "float32") -> SpeechEncoder:
    """Encoder half of ``speech_tokenizer/`` (config.json + model.safetensors): strict on ``encoder.*``."""
    path = Path(path)
    model = SpeechEncoder(EncoderArgs.from_config(read_json(path / "config.json"), source=str(path / "config.json")))
    weights, source = read_component(path, PREFIX, others=IGNORED_PREFIXES)
    return load_strict(model, weights, dtype=dtype, source=source, where=PREFIX, hint="re-download the checkpoint")


def build_random_speech_encoder(seed: int = 0, args: EncoderArgs | None = None) -> SpeechEncoder:
    """Encoder at the published dimensions (or ``args``) with deterministic random weights, for bench."""
    return SpeechEncoder.random(args or EncoderArgs(), seed)

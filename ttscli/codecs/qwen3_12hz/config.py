"""Speech-tokenizer decoder configuration (``decoder_config`` of speech_tokenizer/config.json)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ttscli.config import BaseArgs, read_json
from ttscli.errors import CheckpointError


@dataclass
class DecoderArgs(BaseArgs):
    """Defaults are the released Qwen3-TTS-Tokenizer-12Hz values; unknown keys are ignored."""

    codebook_size: int = 2048
    codebook_dim: int = 512                 # RVQ output width; each codebook is codebook_dim // 2 wide
    num_quantizers: int = 16
    num_semantic_quantizers: int = 1
    latent_dim: int = 1024
    hidden_size: int = 512
    intermediate_size: int = 1024
    num_hidden_layers: int = 8
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int | None = 64
    attention_bias: bool = False
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    sliding_window: int = 72
    decoder_dim: int = 1536
    upsample_rates: list[int] = field(default_factory=lambda: [8, 5, 4, 3])
    upsampling_ratios: list[int] = field(default_factory=lambda: [2, 2])
    output_sample_rate: int = 24000         # top-level field of config.json

    def __post_init__(self):
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        self.upsample_rates = [int(r) for r in self.upsample_rates]
        self.upsampling_ratios = [int(r) for r in self.upsampling_ratios]
        if self.hidden_act != "silu":
            raise CheckpointError(f"speech decoder: hidden_act {self.hidden_act!r} is not supported (expected 'silu')")
        if self.num_semantic_quantizers != 1:
            # upstream hard-codes one semantic level whatever the config says
            self.num_semantic_quantizers = 1

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsample_rates) * math.prod(self.upsampling_ratios)

    @property
    def sample_rate(self) -> int:
        return self.output_sample_rate

    @classmethod
    def from_tokenizer_config(cls, path: Path) -> "DecoderArgs":
        """Read speech_tokenizer/config.json (the whole file; ``decoder_config`` holds the decoder)."""
        cfg = read_json(path)
        if not isinstance(cfg, dict) or not isinstance(cfg.get("decoder_config"), dict):
            raise CheckpointError(f"{path} has no decoder_config: not a Qwen3-TTS 12 Hz speech tokenizer config")
        args = cls.from_section(cfg, "decoder_config", ("output_sample_rate",), source=str(path))
        declared = cfg.get("decode_upsample_rate")
        if declared is not None and int(declared) != args.samples_per_frame:
            raise CheckpointError(f"{path}: decode_upsample_rate {declared} != product of upsampling rates "
                                  f"{args.samples_per_frame}")
        return args

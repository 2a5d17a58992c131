"""AudioVAE arguments, the ``audio_vae_config`` section of a VoxCPM2 config.json (upstream's
defaults where a key is absent)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ttscli.config import BaseArgs


@dataclass
class AudioVAEArgs(BaseArgs):
    encoder_dim: int = 128
    encoder_rates: list[int] = field(default_factory=lambda: [2, 5, 8, 8])
    latent_dim: int = 64
    decoder_dim: int = 2048
    decoder_rates: list[int] = field(default_factory=lambda: [8, 6, 5, 2, 2, 2])
    depthwise: bool = True
    sample_rate: int = 16000
    out_sample_rate: int = 48000
    use_noise_block: bool = False
    sr_bin_boundaries: list[int] | None = field(default_factory=lambda: [20000, 30000, 40000])
    cond_type: str = "scale_bias"

    @property
    def hop(self) -> int:
        """Input samples (at ``sample_rate``) per latent frame."""
        return math.prod(self.encoder_rates)

    @property
    def decode_hop(self) -> int:
        """Output samples (at ``out_sample_rate``) per latent frame."""
        return math.prod(self.decoder_rates)

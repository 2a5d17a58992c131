"""Mimi's configuration: the fields of transformers' ``MimiConfig`` the encoder and decoder read,
and two a Kyutai (moshi / Pocket TTS) Mimi needs that ``MimiConfig`` does not carry."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ttscli.config import BaseArgs
from ttscli.errors import CheckpointError


@dataclass
class MimiArgs(BaseArgs):
    """``MimiConfig`` (its defaults are the published model's), the encoder's fields."""

    sampling_rate: int = 24000
    audio_channels: int = 1
    hidden_size: int = 512
    num_filters: int = 64
    num_residual_layers: int = 1
    upsampling_ratios: list[int] = field(default_factory=lambda: [8, 6, 5, 4])
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    use_causal_conv: bool = True
    pad_mode: str = "constant"
    compress: int = 2
    codebook_size: int = 2048
    codebook_dim: int = 256
    num_quantizers: int = 32
    num_semantic_quantizers: int = 1
    use_conv_shortcut: bool = False
    vector_quantization_hidden_dimension: int = 256
    num_hidden_layers: int = 8
    intermediate_size: int = 2048
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int | None = None
    hidden_act: str = "gelu"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    attention_bias: bool = False
    _frame_rate: float | None = None
    # Kyutai's Mimi (Pocket TTS) runs its transformers with a sliding window of this many frames
    # (its ``context``); None: plain causal attention, as transformers' MimiModel runs it.
    attention_window: int | None = None
    # width of the downsampled latent (Kyutai's ``inner_dim``: the downsample conv projects
    # hidden -> latent_dim); None: hidden_size, as in transformers' MimiModel.
    latent_dim: int | None = None

    def __post_init__(self):
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads

    def check(self, where: str) -> None:
        """Refuse what this implementation does not run (non-causal convs, several channels);
        ``where`` names the config object in the one-line error."""
        if not self.use_causal_conv:
            raise CheckpointError(f"{where}.use_causal_conv=false is not supported")
        if self.audio_channels != 1:
            raise CheckpointError(f"{where}.audio_channels must be 1")

    @property
    def encodec_frame_rate(self) -> int:
        return math.ceil(self.sampling_rate / math.prod(self.upsampling_ratios))

    @property
    def downsample_stride(self) -> int:
        """SEANet frames per latent frame (2 for the published 12.5 Hz Mimi)."""
        frame_rate = self._frame_rate or self.sampling_rate / (math.prod(self.upsampling_ratios) * 2)
        return int(self.encodec_frame_rate / frame_rate)

    @property
    def downsample_kernel(self) -> int:
        return 2 * self.downsample_stride

    @property
    def frame_samples(self) -> int:
        """Audio samples per latent frame."""
        return math.prod(self.upsampling_ratios) * self.downsample_stride

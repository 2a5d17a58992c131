"""BigVGAN's hyper-parameters, read from the ``config.json`` NVIDIA publishes beside the generator.

The published file also carries training settings (learning rate, discriminators, losses,
segment size); only the fields the generator is built from are read, the rest ignored.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ttscli.config import BaseArgs
from ttscli.errors import CheckpointError


@dataclass
class BigVGANArgs(BaseArgs):
    """The generator's fields of ``config.json``. Defaults are upstream's for absent keys (tanh
    and a final bias on), not any published model's: build a real-size model from
    :data:`V2_22KHZ_80BAND_256X` (``BigVGANArgs.from_dict``) when no checkpoint is at hand."""

    resblock: str = "1"                     # "1": AMPBlock1 (convs1 + convs2), "2": AMPBlock2 (convs only)
    upsample_rates: list[int] = field(default_factory=lambda: [4, 4, 2, 2, 2, 2])
    upsample_kernel_sizes: list[int] = field(default_factory=lambda: [8, 8, 4, 4, 4, 4])
    upsample_initial_channel: int = 1536
    resblock_kernel_sizes: list[int] = field(default_factory=lambda: [3, 7, 11])
    resblock_dilation_sizes: list[list[int]] = field(default_factory=lambda: [[1, 3, 5]] * 3)
    activation: str = "snakebeta"           # "snake" or "snakebeta"
    snake_logscale: bool = True             # alpha / beta stored as logarithms
    use_tanh_at_final: bool = True          # upstream's defaults when the keys are absent
    use_bias_at_final: bool = True
    num_mels: int = 80
    sampling_rate: int = 22050
    hop_size: int = 256
    n_fft: int = 1024
    win_size: int = 1024
    fmin: int = 0
    fmax: int | None = None

    def __post_init__(self):
        if self.resblock not in ("1", "2"):
            raise CheckpointError(f"config.json: resblock should be \"1\" or \"2\", got {self.resblock!r}")
        if self.activation not in ("snake", "snakebeta"):
            raise CheckpointError(f"config.json: activation should be \"snake\" or \"snakebeta\", "
                                  f"got {self.activation!r}")
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise CheckpointError("config.json: upsample_rates and upsample_kernel_sizes differ in length")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise CheckpointError("config.json: resblock_kernel_sizes and resblock_dilation_sizes differ in length")

    @property
    def upsample_factor(self) -> int:
        """Waveform samples per mel frame (the product of the upsample rates)."""
        n = 1
        for r in self.upsample_rates:
            n *= r
        return n


# nvidia/bigvgan_v2_22khz_80band_256x, IndexTTS2's vocoder: the generator's fields of its config.json
V2_22KHZ_80BAND_256X = {
    "resblock": "1", "upsample_rates": [4, 4, 2, 2, 2, 2], "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
    "upsample_initial_channel": 1536, "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "activation": "snakebeta", "snake_logscale": True,
    "use_tanh_at_final": False, "use_bias_at_final": False, "num_mels": 80, "sampling_rate": 22050,
    "hop_size": 256, "n_fft": 1024, "win_size": 1024, "fmin": 0, "fmax": None,
}

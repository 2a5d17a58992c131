"""VITS synthesizer (Piper voices): text encoder -> stochastic durations -> flow -> HiFi-GAN."""
from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ttscli.checkpoint import load_strict
from ttscli.config import BaseArgs
from ttscli.nn.compiled import compile_bounded
from ttscli.nn.fastmath import fast_exp

from .decoder import Generator, ResidualCouplingBlock
from .duration import StochasticDurationPredictor
from .text_encoder import TextEncoder


@compile_bounded
def _std(logs: mx.array, scale: float) -> mx.array:
    return fast_exp(logs) * scale


@dataclass
class ModelArgs(BaseArgs):
    n_vocab: int = 256
    inter_channels: int = 192
    hidden_channels: int = 192
    filter_channels: int = 768
    n_heads: int = 2
    n_layers: int = 6
    kernel_size: int = 3
    window_size: int = 4
    dp_filter_channels: int = 192
    dp_kernel_size: int = 3
    dp_n_flows: int = 4
    dp_num_bins: int = 10
    dp_tail_bound: float = 5.0
    flow_n_flows: int = 4
    flow_kernel_size: int = 5
    flow_dilation_rate: int = 1
    flow_n_layers: int = 4
    resblock: str = "2"
    resblock_kernel_sizes: list[int] = field(default_factory=lambda: [3, 5, 7])
    resblock_dilation_sizes: list[list[int]] = field(default_factory=lambda: [[1, 2], [2, 6], [3, 12]])
    upsample_rates: list[int] = field(default_factory=lambda: [8, 8, 4])
    upsample_initial_channel: int = 256
    upsample_kernel_sizes: list[int] = field(default_factory=lambda: [16, 16, 8])
    sample_rate: int = 22050
    # inference defaults (the voice's .onnx.json "inference" block)
    noise_scale: float = 0.667
    length_scale: float = 1.0
    noise_w: float = 0.8

    @property
    def hop_length(self) -> int:
        return int(np.prod(self.upsample_rates))


class Vits(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        a = args
        self.enc_p = TextEncoder(a.n_vocab, a.inter_channels, a.hidden_channels, a.filter_channels,
                                 a.n_heads, a.n_layers, a.kernel_size, a.window_size)
        self.dp = StochasticDurationPredictor(a.hidden_channels, a.dp_filter_channels, a.dp_kernel_size,
                                              a.dp_n_flows, a.dp_num_bins, a.dp_tail_bound)
        self.flow = ResidualCouplingBlock(a.inter_channels, a.hidden_channels, a.flow_kernel_size,
                                          a.flow_dilation_rate, a.flow_n_layers, a.flow_n_flows)
        self.dec = Generator(a.inter_channels, a.resblock, a.resblock_kernel_sizes,
                             a.resblock_dilation_sizes, a.upsample_rates, a.upsample_initial_channel,
                             a.upsample_kernel_sizes)

    # -- inference, in three steps so callers can time / inspect each --------------------

    def durations(self, ids: mx.array, noise_w: float, length_scale: float,
                  key: mx.array | None = None, noise: mx.array | None = None,
                  ) -> tuple[mx.array, mx.array, np.ndarray]:
        """Phoneme ids ``[1, T]`` -> (m_p, logs_p, frames per phoneme as int numpy ``[T]``).

        ``noise`` (standard normal ``[1, T, 2]``) replaces the draw from ``key`` (parity tests).
        """
        x, m_p, logs_p = self.enc_p(ids)
        t = ids.shape[1]
        if noise is None:
            noise = mx.random.normal((1, t, 2), key=key) if noise_w else mx.zeros((1, t, 2))
        logw = self.dp.reverse(x, noise * noise_w)
        w = mx.ceil(mx.exp(logw) * length_scale)
        return m_p, logs_p, np.array(w[0]).astype(np.int64)

    def latents(self, m_p: mx.array, logs_p: mx.array, frames: np.ndarray, noise_scale: float,
                key: mx.array | None = None, noise: mx.array | None = None) -> mx.array:
        """Expand the prior by the durations, sample it and invert the flow -> ``[1, F, C]``.

        ``noise`` (standard normal ``[1, F, C]``) replaces the draw from ``key``.
        """
        frames = np.maximum(frames, 0)
        # the std per phoneme, before the expansion to frames (~2x fewer exps; MLX's CPU exp
        # is a scalar loop)
        std = _std(logs_p, noise_scale)
        if frames.sum() == 0:
            # as the original: at least one frame, with an all-zero alignment
            m, std = mx.zeros((1, 1, m_p.shape[-1])), mx.full((1, 1, m_p.shape[-1]), noise_scale)
        else:
            idx = mx.array(np.repeat(np.arange(len(frames)), frames))
            m, std = m_p[:, idx], std[:, idx]
        z_p = m
        if noise is not None or noise_scale:
            if noise is None:
                noise = mx.random.normal(m.shape, key=key)
            z_p = m + noise * std
        return self.flow.reverse(z_p)

    def decode(self, z: mx.array) -> mx.array:
        return self.dec(z)

    def __call__(self, ids: mx.array, noise_scale: float = 0.667, length_scale: float = 1.0,
                 noise_w: float = 0.8, key: mx.array | None = None) -> mx.array:
        """Phoneme ids ``[1, T]`` -> audio ``[N]`` float32 at ``args.sample_rate``."""
        k_dur, k_prior = mx.random.split(key) if key is not None else (None, None)
        m_p, logs_p, frames = self.durations(ids, noise_w, length_scale, k_dur)
        z = self.latents(m_p, logs_p, frames, noise_scale, k_prior)
        return self.decode(z)[0]

    # -- weights ---------------------------------------------------------------------------

    def load_weights_strict(self, weights: dict[str, mx.array], source: str = "Piper weights") -> None:
        """Load exactly our parameter set (float32, as converted); see :func:`ttscli.checkpoint.load_strict`."""
        load_strict(self, weights, source=source)

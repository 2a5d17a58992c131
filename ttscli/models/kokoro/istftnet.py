"""Kokoro's decoder: AdaIN residual blocks, a harmonic-plus-noise source, and an iSTFTNet
generator whose last conv predicts a magnitude/phase spectrogram (n_fft 20, hop 5).

Channels-last ``[T, C]``, batch 1. Semantics are PyTorch's (hexgrad's ``istftnet.py``):

- The source is deterministic by default (no random initial phase, no additive noise), which is
  what the published ONNX graphs compute; ``noise_key`` adds upstream's noise, seeded.
- STFT / iSTFT and Snake come from ttscli/nn/spectral.py (shared with Chatterbox's HiFT).
- ``torch.istft`` normalisation. The ONNX export's iSTFT divides only its first frame by the
  window envelope, so its output is 1.5x this one (parity compares with that factor removed).
- STFT phase as ``torch.angle``: the DC and Nyquist bins of a real signal have an imaginary part
  of exactly +0, so their phase is 0 or +pi, never -pi.
"""
from __future__ import annotations

import math
from functools import lru_cache

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.nn.compiled import compile_bounded
from ttscli.nn.conv import Conv1d, ConvTranspose1d
from ttscli.nn.spectral import istft, snake, stft_features

from .config import ISTFTNetArgs
from .modules import AdaIN1d, AdainResBlk1d, Linear, leaky_relu


@lru_cache(maxsize=64)
def _upsample_linear(n: int, scale: int) -> tuple[mx.array, mx.array, mx.array]:
    """Indices and weights of a linear ×scale upsampling with half-pixel centres (edges clamped),
    positions computed in float32 as onnxruntime's Resize does."""
    j = np.arange(n * scale, dtype=np.float32)
    pos = np.maximum((j + np.float32(0.5)) / np.float32(scale) - np.float32(0.5), np.float32(0.0))
    i0 = np.minimum(np.floor(pos).astype(np.int32), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    lam = (pos - i0.astype(np.float32)).astype(np.float32)
    return mx.array(i0), mx.array(i1), mx.array(lam[:, None])


class SineGen(nn.Module):
    """Sines at F0 and its harmonics, voiced where F0 > threshold (no parameters)."""

    def __init__(self, sample_rate: int, upsample_scale: int, harmonics: int, sine_amp: float = 0.1,
                 noise_std: float = 0.003, voiced_threshold: float = 10.0):
        super().__init__()
        self.sr, self.scale, self.dim = sample_rate, upsample_scale, harmonics + 1
        self.sine_amp, self.noise_std, self.threshold = sine_amp, noise_std, voiced_threshold

    def __call__(self, f0: mx.array, key: mx.array | None = None) -> mx.array:
        """``f0 [n]`` (Hz, one value per ``scale`` samples) -> ``[n * scale, dim]``.

        Upstream upsamples F0 (nearest), takes frac(f h / sr) per sample, downsamples that
        (linear) back to one value per frame, which is exactly the frame's own value; so the
        phase increments are computed per frame, integrated, and upsampled once (linear)."""
        n = f0.shape[0]
        h = mx.arange(1, self.dim + 1, dtype=mx.float32)
        rad = (f0[:, None] * h) / self.sr
        rad = rad - mx.floor(rad)
        if key is not None:
            k1, key = mx.random.split(key)
            ini = mx.random.uniform(shape=(1, self.dim), key=k1) * (h > 1)
            rad = mx.concatenate([rad[:1] + ini, rad[1:]], axis=0)
        phase = mx.cumsum(rad, axis=0) * 2.0 * math.pi * self.scale
        i0, i1, lam = _upsample_linear(n, self.scale)
        phase = mx.take(phase, i0, axis=0) * (1.0 - lam) + mx.take(phase, i1, axis=0) * lam
        uv = (mx.repeat(f0, self.scale)[:, None] > self.threshold).astype(mx.float32)
        sines = mx.sin(phase) * self.sine_amp
        if key is None:
            return sines * uv
        amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        return sines * uv + amp * mx.random.normal(sines.shape, key=key)


class SourceModuleHnNSF(nn.Module):
    def __init__(self, sample_rate: int, upsample_scale: int, harmonics: int = 8):
        super().__init__()
        self.l_sin_gen = SineGen(sample_rate, upsample_scale, harmonics)
        self.l_linear = Linear(harmonics + 1, 1)

    def __call__(self, f0: mx.array, key: mx.array | None = None) -> mx.array:
        return mx.tanh(self.l_linear(self.l_sin_gen(f0, key)))[:, 0]


@compile_bounded
def _moments(x: mx.array, eps: float) -> tuple[mx.array, mx.array]:
    """InstanceNorm's statistics over time of ``x [T, C]``: mean and 1/sqrt(biased var + eps)."""
    mean = mx.mean(x, axis=0)
    return mean, mx.rsqrt(mx.mean(mx.square(x - mean), axis=0) + eps)


@compile_bounded
def _norm_snake(x: mx.array, mean: mx.array, rstd: mx.array, gamma: mx.array, beta: mx.array,
                alpha: mx.array) -> mx.array:
    # AdaIN1d's normalisation and style affine, then Snake: one pass over x instead of ~8 (the
    # generator runs 48 on [120F, 128] and [20F, 256] arrays). Bounded, not shapeless: MLX's CPU
    # kernel for a shapeless trace indexes every element generically: this whole function
    # compiled per shape takes less than half of Snake alone shapeless (docs/benchmarks.md#kokoro-mlx-busy)
    return snake((1 + gamma) * ((x - mean) * rstd) + beta, alpha)


def adain_snake(norm: AdaIN1d, x: mx.array, s: mx.array, alpha: mx.array,
                moments: tuple[mx.array, mx.array] | None = None) -> mx.array:
    """``snake(norm(x, s), alpha)``; ``moments`` of x when the caller already has them."""
    h = norm.fc(s)
    mean, rstd = moments if moments is not None else _moments(x, norm.eps)
    return _norm_snake(x, mean, rstd, h[: norm.channels], h[norm.channels:], alpha)


class AdaINResBlock1(nn.Module):
    """Three (AdaIN, Snake, dilated conv, AdaIN, Snake, conv) residual units."""

    def __init__(self, channels: int, kernel_size: int, dilations, style_dim: int):
        super().__init__()
        self.convs1 = [Conv1d(channels, channels, kernel_size, dilation=d, padding="same") for d in dilations]
        self.convs2 = [Conv1d(channels, channels, kernel_size, padding="same") for _ in dilations]
        self.adain1 = [AdaIN1d(style_dim, channels) for _ in dilations]
        self.adain2 = [AdaIN1d(style_dim, channels) for _ in dilations]
        self.alpha1 = [mx.ones((1, channels, 1)) for _ in dilations]
        self.alpha2 = [mx.ones((1, channels, 1)) for _ in dilations]

    def __call__(self, x: mx.array, s: mx.array, moments: tuple[mx.array, mx.array] | None = None) -> mx.array:
        """``moments``: :func:`_moments` of the input x, shared by blocks that read the same x."""
        for c1, c2, n1, n2, a1, a2 in zip(self.convs1, self.convs2, self.adain1, self.adain2, self.alpha1, self.alpha2):
            t = c1(adain_snake(n1, x, s, a1[0, :, 0], moments))
            x = c2(adain_snake(n2, t, s, a2[0, :, 0]), residual=x)
            moments = None
        return x


class Generator(nn.Module):
    def __init__(self, style_dim: int, a: ISTFTNetArgs, sample_rate: int = 24000):
        super().__init__()
        self.n_fft, self.hop = a.gen_istft_n_fft, a.gen_istft_hop_size
        up_total = int(np.prod(a.upsample_rates)) * self.hop
        self.m_source = SourceModuleHnNSF(sample_rate, up_total, harmonics=8)
        self.ups, self.noise_convs, self.noise_res, self.resblocks = [], [], [], []
        self.num_kernels = len(a.resblock_kernel_sizes)
        feat = self.n_fft + 2
        for i, (u, k) in enumerate(zip(a.upsample_rates, a.upsample_kernel_sizes)):
            cin, cout = a.upsample_initial_channel // 2 ** i, a.upsample_initial_channel // 2 ** (i + 1)
            self.ups.append(ConvTranspose1d(cin, cout, k, u, padding=(k - u) // 2))
            for rk, rd in zip(a.resblock_kernel_sizes, a.resblock_dilation_sizes):
                self.resblocks.append(AdaINResBlock1(cout, rk, rd, style_dim))
            if i + 1 < len(a.upsample_rates):
                sf = int(np.prod(a.upsample_rates[i + 1:]))
                self.noise_convs.append(Conv1d(feat, cout, 2 * sf, stride=sf, padding=(sf + 1) // 2))
                self.noise_res.append(AdaINResBlock1(cout, 7, [1, 3, 5], style_dim))
            else:
                self.noise_convs.append(Conv1d(feat, cout, 1))
                self.noise_res.append(AdaINResBlock1(cout, 11, [1, 3, 5], style_dim))
        self.conv_post = Conv1d(cout, feat, 7, padding=3)

    def source(self, f0: mx.array, key: mx.array | None = None) -> tuple[mx.array, mx.array]:
        """F0 ``[2F]`` -> (harmonic source ``[600F]``, its STFT features ``[120F + 1, 22]``)."""
        har = self.m_source(f0, key)
        return har, stft_features(har, self.n_fft, self.hop)

    def __call__(self, x: mx.array, s: mx.array, har_features: mx.array, taps: dict | None = None) -> mx.array:
        last = len(self.ups) - 1
        for i, (up, nconv, nres) in enumerate(zip(self.ups, self.noise_convs, self.noise_res)):
            x = leaky_relu(x, 0.1)
            src = nres(nconv(har_features), s)
            x = up(x)
            if i == last:
                x = mx.concatenate([x[1:2], x], axis=0)                # ReflectionPad1d((1, 0))
            x = x + src
            blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            moments = _moments(x, blocks[0].adain1[0].eps)              # the blocks all read x
            xs = blocks[0](x, s, moments)
            for b in blocks[1:]:
                xs = xs + b(x, s, moments)
            x = xs / self.num_kernels
        x = self.conv_post(leaky_relu(x, 0.01))
        if taps is not None:
            taps["conv_post"] = x
        bins = self.n_fft // 2 + 1
        return istft(mx.exp(x[:, :bins]), mx.sin(x[:, bins:]), self.n_fft, self.hop)


class Decoder(nn.Module):
    def __init__(self, dim_in: int, style_dim: int, a: ISTFTNetArgs, sample_rate: int = 24000):
        super().__init__()
        self.encode = AdainResBlk1d(dim_in + 2, 1024, style_dim)
        self.decode = [AdainResBlk1d(1024 + 2 + 64, 1024, style_dim) for _ in range(3)]
        self.decode.append(AdainResBlk1d(1024 + 2 + 64, 512, style_dim, upsample=True))
        self.F0_conv = Conv1d(1, 1, 3, stride=2, padding=1)
        self.N_conv = Conv1d(1, 1, 3, stride=2, padding=1)
        self.asr_res = [Conv1d(512, 64, 1)]
        self.generator = Generator(style_dim, a, sample_rate)

    def __call__(self, asr: mx.array, f0: mx.array, n: mx.array, s: mx.array, har_features: mx.array,
                 taps: dict | None = None) -> mx.array:
        """``asr [F, 512]``, ``f0``/``n [2F]``, decoder style ``[128]``, source features -> audio."""
        f0c = self.F0_conv(f0[:, None])
        nc = self.N_conv(n[:, None])
        x = self.encode(mx.concatenate([asr, f0c, nc], axis=-1), s)
        res = self.asr_res[0](asr)
        for block in self.decode:                                      # upstream stops re-appending after
            x = block(mx.concatenate([x, res, f0c, nc], axis=-1), s)   # the up block, which is the last
        return self.generator(x, s, har_features, taps)

"""Kokoro's decoder: AdaIN residual blocks, a harmonic-plus-noise source, and an iSTFTNet
generator whose last conv predicts a magnitude/phase spectrogram (n_fft 20, hop 5).

Channels-last ``[T, C]``, batch 1. Semantics are PyTorch's (hexgrad's ``istftnet.py``):

- The source is deterministic by default (no random initial phase, no additive noise), which is
  what the published ONNX graphs compute; ``noise_key`` adds upstream's noise, seeded.
- ``torch.istft`` normalisation. The ONNX export's iSTFT divides only its first frame by the
  window envelope, so its output is 1.5x this one (parity compares with that factor removed).
- STFT phase as ``torch.angle``: the DC and Nyquist bins of a real signal have an imaginary part
  of exactly +0, so their phase is 0 or +pi, never -pi.
"""
from __future__ import annotations

import math
from functools import cache, lru_cache

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.nn.conv import (
    Conv1d,
    ConvTranspose1d,
    conv_transpose1d,
    pad_time,
    transposed_weight,
)
from ttscli.nn.fastmath import estrin

from .config import ISTFTNetArgs
from .modules import AdaIN1d, AdainResBlk1d, Linear, leaky_relu


def _hann(n: int) -> np.ndarray:
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)          # periodic, as scipy fftbins=True


@cache
def stft_basis(n_fft: int) -> mx.array:
    """``[n_fft, 2 * bins]``: a windowed frame times this gives (re ‖ im) of its rfft."""
    n = np.arange(n_fft)[:, None]
    k = np.arange(n_fft // 2 + 1)[None, :]
    ang = 2 * np.pi * n * k / n_fft
    w = _hann(n_fft)[:, None]
    im = -w * np.sin(ang)
    im[:, 0] = 0.0
    im[:, -1] = 0.0                                                    # exactly zero, not sin(pi n) ~ 1e-16
    return mx.array(np.concatenate([w * np.cos(ang), im], axis=1).astype(np.float32))


@cache
def istft_basis(n_fft: int) -> mx.array:
    """``[2 * bins, 1, n_fft]`` (a ConvTranspose1d weight): (re ‖ im) of one frame -> its windowed
    inverse rfft. The imaginary parts of DC and Nyquist are ignored, as irfft does."""
    bins = n_fft // 2 + 1
    k = np.arange(bins)[:, None]
    n = np.arange(n_fft)[None, :]
    ang = 2 * np.pi * k * n / n_fft
    c = np.full((bins, 1), 2.0)
    c[0] = c[-1] = 1.0
    w = _hann(n_fft)[None, :]
    re = c * np.cos(ang) / n_fft * w
    im = -c * np.sin(ang) / n_fft * w
    im[0] = im[-1] = 0.0
    return mx.array(np.concatenate([re, im], axis=0)[:, None, :].astype(np.float32))


@lru_cache(maxsize=64)
def _envelope(frames: int, n_fft: int, hop: int) -> mx.array:
    """1 / (overlap-added squared window) over the kept samples, as torch.istft divides by it."""
    total = (frames - 1) * hop + n_fft
    env = np.zeros(total)
    w2 = _hann(n_fft) ** 2
    for f in range(frames):
        env[f * hop: f * hop + n_fft] += w2
    kept = env[n_fft // 2: n_fft // 2 + (frames - 1) * hop]
    return mx.array((1.0 / kept).astype(np.float32)[:, None])


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


def stft_features(x: mx.array, n_fft: int, hop: int) -> mx.array:
    """``x [L]`` -> ``[L/hop + 1, 2 * bins]``: magnitude ‖ phase of torch.stft (center, reflect pad)."""
    pad = n_fft // 2
    xp = pad_time(x[:, None], pad, pad, "reflect")[:, 0]
    blocks = xp.reshape(-1, hop)                                       # L/hop + n_fft/hop blocks
    per = n_fft // hop
    nfr = blocks.shape[0] - per + 1
    frames = mx.concatenate([blocks[j: j + nfr] for j in range(per)], axis=-1)
    spec = frames @ stft_basis(n_fft)
    bins = n_fft // 2 + 1
    re, im = spec[:, :bins], spec[:, bins:]
    return mx.concatenate([mx.sqrt(re * re + im * im), mx.arctan2(im, re)], axis=-1)


def istft(mag: mx.array, phase: mx.array, n_fft: int, hop: int) -> mx.array:
    """torch.istft (center, periodic Hann) of ``[frames, bins]`` magnitude and phase -> ``[(frames-1) hop]``."""
    spec = mx.concatenate([mag * mx.cos(phase), mag * mx.sin(phase)], axis=-1)
    wmat = _istft_gemm(n_fft, hop)
    y = conv_transpose1d(spec, wmat, None, n_fft, hop, (n_fft // 2, n_fft // 2))
    return (y * _envelope(mag.shape[0], n_fft, hop))[:, 0]


@cache
def _istft_gemm(n_fft: int, hop: int) -> mx.array:
    return transposed_weight(istft_basis(n_fft), hop)


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

    def __call__(self, x: mx.array, s: mx.array) -> mx.array:
        for c1, c2, n1, n2, a1, a2 in zip(self.convs1, self.convs2, self.adain1, self.adain2, self.alpha1, self.alpha2):
            t = snake(n1(x, s), a1[0, :, 0])
            t = c1(t)
            t = snake(n2(t, s), a2[0, :, 0])
            x = c2(t, residual=x)
        return x


_PI_HI = 3.140625                    # few mantissa bits: n * _PI_HI is exact for the n met here
_PI_LO = 9.676535897932795e-04
# sin(r) / r for |r| <= pi/2 as a polynomial in r^2 (Taylor to r^12: error < 6e-8)
_SIN = (1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800, 1 / 6227020800)


@mx.compile
def snake(x: mx.array, alpha: mx.array) -> mx.array:
    """Snake, ``x + sin^2(alpha x) / alpha``. MLX's CPU sin is a scalar loop (the generator
    calls it ~40 times on [120F, 128] arrays); sin^2 has period pi, so reducing by multiples of
    pi needs no sign, and the rest is multiply-adds that compile into one vectorised kernel."""
    y = alpha * x
    n = mx.floor(y * (1.0 / math.pi) + 0.5)
    r = y - n * _PI_HI - n * _PI_LO
    r2 = r * r
    r4 = r2 * r2
    sr = r * (estrin(_SIN[:4], r2, r4, r4 * r4) + r4 * r4 * estrin(_SIN[4:], r2, r4, r4 * r4))
    return x + sr * sr / alpha


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
            xs = blocks[0](x, s)
            for b in blocks[1:]:
                xs = xs + b(x, s)
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

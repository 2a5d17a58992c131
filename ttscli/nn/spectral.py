"""STFT / iSTFT as GEMMs and the Snake activation, shared by the iSTFT vocoders (Kokoro's
iSTFTNet, Chatterbox's HiFT).

Semantics are PyTorch's: ``torch.stft``/``torch.istft`` with ``center=True``, a periodic Hann
window and reflect padding; phase as ``torch.angle`` (the DC and Nyquist bins of a real signal
have an imaginary part of exactly +0, so their phase is 0 or +pi, never -pi). Frames are
channels-last ``[frames, bins]``.
"""
from __future__ import annotations

import math
from functools import cache, lru_cache

import mlx.core as mx
import numpy as np

from ttscli.nn.compiled import compile_bounded
from ttscli.nn.conv import conv_transpose1d, pad_time, transposed_weight
from ttscli.nn.fastmath import estrin


def hann(n: int) -> np.ndarray:
    """Periodic Hann window (scipy fftbins=True, torch.hann_window), float64."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)          # periodic, as scipy fftbins=True


@cache
def stft_basis(n_fft: int) -> mx.array:
    """``[n_fft, 2 * bins]``: a windowed frame times this gives (re ‖ im) of its rfft."""
    n = np.arange(n_fft)[:, None]
    k = np.arange(n_fft // 2 + 1)[None, :]
    ang = 2 * np.pi * n * k / n_fft
    w = hann(n_fft)[:, None]
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
    w = hann(n_fft)[None, :]
    re = c * np.cos(ang) / n_fft * w
    im = -c * np.sin(ang) / n_fft * w
    im[0] = im[-1] = 0.0
    return mx.array(np.concatenate([re, im], axis=0)[:, None, :].astype(np.float32))


@lru_cache(maxsize=64)
def _envelope(frames: int, n_fft: int, hop: int) -> mx.array:
    """1 / (overlap-added squared window) over the kept samples, as torch.istft divides by it."""
    total = (frames - 1) * hop + n_fft
    env = np.zeros(total)
    w2 = hann(n_fft) ** 2
    for f in range(frames):
        env[f * hop: f * hop + n_fft] += w2
    kept = env[n_fft // 2: n_fft // 2 + (frames - 1) * hop]
    return mx.array((1.0 / kept).astype(np.float32)[:, None])


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


_PI_HI = 3.140625                    # few mantissa bits: n * _PI_HI is exact for the n met here
_PI_LO = 9.676535897932795e-04
# sin(r) / r for |r| <= pi/2 as a polynomial in r^2 (Taylor to r^12: error < 6e-8)
_SIN = (1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800, 1 / 6227020800)


@compile_bounded  # per shape, bounded: MLX's shapeless CPU kernel ran this 1.5-2.3x slower
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

"""BigVGAN v2's generator: log-mel ``[B, T, num_mels]`` -> waveform ``[B, T * hop]``, channels-last.

conv_pre, then per stage a transposed conv (no anti-aliasing) and the mean of one AMP block per
resblock kernel size, then an anti-aliased activation, conv_post and a clamp to [-1, 1] (or tanh).
Every AMP unit is ``x + conv(act(conv(act(x))))`` where ``act`` is the anti-aliased periodic
activation: upsample x2 (a transposed 12-tap Kaiser-sinc filter), Snake / SnakeBeta at the
doubled rate, low-pass and decimate x2 (the same 12-tap filter), with replicate padding at both
ends exactly as upstream's alias-free torch module pads and crops.

The activation is most of the non-GEMM work (about 100 of them per utterance, each over every
sample of its stage), so it is computed without building the upsampled signal:

* upsampling by 2 is two 6-tap filters on the input (one per output phase, ``polyphase``);
* Snake is elementwise, so each phase goes through it separately, never interleaved;
* the decimating low-pass reads the even taps from one phase and the odd taps from the other.

Each phase's filter and Snake are one compiled kernel, the low-pass two more (half its taps
each); the filter taps are baked into them as constants (read once from the checkpoint).
Replicate padding of the interleaved signal becomes, per phase, copies of its first sample (the
even phase's) on the left and its last (the odd phase's) on the right. MLX's JIT-compiled CPU
kernels (on x86-64, built without AVX flags) vectorise only when every input is a dense array
of the output's shape and there are at most nine of them; the kernels are shaped accordingly
(see :func:`_filter_kernel` and :func:`_activation`).

Convolutions are :mod:`ttscli.nn.conv` GEMMs on the checkpoint's own ``[out, in, k]`` weights
(folded from weight norm at load): one GEMM per tap accumulated in place, which beat one GEMM
over stacked taps at every stage size measured; each activation writes the zero padding of the
conv after it, so its output is copied once.
"""
from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli import torchfile
from ttscli.checkpoint import fold_weight_norm, load_strict
from ttscli.nn.compiled import compile_bounded
from ttscli.nn.conv import Conv1d, ConvTranspose1d, conv1d_accumulate
from ttscli.nn.init import random_weights

from .config import BigVGANArgs

CONFIG = "config.json"
GENERATOR = "bigvgan_generator.pt"
RATIO = 2                 # the anti-aliased activation's up / down factor (fixed upstream)
FILTER_TAPS = 12          # its filters' length (fixed upstream)


# ----------------------------------------------------------------------------- filters

def kaiser_sinc_filter(cutoff: float, half_width: float, kernel_size: int) -> np.ndarray:
    """The low-pass upstream registers as its filter buffers (``kaiser_sinc_filter1d``): a
    windowed sinc with the Kaiser beta from the transition width, normalised to unit DC gain.
    ``[kernel_size]`` float32 (computed in float64)."""
    half = kernel_size // 2
    a = 2.285 * (half - 1) * math.pi * (4 * half_width) + 7.95
    beta = 0.1102 * (a - 8.7) if a > 50.0 else (0.5842 * (a - 21) ** 0.4 + 0.07886 * (a - 21.0) if a >= 21.0 else 0.0)
    window = np.kaiser(kernel_size, beta)
    t = np.arange(-half, half) + 0.5 if kernel_size % 2 == 0 else np.arange(kernel_size) - half
    if cutoff == 0:
        return np.zeros(kernel_size, np.float32)
    f = 2 * cutoff * window * np.sinc(2 * cutoff * t)
    return (f / f.sum()).astype(np.float32)


def _upsample_phases(f: tuple[float, ...]) -> tuple[int, tuple, tuple]:
    """Upstream's x2 upsample (replicate pad ``k/2 - 1``, transposed conv stride 2 with gain 2,
    crop ``3k/2 - 3`` each side) as two filters on the input: output ``2p + s`` is
    ``sum_d x[p + d] * w`` over phase s's ``(d, w)`` pairs. Returns (P, phase 0, phase 1), P the
    largest ``|d|`` (replicate padding each side makes every read valid)."""
    k = len(f)
    h = k // 2
    phases = []
    for s in range(RATIO):
        # output 2p+s reads filter tap j = s + h - 1 - 2d from input p + d
        taps = [(d, RATIO * f[s + h - 1 - 2 * d]) for d in range(-k, k + 1) if 0 <= s + h - 1 - 2 * d < k]
        phases.append(tuple(taps))
    reach = max(abs(d) for ph in phases for d, _ in ph)
    return reach, phases[0], phases[1]


def _downsample_phases(f: tuple[float, ...]) -> tuple[tuple, tuple]:
    """Upstream's low-pass + decimate (replicate pad ``k/2 - 1`` left and ``k/2`` right, stride 2)
    over the interleaved signal ``z[2m] = even[m]``, ``z[2m+1] = odd[m]``: output p is
    ``sum even[p + d] w + sum odd[p + d] w`` over the two phases' ``(d, w)`` pairs."""
    k = len(f)
    h = k // 2
    even, odd = [], []
    for j in range(k):
        e = j - h + 1                                  # z index 2p + e
        (even if e % 2 == 0 else odd).append((e // 2, f[j]))
    return tuple(even), tuple(odd)


# ----------------------------------------------------------------------------- elementwise kernels

_PI_HI = 3.140625                       # few mantissa bits: k * _PI_HI is exact for |k| < 2^16
_PI_LO = math.pi - _PI_HI
_ROUND = 12582912.0                     # 1.5 * 2^23: (u + R) - R rounds u to an integer (|u| < 2^22)
_SIN = tuple((-1) ** i / math.factorial(2 * i + 1) for i in range(6))   # sin r / r = sum c_i r^2i


def _sin_squared(u: mx.array) -> mx.array:
    """sin(u)^2 from multiply-adds: sin^2 has period pi, so u is reduced to |r| <= pi/2 with no
    sign to track, then sin r by its Taylor series to r^11 (error < 6e-8 there). MLX's CPU sin
    is a scalar libm loop several times slower than these fused multiply-adds, and floor / round
    are library calls in its compiled kernels where the rounding constant is two adds."""
    n = (u * (1.0 / math.pi) + _ROUND) - _ROUND
    r = (u - n * _PI_HI) - n * _PI_LO
    r2 = r * r
    r4 = r2 * r2
    p = (_SIN[0] + _SIN[1] * r2) + r4 * ((_SIN[2] + _SIN[3] * r2) + r4 * (_SIN[4] + _SIN[5] * r2))
    s = r * p
    return s * s


def _shifted(x: mx.array, offset: int, length: int) -> mx.array:
    return x[..., offset: offset + length, :]


@cache
def _filter_kernel(taps: tuple[tuple[int, float], ...], left: int, right: int, snake: bool, accumulate: bool):
    """Compiled ``y[p] = sum_d z[p + left + d] * w`` over ``taps`` for ``z`` padded by ``left`` /
    ``right`` frames, plus a partial sum when ``accumulate``, then SnakeBeta when ``snake``.

    One kernel reads at most 9 arrays: with 10 or more inputs (each shifted view counts) the
    compiler's loop stops vectorising (its alias checks run out) and the kernel is ~5x slower,
    so the 12 taps of the low-pass are split over two kernels."""
    def fn(z, *extra):
        t = z.shape[-2] - left - right
        y = None
        for d, w in taps:
            v = _shifted(z, left + d, t) * w
            y = v if y is None else y + v
        if accumulate:
            y = y + extra[0]
        if snake:
            alpha, inv_beta = extra
            y = y + inv_beta * _sin_squared(y * alpha)
        return y

    return compile_bounded(fn)


@cache
def _activation_plan(up: tuple[float, ...], down: tuple[float, ...]):
    """(reach, up phases, low-pass halves with their edge copies) for these filter taps."""
    reach, up0, up1 = _upsample_phases(up)
    halves = []
    for taps in _downsample_phases(down):
        left, right = -min(d for d, _ in taps), max(d for d, _ in taps)
        halves.append((taps, left, right))
    return reach, (up0, up1), tuple(halves)


def _activation(x: mx.array, alpha: mx.array, inv_beta: mx.array, up: tuple, down: tuple,
                pad: tuple[int, int] = (0, 0)) -> mx.array:
    """``x [B, T, C]`` -> ``[B, pad[0] + T + pad[1], C]``: the activation with ``pad`` zero frames
    around it, the padding of the conv that follows, so the output is copied once, not twice."""
    if x.shape[0] > 1:
        # row by row: each row's shifted views are then contiguous blocks of memory
        return mx.concatenate([_activation(x[i: i + 1], alpha, inv_beta, up, down, pad)
                               for i in range(x.shape[0])])
    reach, phases, halves = _activation_plan(up, down)
    t = x.shape[-2]
    xq = _replicate(x, reach, reach)
    # per-channel factors as dense arrays of the output's shape: a broadcast [C] input would
    # send the whole kernel down MLX's strided path, which does not vectorise (~2.5x slower);
    # adding them to dense zeros is MLX's vectorised row broadcast, twice as fast as a copy
    base = mx.zeros(x.shape, x.dtype)
    alpha, inv_beta = base + alpha, base + inv_beta
    even, odd = (_filter_kernel(taps, reach, reach, True, False)(xq, alpha, inv_beta) for taps in phases)
    # the interleaved signal's replicate padding: its first sample (even[0]) on the left, its
    # last (odd[-1]) on the right, for either phase
    first, last = even[..., :1, :], odd[..., -1:, :]
    lo = max(left for _, left, _ in halves)
    hi = max(right for _, _, right in halves)
    if t < 2 * (lo + hi):
        parts = [_lowpass(even, odd, first, last, halves, 0, t)]
    else:
        # outputs lo .. t - hi read only real samples: no padded copy of even / odd; the few
        # outputs at either end read the replicated samples from small padded windows
        parts = [_lowpass(even[..., : lo + hi, :], odd[..., : lo + hi, :], first, None, halves, 0, lo),
                 _lowpass(even, odd, None, None, halves, lo, t - hi),
                 _lowpass(even[..., t - lo - hi:, :], odd[..., t - lo - hi:, :], None, last, halves, lo, lo + hi)]
    zeros = [[mx.zeros((1, n, x.shape[-1]), x.dtype)] if n else [] for n in pad]
    return mx.concatenate(zeros[0] + parts + zeros[1], axis=-2)


def _lowpass(even: mx.array, odd: mx.array, first: mx.array | None, last: mx.array | None, halves: tuple,
             start: int, stop: int) -> mx.array:
    """Low-pass outputs ``start:stop`` of the window ``even``/``odd``; ``first`` / ``last`` (or None:
    the window has real samples there) replicate the signal's ends before / after it."""
    y = None
    for z, (taps, left, right) in zip((even, odd), halves):
        n = z.shape[-2]
        lpad = max(0, left - start) if first is not None else 0
        rpad = max(0, stop + right - n) if last is not None else 0
        if lpad or rpad:
            z = mx.concatenate([first] * lpad + [z] + [last] * rpad, axis=-2)
        # the kernel reads z[p + left + d] for output p: shift the window so output ``start`` is at p = 0
        lo, hi = start - left + lpad, stop + right + lpad
        kernel = _filter_kernel(taps, left, right, False, y is not None)
        z = z[..., lo: hi, :]
        y = kernel(z) if y is None else kernel(z, y)
    return y


def _replicate(x: mx.array, left: int, right: int) -> mx.array:
    return mx.concatenate([x[..., :1, :]] * left + [x] + [x[..., -1:, :]] * right, axis=-2)


# ----------------------------------------------------------------------------- modules

class Snake(nn.Module):
    """``x + sin^2(a x) / a`` (``alpha``, log-scale or not as the config says)."""

    def __init__(self, channels: int, logscale: bool):
        super().__init__()
        self.logscale = logscale
        self.alpha = mx.zeros((channels,)) if logscale else mx.ones((channels,))

    def factors(self) -> tuple[mx.array, mx.array]:
        """(frequency a, magnitude 1 / (b + 1e-9)) as upstream computes them."""
        a = mx.exp(self.alpha) if self.logscale else self.alpha
        return a, 1.0 / (a + 1e-9)


class SnakeBeta(Snake):
    """``x + sin^2(a x) / b``, a separate magnitude ``beta``."""

    def __init__(self, channels: int, logscale: bool):
        super().__init__(channels, logscale)
        self.beta = mx.zeros((channels,)) if logscale else mx.ones((channels,))

    def factors(self) -> tuple[mx.array, mx.array]:
        a = mx.exp(self.alpha) if self.logscale else self.alpha
        b = mx.exp(self.beta) if self.logscale else self.beta
        return a, 1.0 / (b + 1e-9)


class UpSample1d(nn.Module):
    """Holds the x2 upsampling filter (``filter [1, 1, 12]``); :class:`Activation1d` applies it."""

    def __init__(self, kernel_size: int = FILTER_TAPS):
        super().__init__()
        self.filter = mx.array(kaiser_sinc_filter(0.5 / RATIO, 0.6 / RATIO, kernel_size)).reshape(1, 1, -1)


class LowPassFilter1d(nn.Module):
    """Holds the anti-aliasing low-pass (``filter [1, 1, 12]``) applied before decimating by 2."""

    def __init__(self, kernel_size: int = FILTER_TAPS):
        super().__init__()
        self.filter = mx.array(kaiser_sinc_filter(0.5 / RATIO, 0.6 / RATIO, kernel_size)).reshape(1, 1, -1)


class DownSample1d(nn.Module):
    """``lowpass``: the low-pass decimation's filter holder (upstream's nesting, hence its name)."""

    def __init__(self, kernel_size: int = FILTER_TAPS):
        super().__init__()
        self.lowpass = LowPassFilter1d(kernel_size)


class Activation1d(nn.Module):
    """Anti-aliased Snake / SnakeBeta (upstream's torch ``Activation1d``), ``[B, T, C]`` in and out."""

    def __init__(self, act: Snake):
        super().__init__()
        self.act = act
        self.upsample = UpSample1d()
        self.downsample = DownSample1d()

    def _prepared(self):
        """(a, 1/b, kernels), derived once per set of parameter arrays: loading weights replaces
        the arrays, and with them what is derived here (kept outside the parameter tree)."""
        arrays = (*self.act.parameters().values(), self.upsample.filter, self.downsample.lowpass.filter)
        hit = self.__dict__.get("_derived")
        if hit is None or len(hit[0]) != len(arrays) or any(a is not b for a, b in zip(hit[0], arrays)):
            alpha, inv_beta = self.act.factors()
            mx.eval(alpha, inv_beta)
            up = tuple(float(v) for v in np.array(self.upsample.filter).reshape(-1))
            down = tuple(float(v) for v in np.array(self.downsample.lowpass.filter).reshape(-1))
            if len(up) % 2 or len(down) % 2:
                raise ValueError("the anti-aliasing filters must have an even number of taps")
            hit = self.__dict__["_derived"] = (arrays, alpha, inv_beta, up, down)
        return hit[1:]

    def __call__(self, x: mx.array, pad: tuple[int, int] = (0, 0)) -> mx.array:
        """``x [B, T, C]`` -> ``[B, T, C]``; ``pad`` zero frames added on (left, right)."""
        return _activation(x, *self._prepared(), pad=pad)


def _padding(kernel_size: int, dilation: int) -> int:
    return (kernel_size * dilation - dilation) // 2


class AMPBlock1(nn.Module):
    """Per dilation d: ``x += convs2(act(convs1_d(act(x))))`` (convs2 undilated)."""

    def __init__(self, args: BigVGANArgs, channels: int, kernel_size: int, dilations: list[int]):
        super().__init__()
        self.convs1 = [Conv1d(channels, channels, kernel_size, dilation=d, padding=_padding(kernel_size, d))
                       for d in dilations]
        self.convs2 = [Conv1d(channels, channels, kernel_size, padding=_padding(kernel_size, 1))
                       for _ in dilations]
        self.activations = [Activation1d(_snake(args, channels)) for _ in range(2 * len(dilations))]

    def __call__(self, x: mx.array) -> mx.array:
        acts = self.activations
        for c1, c2, a1, a2 in zip(self.convs1, self.convs2, acts[::2], acts[1::2]):
            x = _act_conv(a2, c2, _act_conv(a1, c1, x), residual=x)
        return x


class AMPBlock2(nn.Module):
    """Per dilation d: ``x += convs_d(act(x))``. (Upstream's vendored copy drops the block's
    return value, so a resblock-"2" model cannot run there; this returns ``x`` as NVIDIA's
    BigVGAN does.)"""

    def __init__(self, args: BigVGANArgs, channels: int, kernel_size: int, dilations: list[int]):
        super().__init__()
        self.convs = [Conv1d(channels, channels, kernel_size, dilation=d, padding=_padding(kernel_size, d))
                      for d in dilations]
        self.activations = [Activation1d(_snake(args, channels)) for _ in dilations]

    def __call__(self, x: mx.array) -> mx.array:
        for c, a in zip(self.convs, self.activations):
            x = _act_conv(a, c, x, residual=x)
        return x


def _snake(args: BigVGANArgs, channels: int) -> Snake:
    cls = SnakeBeta if args.activation == "snakebeta" else Snake
    return cls(channels, args.snake_logscale)


def _act_conv(act: Activation1d, conv: Conv1d, x: mx.array, residual: mx.array | None = None) -> mx.array:
    """``conv(act(x)) (+ residual)``, the activation writing the conv's zero padding, the conv as
    one GEMM per tap accumulated in place (faster here than one GEMM over stacked taps at every
    stage size, short inputs included)."""
    xp = act(x, pad=(conv.pad_left, conv.pad_right))
    return conv1d_accumulate(xp, conv.taps(), conv.get("bias"), conv.dilation, 1, residual)


class BigVGAN(nn.Module):
    """The generator; parameter names are the published ``bigvgan_generator.pt``'s (weight norm
    folded). ``mel [B, T, num_mels]`` -> ``[B, T * hop]`` float32."""

    def __init__(self, args: BigVGANArgs):
        super().__init__()
        self.args = args
        ch0 = args.upsample_initial_channel
        self.conv_pre = Conv1d(args.num_mels, ch0, 7, padding=3)
        self.ups = [[ConvTranspose1d(ch0 // 2 ** i, ch0 // 2 ** (i + 1), k, u, padding=(k - u) // 2)]
                    for i, (u, k) in enumerate(zip(args.upsample_rates, args.upsample_kernel_sizes))]
        block = AMPBlock1 if args.resblock == "1" else AMPBlock2
        self.resblocks = [block(args, ch0 // 2 ** (i + 1), k, d) for i in range(len(self.ups))
                          for k, d in zip(args.resblock_kernel_sizes, args.resblock_dilation_sizes)]
        ch = ch0 // 2 ** len(self.ups)
        self.activation_post = Activation1d(_snake(args, ch))
        self.conv_post = Conv1d(ch, 1, 7, padding=3, bias=args.use_bias_at_final)

    @property
    def hop(self) -> int:
        return self.args.upsample_factor

    def __call__(self, mel: mx.array) -> mx.array:
        n = len(self.args.resblock_kernel_sizes)
        x = self.conv_pre.accumulate(mel)
        for i, (up,) in enumerate(self.ups):
            x = up(x)
            xs = None
            for block in self.resblocks[i * n: (i + 1) * n]:
                y = block(x)
                xs = y if xs is None else xs + y
            x = xs * (1.0 / n)
        x = _act_conv(self.activation_post, self.conv_post, x)[..., 0]
        return mx.tanh(x) if self.args.use_tanh_at_final else mx.clip(x, -1.0, 1.0)


# ----------------------------------------------------------------------------- loading

def load_bigvgan(folder: Path | str) -> BigVGAN:
    """The published folder (``config.json`` + ``bigvgan_generator.pt`` holding
    ``{"generator": state_dict}``), weight norm folded, loaded strictly in float32."""
    folder = Path(folder)
    args = BigVGANArgs.from_file(folder / CONFIG)
    path = folder / GENERATOR
    weights = fold_weight_norm({k: mx.array(v) for k, v in torchfile.state_dict(path, key="generator").items()})
    return load_strict(BigVGAN(args), weights, source=str(path), dtype="float32")


def random_bigvgan(args: BigVGANArgs, seed: int = 0) -> BigVGAN:
    """The generator at ``args``' size with random convs (bench, tests): the anti-aliasing filters
    are upstream's fixed Kaiser-sinc taps, Snake's alpha / beta near 0 in log scale (near 1 in
    linear scale), and conv_post small so the waveform stays mostly inside the clamp."""
    model = BigVGAN(args)
    base = 0.0 if args.snake_logscale else 1.0
    taps = mx.array(kaiser_sinc_filter(0.5 / RATIO, 0.6 / RATIO, FILTER_TAPS)).reshape(1, 1, -1)

    def rule(name: str, w: mx.array, normal: mx.array) -> mx.array:
        if name.endswith(".filter"):
            return taps
        if name.endswith((".alpha", ".beta")):
            return base + 0.05 * normal
        if name.startswith("conv_post.weight"):
            return 0.1 * w
        return w

    return random_weights(model, seed=seed, rule=rule)

"""Causal 1-D convolutions and SnakeBeta for the speech decoder, channels-last ``[L, C]``.

MLX's CPU backend runs dilated and transposed ``conv1d`` on a generic path that never reaches
BLAS (measured here with OpenBLAS, 384 channels, 4000 samples, k=7, dilation 9: 6.7 s with
mx.conv1d, 43 ms as shifted matmuls, 100 ms as one im2col matmul; a stride-5 transposed conv
768->384 over 800 steps: 3.8 s with mx.conv_transpose1d, 17 ms as matmul + overlap-add). So:

* a causal conv is a sum over its k taps of ``x[shifted] @ W_tap`` (weights kept ``[k, in, out]``);
* a causal transposed conv (kernel ``m * stride``) is one ``x @ W`` giving ``m`` blocks of
  ``stride`` outputs per input step, overlap-added by shifting block i down i steps.

Every conv takes an explicit cache (``ConvCache``) holding the input tail it needs from the
previous call: zero-filled at the start, which is exactly the reference's causal left padding.
Decoding a clip in one call or in any split into chunks therefore computes the same sums.
"""
from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn


IM2COL_MAX_ROWS = 512


class ConvCache:
    """The last inputs a causal conv needs to continue a stream (None: the stream starts here)."""

    __slots__ = ("tail",)

    def __init__(self):
        self.tail: mx.array | None = None


def _with_tail(x: mx.array, cache: ConvCache | None, keep: int) -> mx.array:
    if keep == 0:
        return x
    if cache is None or cache.tail is None:
        tail = mx.zeros((keep, x.shape[1]), x.dtype)
    else:
        tail = cache.tail
    xin = mx.concatenate([tail, x], axis=0)
    if cache is not None:
        cache.tail = xin[-keep:]
    return xin


class ConvWeights(nn.Module):
    """Holds ``conv.weight`` / ``conv.bias`` under the checkpoint's names (layout set by sanitize)."""

    def __init__(self, weight_shape: tuple, out_channels: int, bias: bool = True):
        super().__init__()
        self.weight = mx.zeros(weight_shape)
        if bias:
            self.bias = mx.zeros((out_channels,))


class CausalConv1d(nn.Module):
    """Conv1d with zero left padding ``(k-1)*dilation`` and none on the right (stride 1).

    ``conv.weight`` is ``[k, in, out]`` (PyTorch ``[out, in, k]`` transposed by sanitize).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 bias: bool = True):
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.conv = ConvWeights((kernel_size, in_channels, out_channels), out_channels, bias)

    def make_cache(self) -> ConvCache | None:
        return ConvCache() if self.kernel_size > 1 else None

    def __call__(self, x: mx.array, cache: ConvCache | None = None) -> mx.array:
        k, d = self.kernel_size, self.dilation
        w = self.conv.weight
        L = x.shape[0]
        xin = _with_tail(x, cache, (k - 1) * d)
        has_bias = "bias" in self.conv
        if k > 1 and L <= IM2COL_MAX_ROWS and w.shape[2] > 1:
            # few rows (streaming chunks, the 50 Hz stages): the GEMM is bound by streaming the
            # weights, and one [L, k*in] x [k*in, out] product beats k separate ones (measured
            # 19 vs 60 ms at L=12, C=1024); for long inputs the k-fold copy costs more
            cols = mx.concatenate([xin[j * d:j * d + L] for j in range(k)], axis=1)
            wk = w.reshape(-1, w.shape[2])
            return mx.addmm(self.conv.bias, cols, wk) if has_bias else cols @ wk
        y = mx.addmm(self.conv.bias, xin[:L], w[0]) if has_bias else xin[:L] @ w[0]
        for j in range(1, k):
            # addmm accumulates in the GEMM (beta=1) instead of a separate add pass
            y = mx.addmm(y, xin[j * d:j * d + L], w[j])
        return y


class CausalDepthwiseConv1d(nn.Module):
    """Depthwise (groups = channels) causal conv; ``conv.weight`` is ``[k, channels]``."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv = ConvWeights((kernel_size, channels), channels)

    def make_cache(self) -> ConvCache:
        return ConvCache()

    def __call__(self, x: mx.array, cache: ConvCache | None = None) -> mx.array:
        k = self.kernel_size
        w = self.conv.weight
        L = x.shape[0]
        xin = _with_tail(x, cache, k - 1)
        y = xin[:L] * w[0]
        for j in range(1, k):
            y = y + xin[j:j + L] * w[j]
        return y + self.conv.bias


class CausalConvTranspose1d(nn.Module):
    """ConvTranspose1d(kernel = m*stride) with the right ``kernel - stride`` samples trimmed.

    Output step t (``stride`` samples) is ``sum_i x[t-i] @ W_block_i``: causal, needing the
    previous ``m-1`` inputs. ``conv.weight`` is ``[in, k, out]`` (PyTorch ``[in, out, k]``).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        if kernel_size % stride:
            raise ValueError(f"transposed conv kernel {kernel_size} is not a multiple of stride {stride}")
        self.stride = stride
        self.blocks = kernel_size // stride
        self.out_channels = out_channels
        self.conv = ConvWeights((in_channels, kernel_size, out_channels), out_channels)

    def make_cache(self) -> ConvCache | None:
        return ConvCache() if self.blocks > 1 else None

    def __call__(self, x: mx.array, cache: ConvCache | None = None) -> mx.array:
        m, s, c = self.blocks, self.stride, self.out_channels
        L = x.shape[0]
        xin = _with_tail(x, cache, m - 1)
        w = self.conv.weight
        y = (xin @ w.reshape(w.shape[0], -1)).reshape(xin.shape[0], m, s, c)
        out = y[m - 1:, 0]
        for i in range(1, m):
            out = out + y[m - 1 - i:m - 1 - i + L, i]
        return out.reshape(L * s, c) + self.conv.bias


# sin(u)^2 = sin(r)^2 with r = u - k*pi, |r| <= pi/2: the sign (-1)^k squares away. k is rounded
# with the 1.5*2^23 trick (plain adds; mx.round made the fused CPU kernel 2x slower), pi is split
# (Cody-Waite) so k*_PI_A is exact for |k| < 2^16, and Taylor to r^13 is within 7e-10 on
# [-pi/2, pi/2]. MLX's CPU sin is a scalar libm call: this fused form is ~6x faster here, and
# the decoder evaluates ~2.8 million of them per 80 ms frame.
_PI_A = 3.140625
_PI_B = math.pi - _PI_A
_ROUND = 12582912.0
_SIN_COEFFS = [(-1) ** i / math.factorial(2 * i + 1) for i in range(6, 0, -1)]   # r^13 ... r^3


@mx.compile
def _snake_poly(x: mx.array, alpha: mx.array, inv_beta: mx.array) -> mx.array:
    u = x * alpha
    k = (u * (1.0 / math.pi) + _ROUND) - _ROUND
    r = (u - k * _PI_A) - k * _PI_B
    r2 = r * r
    p = _SIN_COEFFS[0]
    for c in _SIN_COEFFS[1:]:
        p = p * r2 + c
    s = r + r * r2 * p
    return x + inv_beta * (s * s)


@mx.compile
def _snake_sin(x: mx.array, alpha: mx.array, inv_beta: mx.array) -> mx.array:
    s = mx.sin(x * alpha)
    return x + inv_beta * (s * s)


_snake_impl = {}


def _snake(x: mx.array, alpha: mx.array, inv_beta: mx.array) -> mx.array:
    """The polynomial for float32 on CPU, if this build computes it as written (a fast-math
    compiler could fold the rounding adds away); the native sin elsewhere (GPUs have a fast one;
    the rounding constant does not fit half precision)."""
    if x.dtype != mx.float32:
        return _snake_sin(x, alpha, inv_beta)
    dev = str(mx.default_device())
    fn = _snake_impl.get(dev)
    if fn is None:
        fn = _snake_sin
        if mx.default_device() == mx.cpu:
            u = mx.linspace(-60.0, 60.0, 4001)
            one = mx.ones((1,))
            if mx.abs(_snake_poly(u, one, one) - _snake_sin(u, one, one)).max().item() < 1e-5:
                fn = _snake_poly
        _snake_impl[dev] = fn
    return fn(x, alpha, inv_beta)


class SnakeBeta(nn.Module):
    """x + 1/(exp(beta) + 1e-9) * sin(x * exp(alpha))^2, alpha and beta stored in log space."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = mx.zeros((channels,))
        self.beta = mx.zeros((channels,))
        self._derived = None

    def prepare(self) -> None:
        self._derived = (mx.exp(self.alpha), 1.0 / (mx.exp(self.beta) + 1e-9))

    def make_cache(self) -> None:
        return None

    def __call__(self, x: mx.array, cache: None = None) -> mx.array:
        if self._derived is None:
            self.prepare()
        alpha, inv_beta = self._derived
        return _snake(x, alpha, inv_beta)

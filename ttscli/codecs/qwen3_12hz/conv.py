"""The speech decoder's causal convs (checkpoint names ``*.conv.weight``, streaming state) and
SnakeBeta, channels-last ``[L, C]``.

The convs are :mod:`ttscli.nn.conv`'s as GEMMs with ``padding="causal"``: each takes an explicit
cache (a ``ConvState``) holding the input tail it needs from the previous call, zero at the
start, which is exactly the reference's causal left padding. Decoding a clip in one call or in
any split into chunks therefore computes the same sums.
"""
from __future__ import annotations

import math

import mlx.core as mx
from mlx import nn

from ttscli.nn.compiled import compile_bounded
from ttscli.nn.conv import Conv1d, ConvState, ConvTranspose1d, DepthwiseConv1d


class CausalConv1d(nn.Module):
    """Conv1d with zero left padding ``(k-1)*dilation`` and none on the right (stride 1)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 bias: bool = True):
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.conv = Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, padding="causal", bias=bias)

    def make_cache(self) -> ConvState | None:
        return self.conv.make_state()

    def __call__(self, x: mx.array, cache: ConvState | None = None) -> mx.array:
        return self.conv(x, state=cache)


class CausalDepthwiseConv1d(nn.Module):
    """Depthwise (groups = channels) causal conv."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv = DepthwiseConv1d(channels, kernel_size, padding="causal")

    def make_cache(self) -> ConvState | None:
        return self.conv.make_state()

    def __call__(self, x: mx.array, cache: ConvState | None = None) -> mx.array:
        return self.conv(x, cache)


class CausalConvTranspose1d(nn.Module):
    """ConvTranspose1d with the right ``kernel - stride`` samples trimmed: L steps -> L*stride
    samples, needing the previous ``ceil(kernel / stride) - 1`` inputs."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        self.stride = stride
        self.conv = ConvTranspose1d(in_channels, out_channels, kernel_size, stride, "causal")
        self.blocks = self.conv.phases

    def make_cache(self) -> ConvState | None:
        return self.conv.make_state()

    def __call__(self, x: mx.array, cache: ConvState | None = None) -> mx.array:
        return self.conv(x, cache)


# sin(u)^2 = sin(r)^2 with r = u - k*pi, |r| <= pi/2: the sign (-1)^k squares away. k is rounded
# with the 1.5*2^23 trick (plain adds; mx.round made the fused CPU kernel 2x slower), pi is split
# (Cody-Waite) so k*_PI_A is exact for |k| < 2^16, and Taylor to r^13 is within 7e-10 on
# [-pi/2, pi/2]. MLX's CPU sin is a scalar libm call: this fused form is several times faster, and
# the decoder evaluates ~2.8 million of them per 80 ms frame.
_PI_A = 3.140625
_PI_B = math.pi - _PI_A
_ROUND = 12582912.0
_SIN_COEFFS = [(-1) ** i / math.factorial(2 * i + 1) for i in range(6, 0, -1)]   # r^13 ... r^3


@compile_bounded  # per shape, bounded (a plain trace per length grows a server; MLX's shapeless CPU
# kernel is slower on [1, T, C])
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


@compile_bounded
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

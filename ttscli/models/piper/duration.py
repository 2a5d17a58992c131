"""VITS stochastic duration predictor, inference direction only.

Noise ``[1, T, 2]`` goes backwards through the flows (conditioned on the text encoding):
rational-quadratic spline couplings (``ConvFlow``), channel flips and a final elementwise
affine. The first channel of the result is log-duration per phoneme.
"""
from __future__ import annotations

import math
from functools import partial

import mlx.core as mx
import mlx.nn as nn

from ttscli.nn.fastmath import horner
from ttscli.nn.compiled import compile_bounded

from ttscli.nn.conv import DepthwiseConv1d, depthwise_conv1d, pad_time

from .conv import Conv1d
from .text_encoder import LayerNorm


# erf(x) ~= x P(v) / Q(v), v = (x/4)^2, |x| clipped to 4 (erf(4) = 1 - 1.5e-8): a rational
# least-squares fit made for this file, max abs error 3.4e-7 in float32. MLX's CPU erf is a
# scalar loop (~29 ns/element here), which made GELU 2/3 of this predictor's time.
_ERF_P = (1.1283790461435375, 3.0769310962690457, 13.563331332845676, 15.747916920820238,
          18.755616594857067, 2.125764045539171)
_ERF_Q = (1.0, 8.060169574186187, 29.409161171900298, 61.94966074675191, 77.40177871689224,
          39.77097360625498)


@partial(mx.compile, shapeless=True)
def fast_gelu(x: mx.array) -> mx.array:
    """Exact-form GELU ``x (1 + erf(x / sqrt 2)) / 2`` with the rational erf above."""
    u = mx.clip(x * (1 / math.sqrt(2)), -4.0, 4.0)
    v = u * u * (1.0 / 16.0)
    return x * (1 + u * horner(_ERF_P, v) / horner(_ERF_Q, v)) / 2


class DDSConv(nn.Module):
    """Dilated depthwise-separable conv stack (dilation k**i), GELU, residual."""

    def __init__(self, channels: int, kernel_size: int, n_layers: int):
        super().__init__()
        self.convs_sep = [DepthwiseConv1d(channels, kernel_size, kernel_size ** i,
                                          kernel_size ** i * (kernel_size - 1) // 2)
                          for i in range(n_layers)]
        self.convs_1x1 = [Conv1d(channels, channels, 1) for _ in range(n_layers)]
        self.norms_1 = [LayerNorm(channels) for _ in range(n_layers)]
        self.norms_2 = [LayerNorm(channels) for _ in range(n_layers)]

    def __call__(self, x: mx.array, g: mx.array | None = None) -> mx.array:
        if g is not None:
            x = x + g
        for sep, pw, n1, n2 in zip(self.convs_sep, self.convs_1x1, self.norms_1, self.norms_2):
            x = _dds_layer(x, sep.taps(), sep.bias, n1.gamma, n1.beta, pw.weight_output_side(), pw.bias,
                           n2.gamma, n2.beta, sep.dilation, n1.eps, n2.eps)
        return x


@compile_bounded
def _dds_layer(x, sep_taps, sep_b, g1, b1, pw_w, pw_b, g2, b2, dilation, eps1, eps2):
    """One DDSConv layer as one compiled graph: the depthwise taps, biases, GELUs and the
    residual add fuse into a few kernels (~15 separate ops on [T, C] before)."""
    pad = dilation * (sep_taps.shape[0] - 1) // 2
    h = depthwise_conv1d(pad_time(x, pad, pad), sep_taps, sep_b, dilation)
    y = fast_gelu(mx.fast.layer_norm(h, g1, b1, eps1))
    y = mx.fast.layer_norm(y @ pw_w + pw_b, g2, b2, eps2)
    return x + fast_gelu(y)


def _searchsorted(edges: mx.array, x: mx.array) -> mx.array:
    """Bin index of ``x`` in ascending ``edges [..., n+1]`` (last edge nudged up by 1e-6)."""
    edges = mx.concatenate([edges[..., :-1], edges[..., -1:] + 1e-6], axis=-1)
    return (x[..., None] >= edges).astype(mx.int32).sum(-1) - 1


def _take(a: mx.array, idx: mx.array) -> mx.array:
    return mx.take_along_axis(a, idx[..., None], axis=-1)[..., 0]


def inverse_rq_spline(x: mx.array, widths: mx.array, heights: mx.array, derivs: mx.array,
                      tail_bound: float, min_bin: float = 1e-3, min_deriv: float = 1e-3) -> mx.array:
    """Inverse of the monotone rational-quadratic spline on [-B, B], identity outside.

    ``widths``/``heights`` are unnormalised ``[..., n]``, ``derivs`` ``[..., n-1]`` (the
    boundary derivatives are fixed to 1 through the "linear tails" convention).
    """
    n = widths.shape[-1]
    bound = tail_bound
    const = math.log(math.exp(1 - min_deriv) - 1)
    pad = mx.full(derivs.shape[:-1] + (1,), const, dtype=derivs.dtype)
    derivs = mx.concatenate([pad, derivs, pad], axis=-1)

    def edges(unnorm):
        w = mx.softmax(unnorm, axis=-1, precise=True)
        w = min_bin + (1 - min_bin * n) * w
        c = mx.cumsum(w, axis=-1)
        c = 2 * bound * c - bound
        lo = mx.full(c.shape[:-1] + (1,), -bound, dtype=c.dtype)
        c = mx.concatenate([lo, c[..., :-1], -lo], axis=-1)   # ends pinned exactly to +-B
        return c, c[..., 1:] - c[..., :-1]

    cumw, w = edges(widths)
    cumh, h = edges(heights)
    d = min_deriv + nn.softplus(derivs)

    inside = (x >= -bound) & (x <= bound)
    xi = mx.where(inside, x, 0.0)
    idx = _searchsorted(cumh, xi)
    in_cumw, in_w = _take(cumw, idx), _take(w, idx)
    in_cumh, in_h = _take(cumh, idx), _take(h, idx)
    in_delta = in_h / in_w
    d0, d1 = _take(d[..., :-1], idx), _take(d[..., 1:], idx)

    dy = xi - in_cumh
    s = d0 + d1 - 2 * in_delta
    a = dy * s + in_h * (in_delta - d0)
    b = in_h * d0 - dy * s
    c = -in_delta * dy
    disc = b * b - 4 * a * c
    root = (2 * c) / (-b - mx.sqrt(disc))
    return mx.where(inside, root * in_w + in_cumw, x)


class ConvFlow(nn.Module):
    def __init__(self, in_channels: int, filter_channels: int, kernel_size: int, n_layers: int,
                 num_bins: int = 10, tail_bound: float = 5.0):
        super().__init__()
        self.half = in_channels // 2
        self.filter_channels = filter_channels
        self.num_bins = num_bins
        self.tail_bound = tail_bound
        self.pre = Conv1d(self.half, filter_channels, 1)
        self.convs = DDSConv(filter_channels, kernel_size, n_layers)
        self.proj = Conv1d(filter_channels, self.half * (3 * num_bins - 1), 1)

    def reverse(self, z: mx.array, g: mx.array) -> mx.array:
        x0, x1 = z[..., : self.half], z[..., self.half:]
        h = self.proj(self.convs(self.pre(x0), g))
        t = h.shape[1]
        # torch lays proj channels out as [half, 3n-1]; here [T, half, 3n-1]
        h = h.reshape(1, t, self.half, 3 * self.num_bins - 1)
        n, scale = self.num_bins, math.sqrt(self.filter_channels)
        x1 = inverse_rq_spline(x1, h[..., :n] / scale, h[..., n: 2 * n] / scale, h[..., 2 * n:],
                               self.tail_bound)
        return mx.concatenate([x0, x1], axis=-1)


class ElementwiseAffine(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.m = mx.zeros((channels, 1))
        self.logs = mx.zeros((channels, 1))

    def reverse(self, z: mx.array) -> mx.array:
        return (z - self.m[:, 0]) * mx.exp(-self.logs[:, 0])


class StochasticDurationPredictor(nn.Module):
    """``flows`` keeps the training layout (0: affine, odd: ConvFlow, even: Flip); inference
    runs them backwards and skips flows[1], as the original does."""

    def __init__(self, channels: int, filter_channels: int, kernel_size: int, n_flows: int = 4,
                 num_bins: int = 10, tail_bound: float = 5.0):
        super().__init__()
        self.pre = Conv1d(channels, filter_channels, 1)
        self.convs = DDSConv(filter_channels, kernel_size, 3)
        self.proj = Conv1d(filter_channels, filter_channels, 1)
        self.flows = [ElementwiseAffine(2)]
        for _ in range(n_flows):
            self.flows += [ConvFlow(2, filter_channels, kernel_size, 3, num_bins, tail_bound), {}]
        self.flows[1] = {}   # never used at inference; the ONNX export drops its weights

    def reverse(self, x: mx.array, noise: mx.array) -> mx.array:
        """``x [1, T, C]`` text encoding, ``noise [1, T, 2]`` (already scaled) -> log-durations ``[1, T]``."""
        g = self.proj(self.convs(self.pre(x)))
        z = noise
        for i in range(len(self.flows) - 1, 1, -1):
            flow = self.flows[i]
            z = flow.reverse(z, g) if isinstance(flow, ConvFlow) else z[..., ::-1]
        z = self.flows[0].reverse(z)
        return z[..., 0]

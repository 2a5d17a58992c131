"""1-D convolutions written as matrix products, channels-last ``[1, T, C]``.

MLX's CPU backend runs dilated and transposed ``conv1d`` on a slow generic path; HiFi-GAN is
made of exactly those. Here a (dilated) convolution is one GEMM over an im2col view and a
transposed convolution is one GEMM followed by an overlap-add, so both reach BLAS.
Weights use MLX's conv layout ``[out, K, in]``, the transposed conv too (the loader converts
ONNX's ``[out, in, K]`` and ``[in, out, K]``).
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


def conv1d_gemm(x: mx.array, weight: mx.array, bias: mx.array | None, dilation: int = 1,
                padding: int = 0) -> mx.array:
    """``x [B, T, Cin]``, ``weight [Cout, K, Cin]`` -> ``[B, T + 2p - d(K-1), Cout]``."""
    cout, k, cin = weight.shape
    if padding:
        x = mx.pad(x, [(0, 0), (padding, padding), (0, 0)])
    t_out = x.shape[1] - dilation * (k - 1)
    if k == 1:
        cols = x
    else:
        # im2col: one [T, K*Cin] x [K*Cin, Cout] product beats K smaller ones on this CPU
        cols = mx.concatenate([x[:, i * dilation: i * dilation + t_out] for i in range(k)], axis=-1)
    y = cols @ weight.reshape(cout, k * cin).T
    return y + bias if bias is not None else y


def conv_transpose1d_gemm(x: mx.array, weight: mx.array, bias: mx.array | None, stride: int,
                          padding: int) -> mx.array:
    """Transposed conv: ``x [B, T, Cin]``, ``weight [Cout, K, Cin]`` -> ``[B, (T-1)s + K - 2p, Cout]``."""
    b, t, cin = x.shape
    cout, k, _ = weight.shape
    n = -(-k // stride)                              # input frames touching one output frame
    if n * stride != k:
        weight = mx.pad(weight, [(0, 0), (0, n * stride - k), (0, 0)])
    # every input frame writes K = n*s outputs: [B, T, n, s, Cout]
    y = x @ weight.transpose(1, 0, 2).reshape(n * stride * cout, cin).T
    y = y.reshape(b, t, n, stride, cout)
    out = mx.zeros((b, t + n - 1, stride, cout), dtype=y.dtype)
    for j in range(n):                               # overlap-add of the n phases
        out = out + mx.pad(y[:, :, j], [(0, 0), (j, n - 1 - j), (0, 0), (0, 0)])
    out = out.reshape(b, (t + n - 1) * stride, cout)
    length = (t - 1) * stride + k - 2 * padding
    out = out[:, padding: padding + length]
    return out + bias if bias is not None else out


class Conv1d(nn.Module):
    """Conv1d with PyTorch semantics (symmetric padding, dilation), weight ``[out, K, in]``."""

    def __init__(self, cin: int, cout: int, kernel_size: int, dilation: int = 1,
                 padding: int | None = None, bias: bool = True):
        super().__init__()
        self.weight = mx.zeros((cout, kernel_size, cin))
        if bias:
            self.bias = mx.zeros((cout,))
        self.dilation = dilation
        self.padding = dilation * (kernel_size - 1) // 2 if padding is None else padding

    def __call__(self, x: mx.array) -> mx.array:
        return conv1d_gemm(x, self.weight, self["bias"] if "bias" in self else None,
                           self.dilation, self.padding)


class ConvTranspose1d(nn.Module):
    def __init__(self, cin: int, cout: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.weight = mx.zeros((cout, kernel_size, cin))
        self.bias = mx.zeros((cout,))
        self.stride = stride
        self.padding = padding

    def __call__(self, x: mx.array) -> mx.array:
        return conv_transpose1d_gemm(x, self.weight, self.bias, self.stride, self.padding)


class DepthwiseConv1d(nn.Module):
    """Per-channel conv (groups == channels) as a sum of K shifted, scaled copies."""

    def __init__(self, channels: int, kernel_size: int, dilation: int = 1):
        super().__init__()
        self.weight = mx.zeros((channels, kernel_size, 1))
        self.bias = mx.zeros((channels,))
        self.dilation = dilation
        self.padding = dilation * (kernel_size - 1) // 2

    def __call__(self, x: mx.array) -> mx.array:
        k = self.weight.shape[1]
        t = x.shape[1]
        x = mx.pad(x, [(0, 0), (self.padding, self.padding), (0, 0)])
        y = self.bias
        for i in range(k):
            y = y + x[:, i * self.dilation: i * self.dilation + t] * self.weight[:, i, 0]
        return y

"""The WaveNet stack that ends IndexTTS2's DiT (``net.cfm.estimator.wavenet.*`` of ``s2mel.pth``).

Upstream's ``WN`` (VITS lineage) built from EnCodec's ``SConv1d``: gated dilated convolutions
conditioned on one vector per row (the flow time's second embedding), residual and skip
outputs summed. Two details of ``SConv1d`` are kept because the weights were trained with them:
the convolutions pad by *reflection* (the ``padding=`` the constructor is given never reaches the
convolution), and each conv sits two levels down, ``in_layers.N.conv.conv`` (the wrapper and its
``NormConv1d``). The weight-normed ``weight_g``/``weight_v`` pairs are folded once at load
(:func:`ttscli.checkpoint.fold_weight_norm`), so the modules hold plain ``weight`` tensors.

Channels-last ``[B, T, C]``. Inference runs with every frame valid, so upstream's time mask
(all ones there) is not applied.
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.nn.conv import Conv1d
from ttscli.nn.fastmath import on_cpu


def _gate_host(a: mx.array) -> mx.array:
    x = np.asarray(a)
    h = x.shape[-1] // 2
    t = np.tanh(x[..., :h])
    s = np.multiply(x[..., h:], np.float32(0.5))
    np.tanh(s, out=s)                  # sigmoid(b) = (1 + tanh(b / 2)) / 2
    s += 1.0
    s *= 0.5
    t *= s
    return mx.array(t)


def gate(a: mx.array, g: mx.array) -> mx.array:
    """``tanh(first half) * sigmoid(second half)`` of ``a + g`` over the last axis (upstream's
    ``fused_add_tanh_sigmoid_multiply``). On the CPU by numpy, whose float32 ``tanh`` is SIMD where
    MLX's CPU kernels are scalar on x86-64 (two to three times faster for these ``[T, 2 hidden]``
    activations, at one host sync per layer)."""
    a = a + g
    if on_cpu() and a.dtype == mx.float32:
        return _gate_host(a)
    h = a.shape[-1] // 2
    return mx.tanh(a[..., :h]) * mx.sigmoid(a[..., h:])


class NormConv1d(nn.Module):
    """EnCodec's ``NormConv1d`` with weight norm: only the conv (``.conv``) holds tensors."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1):
        super().__init__()
        span = (kernel_size - 1) * dilation
        # SConv1d's split of the total padding for stride 1: the extra frame goes left
        right = span // 2
        self.conv = Conv1d(in_channels, out_channels, kernel_size, dilation=dilation,
                           padding=(span - right, right), pad_mode="reflect")

    def __call__(self, x: mx.array) -> mx.array:
        # one GEMM over the stacked taps: for these widths (512 in, 1024 out, k 5) it beats
        # Conv1d's per-tap sum at every length, where Conv1d picks that sum past 512 frames
        return self.conv.im2col(x) if self.conv.kernel_size > 1 else self.conv(x)


class SConv1d(nn.Module):
    """EnCodec's ``SConv1d`` (stride 1, not causal): reflection-padded to keep the length."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1):
        super().__init__()
        self.conv = NormConv1d(in_channels, out_channels, kernel_size, dilation)

    def __call__(self, x: mx.array) -> mx.array:
        return self.conv(x)


class WN(nn.Module):
    """Gated residual stack: ``n_layers`` of (dilated conv + condition -> tanh x sigmoid ->
    1x1 conv into a residual half and a skip half; the last layer is skip only)."""

    def __init__(self, hidden_channels: int, kernel_size: int, dilation_rate: int, n_layers: int,
                 gin_channels: int):
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"WaveNet kernel_size must be odd, got {kernel_size}")
        self.hidden_channels = hidden_channels
        self.n_layers = n_layers
        self.cond_layer = SConv1d(gin_channels, 2 * hidden_channels * n_layers, 1)
        self.in_layers = [SConv1d(hidden_channels, 2 * hidden_channels, kernel_size, dilation_rate ** i)
                          for i in range(n_layers)]
        self.res_skip_layers = [SConv1d(hidden_channels, 2 * hidden_channels if i < n_layers - 1
                                        else hidden_channels, 1) for i in range(n_layers)]
        # how far back an output frame sees: outputs this far from a cut are as without the cut
        self.reach = sum(layer.conv.conv.pad_left for layer in self.in_layers)

    def __call__(self, x: mx.array, g: mx.array) -> mx.array:
        """``x [B, T, hidden]``, ``g [B, gin]`` (one condition vector per row) -> ``[B, T, hidden]``."""
        h = self.hidden_channels
        cond = self.cond_layer(g[:, None, :])                       # [B, 1, 2 h n_layers]
        out = None
        for i, (conv_in, res_skip) in enumerate(zip(self.in_layers, self.res_skip_layers)):
            acts = gate(conv_in(x), cond[..., 2 * h * i: 2 * h * (i + 1)])
            rs = res_skip(acts)
            if i < self.n_layers - 1:
                x = x + rs[..., :h]
                skip = rs[..., h:]
            else:
                skip = rs
            out = skip if out is None else out + skip
        return out

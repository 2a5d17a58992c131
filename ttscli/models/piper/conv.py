"""Piper's conv layer: :class:`ttscli.nn.conv.Conv1d` with VITS's symmetric padding ``d(k-1)/2``
whose plain call is the output-side GEMM form (one GEMM over the whole input, then a compiled
shifted sum; the measured best for the flow's and text encoder's shapes). Weights ``[out, in, k]``
as in the ONNX graph."""
from __future__ import annotations

import mlx.core as mx

from ttscli.nn import conv


class Conv1d(conv.Conv1d):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation,
                         padding=dilation * (kernel_size - 1) // 2, bias=bias)

    def __call__(self, x: mx.array, residual: mx.array | None = None) -> mx.array:
        return self.output_side(x, residual)

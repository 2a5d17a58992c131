"""PyTorch's ``nn.LSTM`` (batch first, zero initial state) under its state-dict names.

Gates in torch's order i, f, g, o with two bias vectors (``bias_ih``, ``bias_hh``); layers
stacked, each optionally bidirectional (``_reverse`` weights read the sequence backwards). The
input projections of a whole layer are one GEMM before its time loop; the loop runs both
directions together as a batch of two, one compiled step per position (its trace depends only
on the sizes, never on the sequence length, so a bounded compile keeps a handful).
"""
from __future__ import annotations

import mlx.core as mx
from mlx import nn

from ttscli.nn.compiled import compile_bounded

_SUFFIXES = ("", "_reverse")


@compile_bounded
def _step(xg: mx.array, h: mx.array, c: mx.array, whh: mx.array) -> tuple[mx.array, mx.array]:
    # xg [D, B, 4H]: input projection + both biases; h, c [D, B, H]; whh [D, H, 4H]
    hidden = h.shape[-1]
    g = xg + h @ whh
    i = mx.sigmoid(g[..., :hidden])
    f = mx.sigmoid(g[..., hidden:2 * hidden])
    gg = mx.tanh(g[..., 2 * hidden:3 * hidden])
    o = mx.sigmoid(g[..., 3 * hidden:])
    c = f * c + i * gg
    return o * mx.tanh(c), c


class LSTM(nn.Module):
    """``torch.nn.LSTM(input_size, hidden, num_layers, bidirectional=..., batch_first=True)``."""

    def __init__(self, input_size: int, hidden: int, num_layers: int = 1, bidirectional: bool = False):
        super().__init__()
        self.hidden, self.num_layers, self.directions = hidden, num_layers, 2 if bidirectional else 1
        for k in range(num_layers):
            fan_in = input_size if k == 0 else hidden * self.directions
            for sfx in _SUFFIXES[:self.directions]:
                setattr(self, f"weight_ih_l{k}{sfx}", mx.zeros((4 * hidden, fan_in)))
                setattr(self, f"weight_hh_l{k}{sfx}", mx.zeros((4 * hidden, hidden)))
                setattr(self, f"bias_ih_l{k}{sfx}", mx.zeros((4 * hidden,)))
                setattr(self, f"bias_hh_l{k}{sfx}", mx.zeros((4 * hidden,)))

    def _layer(self, k: int, x: mx.array) -> mx.array:
        """One layer over ``x [B, T, in]`` -> ``[B, T, D * H]``."""
        b, t, _ = x.shape
        names = [f"l{k}{sfx}" for sfx in _SUFFIXES[:self.directions]]
        wih = mx.stack([getattr(self, "weight_ih_" + n).T for n in names])
        whh = mx.stack([getattr(self, "weight_hh_" + n).T for n in names])
        bias = mx.stack([getattr(self, "bias_ih_" + n) + getattr(self, "bias_hh_" + n) for n in names])
        xs = [x, x[:, ::-1]][:len(names)]                        # the reverse direction reads backwards
        xs = mx.stack(xs).reshape(len(names), b * t, -1)
        xg = (xs @ wih + bias[:, None, :]).reshape(len(names), b, t, -1)
        h = mx.zeros((len(names), b, self.hidden), x.dtype)
        c = mx.zeros((len(names), b, self.hidden), x.dtype)
        outs = []
        for s in range(t):
            h, c = _step(xg[:, :, s], h, c, whh)
            outs.append(h)
        y = mx.stack(outs, axis=2)                                 # [D, B, T, H]
        return mx.concatenate([y[0], y[1][:, ::-1]], axis=-1) if len(names) == 2 else y[0]

    def __call__(self, x: mx.array) -> mx.array:
        """``x [B, T, in]`` (or unbatched ``[T, in]``, as torch takes it) -> every position's output
        of the last layer ``[B, T, D * H]`` (``[T, D * H]``); the final state of a one-way LSTM
        is ``out[:, -1]``."""
        unbatched = x.ndim == 2
        if unbatched:
            x = x[None]
        for k in range(self.num_layers):
            x = self._layer(k, x)
        return x[0] if unbatched else x

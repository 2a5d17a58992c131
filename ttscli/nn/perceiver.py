"""The perceiver resampler (lucidrains' ``PerceiverResampler``, as NaturalSpeech 2 / XTTS /
IndexTTS use it): a fixed set of learned latents that attend over ``[latents ‖ context]``, so
any number of context frames becomes ``num_latents`` vectors.

Parameter names are the checkpoints' (``latents``, ``proj_context``,
``layers.N.0.{to_q,to_kv,to_out}``, ``layers.N.1.{0,2}`` (the GEGLU feed-forward's two Linears;
slot 1 is the parameterless GEGLU), ``norm.gamma``), so weights load without renaming.
Channels-last ``[B, T, C]``; every context frame is attended (no padding mask).
"""
from __future__ import annotations

import mlx.core as mx
from mlx import nn

from ttscli.nn.layers import attention


class GEGLU(nn.Module):
    """``x, gate = split(x)``; ``gelu(gate) * x`` (the exact, erf GELU)."""

    def __call__(self, x: mx.array) -> mx.array:
        a, gate = mx.split(x, 2, axis=-1)
        return nn.gelu(gate) * a


def feed_forward(dim: int, mult: float = 4) -> list[nn.Module]:
    """Linear to twice ``int(dim * mult * 2/3)`` -> GEGLU -> Linear back to ``dim``, as a list so
    the checkpoint's Sequential indices (0, 2) are the parameter names."""
    inner = int(dim * mult * 2 / 3)
    return [nn.Linear(dim, inner * 2), GEGLU(), nn.Linear(inner, dim)]


class RMSNorm(nn.Module):
    """``normalize(x) * sqrt(dim) * gamma``, i.e. x / rms(x) * gamma (scale named ``gamma``)."""

    def __init__(self, dim: int):
        super().__init__()
        self.gamma = mx.ones((dim,))
        # F.normalize clamps the norm at 1e-12; as a mean-square floor that is 1e-24 / dim
        self.eps = 1e-24 / dim

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.rms_norm(x, self.gamma, self.eps)


class PerceiverAttention(nn.Module):
    """Latents as queries over ``[latents ‖ context]`` as keys and values; no biases."""

    def __init__(self, dim: int, heads: int = 8, dim_head: int = 64):
        super().__init__()
        inner = heads * dim_head
        self.heads, self.scale = heads, dim_head ** -0.5
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_kv = nn.Linear(dim, inner * 2, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)

    def __call__(self, x: mx.array, context: mx.array) -> mx.array:
        b, n, _ = x.shape
        h = self.heads

        def heads(y):
            return y.reshape(b, y.shape[1], h, -1).transpose(0, 2, 1, 3)

        k, v = mx.split(self.to_kv(mx.concatenate([x, context], axis=1)), 2, axis=-1)
        y = attention(heads(self.to_q(x)), heads(k), heads(v), self.scale)
        return self.to_out(y.transpose(0, 2, 1, 3).reshape(b, n, -1))


class PerceiverResampler(nn.Module):
    """``context [B, T, dim_context]`` -> ``[B, num_latents, dim]``: the context projected to
    ``dim`` (``proj_context``, absent when the widths match), then ``depth`` rounds of
    attention + GEGLU feed-forward on the latents (both residual), then RMSNorm."""

    def __init__(self, dim: int, depth: int = 2, dim_context: int | None = None, num_latents: int = 32,
                 dim_head: int = 64, heads: int = 8, ff_mult: float = 4):
        super().__init__()
        dim_context = dim if dim_context is None else dim_context
        if dim_context != dim:
            self.proj_context = nn.Linear(dim_context, dim)
        self.latents = mx.zeros((num_latents, dim))
        self.layers = [[PerceiverAttention(dim, heads, dim_head), feed_forward(dim, ff_mult)] for _ in range(depth)]
        self.norm = RMSNorm(dim)

    def __call__(self, context: mx.array) -> mx.array:
        if "proj_context" in self:
            context = self.proj_context(context)
        x = mx.broadcast_to(self.latents, (context.shape[0], *self.latents.shape))
        for attn, ff in self.layers:
            x = attn(x, context) + x
            y = x
            for m in ff:
                y = m(y)
            x = y + x
        return self.norm(x)

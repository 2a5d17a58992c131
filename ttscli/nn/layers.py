"""Shared MLX layers: RMSNorm, RoPE, attention (GQA, optional q/k-norm), the SwiGLU MLP.

Used by the decoder-only LMs (:mod:`ttscli.lm`, which builds its blocks from these) and by
codec transformers.  Module and parameter names follow the Hugging Face checkpoints
(``q_proj``, ``q_norm``, ``gate_proj`` ...) so weights load without renaming.

Attention reads and writes an explicit cache object (see :mod:`ttscli.lm.cache`) passed by
the caller: state belongs to one request, never to the module.
"""
from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from .fastmath import on_cpu, softmax, swiglu


class RMSNorm(nn.Module):
    """y = weight * x / sqrt(mean(x^2) + eps), accumulated in float32 by the fused kernel."""

    def __init__(self, dims: int, eps: float = 1e-6):
        super().__init__()
        self.weight = mx.ones((dims,))
        self.eps = eps

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.rms_norm(x, self.weight, self.eps)


class RoPE(nn.Module):
    """Rotary embedding on ``x [B, heads, L, head_dim]`` at positions ``offset .. offset+L-1``:
    rotate-half pairs (i, i + d/2) (GPT-NeoX layout, as Qwen/Llama checkpoints use), or with
    ``traditional`` adjacent pairs (2i, 2i+1) (Kyutai's layout), so such checkpoints' q/k
    projections load unpermuted.

    ``base``: default frequencies base^(-2i/d), derived by MLX's fused kernel.  ``inv_freq``:
    any other inverse frequencies (``ttscli.lm.rope`` computes the variants).
    """

    def __init__(self, dims: int, base: float | None = 10000.0, inv_freq: np.ndarray | None = None,
                 traditional: bool = False):
        super().__init__()
        self.dims = dims
        self.traditional = traditional
        self.base = None if inv_freq is not None else base
        # mx.fast.rope's ``freqs`` are periods (1 / inverse frequency). The leading underscore
        # keeps the table out of the parameter tree (it is not a checkpoint tensor).
        self._freqs = None if inv_freq is None else mx.array(1.0 / np.asarray(inv_freq, np.float64), mx.float32)

    def __call__(self, x: mx.array, offset: int | mx.array = 0) -> mx.array:
        return mx.fast.rope(x, self.dims, traditional=self.traditional, base=self.base, scale=1.0, offset=offset,
                            freqs=self._freqs)


class NoRoPE(nn.Module):
    """No rotation (a NoPE stack): positions reach it only through the causal mask."""

    dims = None

    def __call__(self, x: mx.array, offset: int | mx.array = 0) -> mx.array:
        return x


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: Any = None) -> mx.array:
    """Scaled dot-product attention, ``q [B, H, L, D]``, ``k``/``v [B, Hk, S, D]`` (H a multiple of Hk).

    ``mask``: None, ``"causal"`` (aligned to the end of the keys), a boolean array (True =
    visible) or an additive one. One query, or a GPU: MLX's fused kernel. Several queries on
    the CPU: two GEMMs around our softmax, because MLX's CPU kernel spends most of its time in
    a scalar exp, which our softmax replaces with vectorised multiply-adds (docs/benchmarks.md#code-comment-figures).
    """
    L = q.shape[2]
    if L == 1 or not on_cpu():
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    B, H, _, D = q.shape
    Hk, S = k.shape[1], k.shape[2]
    rep = H // Hk
    # GQA without repeating k/v: the rep query heads of one kv head form one [rep*L, D] block.
    w = (q * scale).reshape(B, Hk, rep * L, D) @ k.swapaxes(-1, -2)
    w = w.reshape(B, Hk, rep, L, S)
    if isinstance(mask, str):
        visible = mx.arange(S)[None, :] <= mx.arange(S - L, S)[:, None]
        w = mx.where(visible, w, -mx.inf)
    elif mask is not None:
        w = mx.where(mask, w, -mx.inf) if mask.dtype == mx.bool_ else w + mask
    p = softmax(w).reshape(B, Hk, rep * L, S)
    return (p @ v).reshape(B, H, L, D)


class Attention(nn.Module):
    """Multi-head attention with grouped KV heads, optional per-head q/k RMSNorm and RoPE."""

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 rope_theta: float = 10000.0, eps: float = 1e-6, bias: bool = False,
                 qk_norm: bool = True, rope: RoPE | None = None, o_bias: bool | None = None):
        """``rope``: the rotation to use (a RoPE variant); default plain RoPE at ``rope_theta``.
        ``o_bias``: whether the output projection has a bias (default: as ``bias``; Qwen2 biases
        only q, k and v)."""
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.rope = rope if rope is not None else RoPE(head_dim, base=rope_theta)
        self.scale = head_dim ** -0.5
        self.q_proj = nn.Linear(hidden_size, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=bias if o_bias is None else o_bias)
        self.qk_norm = qk_norm
        if qk_norm:
            self.q_norm = RMSNorm(head_dim, eps)
            self.k_norm = RMSNorm(head_dim, eps)

    def __call__(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
        B, L, _ = x.shape
        q = self.q_proj(x).reshape(B, L, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(B, L, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(B, L, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q = self.q_norm(q)
            k = self.k_norm(k)
        q = q.transpose(0, 2, 1, 3)
        k = k.transpose(0, 2, 1, 3)
        v = v.transpose(0, 2, 1, 3)
        offset = cache.offset if cache is not None else 0
        q = self.rope(q, offset)
        k = self.rope(k, offset)
        if cache is not None:
            k, v = cache.update_and_fetch(k, v)
        out = attention(q, k, v, self.scale, mask)
        out = out.transpose(0, 2, 1, 3).reshape(B, L, -1)
        return self.o_proj(out)


class MLP(nn.Module):
    """SwiGLU feed-forward: down(act(gate(x)) * up(x))."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def __call__(self, x: mx.array) -> mx.array:
        g, u = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(swiglu(g, u) if on_cpu() else nn.silu(g) * u)

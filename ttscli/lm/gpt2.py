"""The GPT-2 stack in MLX: pre-LN blocks with biases, learned positions, no RoPE.

Names are those of a Hugging Face ``GPT2Model`` subtree (``h.N.ln_1``, ``h.N.attn.c_attn``,
``h.N.attn.c_proj``, ``h.N.ln_2``, ``h.N.mlp.c_fc``, ``h.N.mlp.c_proj``, ``ln_f``, optionally
``wte`` / ``wpe``), so a family puts :class:`GPT2Model` at the path its checkpoint uses and loads
weights without renaming. The projections keep HF's ``Conv1D`` layout, ``weight [in, out]``:
``x @ W`` reads the stored matrix as it is, and ``c_attn`` is already q, k and v fused into one
matrix, so a decode step makes one product per projection without transposing or concatenating
anything at load.

Codec LMs that feed their own embeddings and position tables (IndexTTS2's ``UnifiedVoice``, which
deletes GPT-2's ``wte`` and ``wpe``) build it without either: the stack then adds no positions.
Caches are passed in per call, one :class:`ttscli.lm.cache.KVCache` per layer, as
:mod:`ttscli.lm.model` does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn

from ttscli.config import BaseArgs
from ttscli.lm.cache import KVCache, make_cache
from ttscli.nn.fastmath import gelu_tanh
from ttscli.nn.layers import attention


@dataclass
class GPT2Args(BaseArgs):
    """HF ``GPT2Config``'s fields that shape the stack (same names)."""

    n_embd: int
    n_layer: int
    n_head: int
    n_inner: int | None = None              # None: 4 x n_embd
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"
    vocab_size: int | None = None           # with a ``wte`` table only
    n_positions: int | None = None          # with a ``wpe`` table only

    @property
    def inner(self) -> int:
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd


class Conv1D(nn.Module):
    """HF's ``Conv1D`` (a linear layer despite its name), ``weight [in, out]``: ``x @ W + b``."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = mx.zeros((n_in, n_out))
        self.bias = mx.zeros((n_out,))

    def __call__(self, x: mx.array) -> mx.array:
        return mx.addmm(self.bias, x, self.weight)


def _activation(name: str):
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return gelu_tanh
    if name == "gelu":
        return nn.gelu
    if name == "relu":
        return nn.relu
    raise ValueError(f"GPT-2 activation {name!r} is not supported")


class GPT2Attention(nn.Module):
    """Causal self-attention with one fused q/k/v projection (``c_attn``) and ``c_proj``."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"width {dim} is not a multiple of {heads} heads")
        self.num_heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.c_attn = Conv1D(dim, 3 * dim)
        self.c_proj = Conv1D(dim, dim)

    def __call__(self, x: mx.array, mask: Any = None, cache: KVCache | None = None) -> mx.array:
        B, L, D = x.shape
        qkv = self.c_attn(x).reshape(B, L, 3, self.num_heads, self.head_dim)
        # one transpose for all three: [3, B, heads, L, head_dim]
        q, k, v = qkv.transpose(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.update_and_fetch(k, v)
        out = attention(q, k, v, self.scale, mask)
        return self.c_proj(out.transpose(0, 2, 1, 3).reshape(B, L, D))


class GPT2MLP(nn.Module):
    def __init__(self, dim: int, inner: int, activation: str = "gelu_new"):
        super().__init__()
        self.c_fc = Conv1D(dim, inner)
        self.c_proj = Conv1D(inner, dim)
        self.act = _activation(activation)

    def __call__(self, x: mx.array) -> mx.array:
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(nn.Module):
    """Pre-LN: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, a: GPT2Args):
        super().__init__()
        self.ln_1 = nn.LayerNorm(a.n_embd, eps=a.layer_norm_epsilon)
        self.attn = GPT2Attention(a.n_embd, a.n_head)
        self.ln_2 = nn.LayerNorm(a.n_embd, eps=a.layer_norm_epsilon)
        self.mlp = GPT2MLP(a.n_embd, a.inner, a.activation_function)

    def __call__(self, x: mx.array, mask: Any = None, cache: KVCache | None = None) -> mx.array:
        h = x + self.attn(self.ln_1(x), mask, cache)
        return h + self.mlp(self.ln_2(h))


class GPT2Model(nn.Module):
    """Blocks ``h`` and the final ``ln_f``; ``wte`` / ``wpe`` only when asked for.

    ``__call__`` returns the hidden states after ``ln_f``. Without ``wpe`` the caller's embeddings
    carry whatever positions the model uses (GPT-2 then sees positions only through the causal
    mask, as an HF ``GPT2Model`` whose ``wpe`` returns zeros does).
    """

    def __init__(self, a: GPT2Args, embed_tokens: bool = False, positions: bool = False):
        super().__init__()
        self.args = a
        if embed_tokens:
            if a.vocab_size is None:
                raise ValueError("wte needs vocab_size")
            self.wte = nn.Embedding(a.vocab_size, a.n_embd)
        if positions:
            if a.n_positions is None:
                raise ValueError("wpe needs n_positions")
            self.wpe = nn.Embedding(a.n_positions, a.n_embd)
        self.h = [GPT2Block(a) for _ in range(a.n_layer)]
        self.ln_f = nn.LayerNorm(a.n_embd, eps=a.layer_norm_epsilon)

    def __call__(self, inputs: mx.array | None = None, cache: Sequence[KVCache] | None = None,
                 input_embeddings: mx.array | None = None) -> mx.array:
        """``[B, L, n_embd]`` of ids ``inputs [B, L]`` (through ``wte``) or of ``input_embeddings``;
        each cache grows by L. Causal over the cache's history and the new positions."""
        h = input_embeddings if input_embeddings is not None else self.wte(inputs)
        L = h.shape[1]
        offset = cache[0].offset if cache else 0
        if "wpe" in self:
            if offset + L > self.wpe.weight.shape[0]:
                raise ValueError(f"position {offset + L - 1} is past the table of {self.wpe.weight.shape[0]}")
            h = h + self.wpe.weight[offset:offset + L]
        if cache and hasattr(cache[0], "make_mask"):
            mask = cache[0].make_mask(L)    # fixed-capacity caches mask their unwritten slots
        else:
            mask = None if L == 1 else "causal"
        for i, block in enumerate(self.h):
            h = block(h, mask, cache[i] if cache else None)
        return self.ln_f(h)

    def make_cache(self) -> list[KVCache]:
        return make_cache(len(self.h))


def select_rows(cache: Sequence[KVCache], rows: mx.array | Sequence[int]) -> None:
    """Reorder (or repeat) the batch rows of every layer's cache in place: row ``i`` becomes the
    old row ``rows[i]``. What beam search does after each step (the surviving beams' histories),
    and what turns a one-row prefill into ``len(rows)`` identical beams."""
    idx = rows if isinstance(rows, mx.array) else mx.array(list(rows), mx.int32)
    for c in cache:
        if c.keys is not None:
            c.keys = mx.take(c.keys, idx, axis=0)
            c.values = mx.take(c.values, idx, axis=0)

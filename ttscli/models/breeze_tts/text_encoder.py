"""The T5Gemma2 text encoder (``text_encoder.*``): bidirectional, one text segment at a time.

Gemma conventions: embeddings scaled by sqrt(width) (rounded to the weight dtype) with the
``eoi`` id replaced by its own vector, RMSNorm as ``x / rms(x) * (1 + w)`` in float32, per-head
q/k norm, a norm before and after both the attention and the MLP (gelu-tanh gated), attention
scaled by ``query_pre_attn_scalar``. Layers are ``sliding_attention`` (query i sees keys
i-(w+1)//2+1 .. i+w//2, both directions) or ``full_attention``, each kind with its own RoPE.
"""
from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ttscli.models.breeze_tts.config import TextEncoderArgs
from ttscli.nn.layers import RoPE, attention


class GemmaRMSNorm(nn.Module):
    def __init__(self, dims: int, eps: float):
        super().__init__()
        self.weight = mx.zeros((dims,))
        self.eps = eps

    def __call__(self, x: mx.array) -> mx.array:
        y = mx.fast.rms_norm(x.astype(mx.float32), 1.0 + self.weight.astype(mx.float32), self.eps)
        return y.astype(x.dtype)


class ScaledEmbedding(nn.Module):
    def __init__(self, vocab: int, dims: int, eoi: int):
        super().__init__()
        self.weight = mx.zeros((vocab, dims))
        self.eoi_embedding = mx.zeros((dims,))
        self.eoi = eoi

    def __call__(self, ids: mx.array) -> mx.array:
        w = self.weight
        x = w[ids] * mx.array(math.sqrt(w.shape[1]), dtype=w.dtype)
        return mx.where((ids == self.eoi)[..., None], self.eoi_embedding.astype(x.dtype), x)


class EncoderAttention(nn.Module):
    def __init__(self, a: TextEncoderArgs, layer_type: str):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = a.num_attention_heads, a.num_key_value_heads, a.head_dim
        self.scale = a.query_pre_attn_scalar ** -0.5
        self.q_proj = nn.Linear(a.hidden_size, self.heads * a.head_dim, bias=False)
        self.k_proj = nn.Linear(a.hidden_size, self.kv_heads * a.head_dim, bias=False)
        self.v_proj = nn.Linear(a.hidden_size, self.kv_heads * a.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * a.head_dim, a.hidden_size, bias=False)
        self.q_norm = GemmaRMSNorm(a.head_dim, a.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(a.head_dim, a.rms_norm_eps)
        self.rope = RoPE(a.head_dim, inv_freq=a.rope(layer_type))

    def __call__(self, x: mx.array, mask) -> mx.array:
        B, L, _ = x.shape
        q = self.q_norm(self.q_proj(x).reshape(B, L, self.heads, self.head_dim)).transpose(0, 2, 1, 3)
        k = self.k_norm(self.k_proj(x).reshape(B, L, self.kv_heads, self.head_dim)).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(B, L, self.kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        out = attention(self.rope(q), self.rope(k), v, self.scale, mask)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))


class EncoderMLP(nn.Module):
    def __init__(self, dims: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dims, hidden, bias=False)
        self.up_proj = nn.Linear(dims, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dims, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(nn.gelu_approx(self.gate_proj(x)) * self.up_proj(x))


class EncoderLayer(nn.Module):
    def __init__(self, a: TextEncoderArgs, layer_type: str):
        super().__init__()
        self.layer_type = layer_type
        self.self_attn = EncoderAttention(a, layer_type)
        self.mlp = EncoderMLP(a.hidden_size, a.intermediate_size)
        for n in ("pre_self_attn_layernorm", "post_self_attn_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            setattr(self, n, GemmaRMSNorm(a.hidden_size, a.rms_norm_eps))

    def __call__(self, x: mx.array, mask) -> mx.array:
        h = x + self.post_self_attn_layernorm(self.self_attn(self.pre_self_attn_layernorm(x), mask))
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))


def sliding_mask(length: int, window: int) -> mx.array | None:
    """Boolean ``[L, L]`` (True = visible): keys at distance 0..(w+1)//2-1 behind and 1..w//2 ahead."""
    left, right = (window + 1) // 2, window // 2 + 1
    d = np.arange(length)[:, None] - np.arange(length)[None, :]
    ok = ((d >= 0) & (d < left)) | ((d < 0) & (-d < right))
    return None if ok.all() else mx.array(ok)


class TextEncoder(nn.Module):
    def __init__(self, a: TextEncoderArgs):
        super().__init__()
        self.args = a
        self.embed_tokens = ScaledEmbedding(a.vocab_size, a.hidden_size, a.eoi_token_index)
        self.layers = [EncoderLayer(a, t) for t in a.layer_types]
        self.norm = GemmaRMSNorm(a.hidden_size, a.rms_norm_eps)

    def __call__(self, ids: mx.array) -> mx.array:
        """Last hidden state ``[B, L, hidden]`` of ``ids [B, L]`` (one unpadded segment per row)."""
        x = self.embed_tokens(ids)
        sliding = sliding_mask(ids.shape[1], self.args.sliding_window)
        for layer in self.layers:
            x = layer(x, sliding if layer.layer_type == "sliding_attention" else None)
        return self.norm(x)

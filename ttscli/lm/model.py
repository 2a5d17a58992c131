"""The MLX decoder-only LM: Qwen3 blocks (q/k RMSNorm) and Llama blocks (none), pre-norm.

Names are those of a Hugging Face ``model.`` subtree (``embed_tokens``, ``layers.N.self_attn.
q_proj``, ``layers.N.input_layernorm``, ``layers.N.mlp.gate_proj``, ``norm``), so a family
subclasses :class:`DecoderLM` at the path its checkpoint uses and loads weights without
renaming.  Caches are passed in per call (one list per request; a batch shares positions).
"""
from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ttscli.lm.cache import KVCache, make_cache
from ttscli.lm.config import LMArgs
from ttscli.lm.rope import make_rope
from ttscli.nn.layers import MLP, Attention, RMSNorm


def create_causal_mask(length: int, offset: int = 0) -> Any:
    """Mask argument for the attention: None for one query, else causal.

    MLX aligns the string mask ``"causal"`` to the end of the keys, which is what a prefill on
    top of an existing cache needs.
    """
    return None if length == 1 else "causal"


class DecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, a: LMArgs):
        super().__init__()
        self.self_attn = Attention(a.hidden_size, a.num_attention_heads, a.num_key_value_heads, a.head_dim,
                                   eps=a.rms_norm_eps, bias=a.attention_bias, qk_norm=a.qk_norm,
                                   rope=make_rope(a.rope, a.head_dim))
        self.mlp = MLP(a.hidden_size, a.intermediate_size, bias=a.mlp_bias)
        self.input_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(a.hidden_size, a.rms_norm_eps)

    def __call__(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
        h = x + self.self_attn(self.input_layernorm(x), mask, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderLM(nn.Module):
    """Embedding (optional: codec LMs feed their own embeddings), decoder layers, final norm."""

    def __init__(self, a: LMArgs, embed_tokens: bool = True):
        super().__init__()
        self.args = a
        if embed_tokens:
            if a.vocab_size is None:
                raise ValueError("embed_tokens needs vocab_size")
            self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = [DecoderLayer(a) for _ in range(a.num_hidden_layers)]
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps)

    def __call__(self, inputs: mx.array | None = None, cache: list[Any] | None = None,
                 input_embeddings: mx.array | None = None) -> mx.array:
        """Post-norm hidden states ``[B, L, H]`` of token ids ``inputs [B, L]`` or of
        ``input_embeddings [B, L, H]``; each cache in ``cache`` (one per layer) grows by L."""
        h = input_embeddings if input_embeddings is not None else self.embed_tokens(inputs)
        offset = cache[0].offset if cache else 0
        mask = create_causal_mask(h.shape[1], offset)
        for i, layer in enumerate(self.layers):
            h = layer(h, mask, cache[i] if cache else None)
        return self.norm(h)

    def make_cache(self) -> list[KVCache]:
        return make_cache(len(self.layers))

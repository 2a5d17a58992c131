"""T3's conditioning: speaker projection, a Perceiver over the prompt speech, exaggeration.

Output per voice: ``[1 speaker | 32 perceiver | 1 emotion]`` positions (34 when the prompt
tokens are given), in the order the reference concatenates them.  Names follow ``cond_enc.*``.
"""
from __future__ import annotations

import mlx.core as mx
from mlx import nn


class AttentionBlock2(nn.Module):
    """x1 + proj_out(attention(q from norm(x1), k/v from norm(x2))); one LayerNorm for both."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.proj_out = nn.Linear(dim, dim)

    def __call__(self, x1: mx.array, x2: mx.array) -> mx.array:
        B, L1, D = x1.shape
        L2 = x2.shape[1]
        n1, n2 = self.norm(x1), self.norm(x2)
        hd = D // self.heads
        q = self.to_q(n1).reshape(B, L1, self.heads, hd).transpose(0, 2, 1, 3)
        k = self.to_k(n2).reshape(B, L2, self.heads, hd).transpose(0, 2, 1, 3)
        v = self.to_v(n2).reshape(B, L2, self.heads, hd).transpose(0, 2, 1, 3)
        h = mx.fast.scaled_dot_product_attention(q, k, v, scale=hd ** -0.5)
        return x1 + self.proj_out(h.transpose(0, 2, 1, 3).reshape(B, L1, D))


class Perceiver(nn.Module):
    """Learned queries read the prompt (cross-attention), then attend to themselves with the
    same block: the reference applies its single attention block twice."""

    def __init__(self, queries: int, dim: int, heads: int):
        super().__init__()
        self.pre_attention_query = mx.zeros((1, queries, dim))
        self.attn = AttentionBlock2(dim, heads)

    def __call__(self, h: mx.array) -> mx.array:
        q = mx.broadcast_to(self.pre_attention_query, (h.shape[0], *self.pre_attention_query.shape[1:]))
        pre = self.attn(q, h)
        return self.attn(pre, pre)


class T3CondEnc(nn.Module):
    def __init__(self, dim: int, speaker_embed_size: int, queries: int, heads: int):
        super().__init__()
        self.speaker_embed_size = speaker_embed_size
        self.spkr_enc = nn.Linear(speaker_embed_size, dim)
        self.emotion_adv_fc = nn.Linear(1, dim, bias=False)
        self.perceiver = Perceiver(queries, dim, heads)

    def __call__(self, speaker_emb: mx.array, prompt_emb: mx.array | None, exaggeration: mx.array) -> mx.array:
        """``speaker_emb [B, 256]``, ``prompt_emb [B, P, D]`` (speech embeddings + positions) or
        None, ``exaggeration [B]`` -> ``[B, 1 + 32 + 1, D]`` (``[B, 2, D]`` without a prompt)."""
        spk = self.spkr_enc(speaker_emb.reshape(-1, self.speaker_embed_size))[:, None]
        parts = [spk]
        if prompt_emb is not None:
            parts.append(self.perceiver(prompt_emb))
        parts.append(self.emotion_adv_fc(exaggeration.reshape(-1, 1, 1)))
        return mx.concatenate(parts, axis=1)

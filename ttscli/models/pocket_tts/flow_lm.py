"""Pocket TTS's flow LM (``flow_lm.*``; upstream pocket_tts/models/flow_lm.py): a causal
transformer over [voice conditioning, text embeddings, latent frames] whose last output
conditions a small flow head (``flow_net``, pocket_tts/modules/mlp.py) that turns Gaussian noise
into the next continuous Mimi latent, and an EOS head.

Attributes are named as the published tensors (``transformer.layers.N.self_attn.in_proj``,
``norm1`` ...). The transformer layer is Kyutai's (pocket_tts/modules/transformer.py): LayerNorm,
one q/k/v projection, RoPE on adjacent pairs, a tanh-GELU MLP, no biases; attention and the KV
cache are the shared ones (ttscli.nn.layers, ttscli.lm.cache).
"""
from __future__ import annotations

import math
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ttscli.lm.cache import KVCache, make_cache
from ttscli.lm.model import create_causal_mask
from ttscli.nn.fastmath import gelu_tanh
from ttscli.nn.layers import RoPE, attention

from .config import FlowLMArgs


class SelfAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, max_period: float):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.in_proj = nn.Linear(dim, 3 * dim, bias=False)
        self.out_proj = nn.Linear(dim, dim, bias=False)
        self.rope = RoPE(self.head_dim, base=max_period, traditional=True)

    def __call__(self, x: mx.array, mask: Any, cache: KVCache | None) -> mx.array:
        B, L, _ = x.shape
        qkv = self.in_proj(x).reshape(B, L, 3, self.num_heads, self.head_dim).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        offset = cache.offset if cache is not None else 0
        q, k = self.rope(q, offset), self.rope(k, offset)
        if cache is not None:
            k, v = cache.update_and_fetch(k, v)
        out = attention(q, k, v, self.head_dim ** -0.5, mask)
        return self.out_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))


class TransformerLayer(nn.Module):
    def __init__(self, a: FlowLMArgs):
        super().__init__()
        self.self_attn = SelfAttention(a.d_model, a.num_heads, a.max_period)
        self.norm1 = nn.LayerNorm(a.d_model, eps=1e-5)
        self.norm2 = nn.LayerNorm(a.d_model, eps=1e-5)
        self.linear1 = nn.Linear(a.d_model, a.feedforward, bias=False)
        self.linear2 = nn.Linear(a.feedforward, a.d_model, bias=False)

    def __call__(self, x: mx.array, mask: Any, cache: KVCache | None) -> mx.array:
        x = x + self.self_attn(self.norm1(x), mask, cache)
        return x + self.linear2(gelu_tanh(self.linear1(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, a: FlowLMArgs):
        super().__init__()
        self.layers = [TransformerLayer(a) for _ in range(a.num_layers)]

    def __call__(self, x: mx.array, cache: list[KVCache]) -> mx.array:
        mask = create_causal_mask(x.shape[1])
        for layer, c in zip(self.layers, cache):
            x = layer(x, mask, c)
        return x


class Embedding(nn.Module):
    """``conditioner``: the text lookup table (``embed``: n_bins + 1 rows, the last for padding)."""

    def __init__(self, n_bins: int, dim: int):
        super().__init__()
        self.embed = nn.Embedding(n_bins + 1, dim)


def variance_norm(x: mx.array, alpha: mx.array, eps: float = 1e-5) -> mx.array:
    """Upstream's ``RMSNorm`` of the flow head: x * alpha / sqrt(var(x) + eps) with the unbiased
    variance (torch's ``var`` default), x itself not centred."""
    n = x.shape[-1]
    var = mx.var(x, axis=-1, keepdims=True) * (n / (n - 1))
    return x * (alpha * mx.rsqrt(var + eps))


class VarianceNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.alpha = mx.ones((dim,))

    def __call__(self, x: mx.array) -> mx.array:
        return variance_norm(x, self.alpha)


class TimestepEmbedder(nn.Module):
    """A scalar time -> ``[cos(t f), sin(t f)]`` (``freqs``, a checkpoint buffer) -> MLP -> norm."""

    def __init__(self, dim: int, frequencies: int = 256):
        super().__init__()
        half = frequencies // 2
        self.freqs = mx.exp(-math.log(10000.0) * mx.arange(half) / half)
        self.mlp = [nn.Linear(frequencies, dim), nn.SiLU(), nn.Linear(dim, dim), VarianceNorm(dim)]

    def __call__(self, t: mx.array) -> mx.array:
        args = t * self.freqs
        x = mx.concatenate([mx.cos(args), mx.sin(args)], axis=-1)
        for layer in self.mlp:
            x = layer(x)
        return x


def modulate(x: mx.array, shift: mx.array, scale: mx.array) -> mx.array:
    return x * (1 + scale) + shift


class ResBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.in_ln = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = [nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim)]
        self.adaLN_modulation = [nn.SiLU(), nn.Linear(dim, 3 * dim)]

    def __call__(self, x: mx.array, y: mx.array) -> mx.array:
        shift, scale, gate = mx.split(self.adaLN_modulation[1](nn.silu(y)), 3, axis=-1)
        h = modulate(self.in_ln(x), shift, scale)
        h = self.mlp[2](nn.silu(self.mlp[0](h)))
        return x + gate * h


class FinalLayer(nn.Module):
    def __init__(self, dim: int, out: int):
        super().__init__()
        self.norm_final = nn.LayerNorm(dim, eps=1e-6, affine=False)
        self.linear = nn.Linear(dim, out)
        self.adaLN_modulation = [nn.SiLU(), nn.Linear(dim, 2 * dim)]

    def __call__(self, x: mx.array, c: mx.array) -> mx.array:
        shift, scale = mx.split(self.adaLN_modulation[1](nn.silu(c)), 2, axis=-1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class FlowNet(nn.Module):
    """``flow_net`` (upstream's SimpleMLPAdaLN with two time conditions, the LSD head):
    (condition, s, t, x) -> the flow from x at time s towards time t."""

    def __init__(self, a: FlowLMArgs, latent_dim: int):
        super().__init__()
        self.time_embed = [TimestepEmbedder(a.flow_dim) for _ in range(2)]
        self.cond_embed = nn.Linear(a.d_model, a.flow_dim)
        self.input_proj = nn.Linear(latent_dim, a.flow_dim)
        self.res_blocks = [ResBlock(a.flow_dim) for _ in range(a.flow_depth)]
        self.final_layer = FinalLayer(a.flow_dim, latent_dim)

    def __call__(self, c: mx.array, s: mx.array, t: mx.array, x: mx.array) -> mx.array:
        x = self.input_proj(x)
        y = self.cond_embed(c) + (self.time_embed[0](s) + self.time_embed[1](t)) / 2
        for block in self.res_blocks:
            x = block(x, y)
        return self.final_layer(x, y)

    def compiled(self, c: mx.array, s: mx.array, t: mx.array, x: mx.array) -> mx.array:
        """``__call__`` as one :func:`mx.compile` trace per batch size (the weights its inputs,
        so a later load is seen): the head is ~60 small ops on one row, and one trace cuts its
        per-op overhead by about a third on a CPU."""
        f = self.__dict__.get("_compiled")
        if f is None:
            f = mx.compile(self.__call__, inputs=self.state)
            object.__setattr__(self, "_compiled", f)
        return f(c, s, t, x)


def lsd_decode(flow: FlowNet, c: mx.array, noise: mx.array, steps: int) -> mx.array:
    """Lagrangian self-distillation sampling (upstream's ``lsd_decode``): ``steps`` Euler moves
    from the noise at s = i/steps to t = (i+1)/steps."""
    x = noise
    ones = mx.ones((*noise.shape[:-1], 1), noise.dtype)
    for i in range(steps):
        x = x + flow.compiled(c, ones * (i / steps), ones * ((i + 1) / steps), x) / steps
    return x


class FlowLM(nn.Module):
    """The LM a code decoder wraps (ttscli.lm.decoder, a continuous-latent LM):
    ``__call__(embeds, cache)`` -> (EOS logit ``[B, LATENT_HEAD]``, the normed hidden
    ``[B, d_model]`` the flow head is conditioned on)."""

    def __init__(self, a: FlowLMArgs, latent_dim: int):
        super().__init__()
        self.args = a
        self.conditioner = Embedding(a.n_bins, a.d_model)
        self.flow_net = FlowNet(a, latent_dim)
        self.emb_std = mx.ones((latent_dim,))
        self.emb_mean = mx.zeros((latent_dim,))
        self.bos_emb = mx.zeros((latent_dim,))
        if a.insert_bos_before_voice:
            self.bos_before_voice = mx.zeros((1, 1, a.d_model))
        self.speaker_proj_weight = mx.zeros((a.d_model, latent_dim))
        self.input_linear = nn.Linear(latent_dim, a.d_model, bias=False)
        self.transformer = Transformer(a)
        self.out_norm = nn.LayerNorm(a.d_model, eps=1e-5)
        self.out_eos = nn.Linear(a.d_model, 1)

    def new_cache(self) -> list[KVCache]:
        return make_cache(len(self.transformer.layers))

    def __call__(self, embeds: mx.array, cache: list[KVCache]) -> tuple[mx.array, mx.array]:
        h = self.out_norm(self.transformer(embeds, cache)[:, -1])
        return self.out_eos(h), h

    def text_embeddings(self, tokens: mx.array) -> mx.array:
        return self.conditioner.embed(tokens)

    def latent_embeddings(self, latents: mx.array | None, batch: int = 1) -> mx.array:
        """The LM input of latent frames ``[B, T, latent]``; None: the begin-of-audio frame."""
        if latents is None:
            latents = mx.broadcast_to(self.bos_emb, (batch, 1, self.bos_emb.shape[0]))
        return self.input_linear(latents)

    def voice_embeddings(self, latents: mx.array) -> mx.array:
        """The voice prompt of Mimi encoder latents ``[B, T, latent]``: the speaker projection,
        after the begin-of-voice vector where the model has one."""
        cond = latents @ self.speaker_proj_weight.T
        if "bos_before_voice" in self:
            cond = mx.concatenate([mx.broadcast_to(self.bos_before_voice, (cond.shape[0], 1, cond.shape[2])), cond],
                                  axis=1)
        return cond

"""CosyVoice3's flow (``flow.*`` of ``flow.pt``): speech tokens -> 80-mel at 50 Hz through a DiT.

``CausalMaskedDiffWithDiT``: token embedding (80 wide) -> a lookahead conv pair -> each token
repeated ``token_mel_ratio`` times = mu (no conformer encoder, unlike CosyVoice2 / Chatterbox);
then the same conditional flow matching as :mod:`flow` (cosine-scheduled Euler steps, CFG as a
batch of two) with a DiT estimator (``decoder.estimator``): adaptive-LayerNorm-zero blocks
conditioned on the flow time, a causal grouped-conv position embedding, rotary attention.

Two upstream details are kept exactly because the weights were trained with them:
the rotary embedding (x-transformers, interleaved pairs) rotates only the first ``dim_head``
channels of the full ``heads * dim_head`` projection, i.e. only head 0; and with ``streaming``
the attention is chunk-causal (a frame sees its own ``static_chunk_size``-frame chunk and every
earlier one), which is what makes upstream's streamed mel equal to its one-shot streaming mel.

Channels-last ``[B, T, C]``; batch 1 in, the CFG pair inside.
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.codecs.s3gen.flow import CausalConditionalCFM, PreLookaheadLayer, mish, silu, timestep_features
from ttscli.nn.conv import pad_time
from ttscli.nn.layers import attention


@dataclass
class DiTFlowArgs:
    vocab_size: int = 6561
    input_size: int = 80             # token embedding width (= mel channels)
    output_size: int = 80
    spk_embed_dim: int = 192
    token_mel_ratio: int = 2
    pre_lookahead_len: int = 3
    pre_lookahead_channels: int = 1024
    dim: int = 1024
    depth: int = 22
    heads: int = 16
    dim_head: int = 64
    ff_mult: int = 2
    static_chunk_size: int = 50      # frames: 25 tokens x token_mel_ratio
    inference_cfg_rate: float = 0.7
    n_timesteps: int = 10


def layer_norm(x: mx.array) -> mx.array:
    """LayerNorm without affine parameters, eps 1e-6 (every DiT norm)."""
    return mx.fast.layer_norm(x, None, None, 1e-6)


def chunk_mask(t: int, chunk: int) -> mx.array:
    """``[t, t]`` bool: frame i sees frame j when j is in i's chunk or an earlier one."""
    i = np.arange(t)
    return mx.array(np.arange(t)[None, :] < ((i // chunk + 1) * chunk)[:, None])


class GroupedConv1d(nn.Module):
    """``nn.Conv1d(groups=g, padding=0)`` with a PyTorch ``[out, in / g, k]`` weight."""

    def __init__(self, channels: int, kernel_size: int, groups: int):
        super().__init__()
        self.weight = mx.zeros((channels, channels // groups, kernel_size))
        self.bias = mx.zeros((channels,))
        self.groups = groups

    def __call__(self, x: mx.array) -> mx.array:
        return mx.conv1d(x, self.weight.transpose(0, 2, 1), groups=self.groups) + self.bias


class CausalConvPositionEmbedding(nn.Module):
    """Two (left-padded grouped conv k31, Mish) layers."""

    def __init__(self, dim: int, kernel_size: int = 31, groups: int = 16):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv1 = [GroupedConv1d(dim, kernel_size, groups)]
        self.conv2 = [GroupedConv1d(dim, kernel_size, groups)]

    def __call__(self, x: mx.array) -> mx.array:
        k = self.kernel_size - 1
        x = mish(self.conv1[0](pad_time(x, k, 0)))
        return mish(self.conv2[0](pad_time(x, k, 0)))


class InputEmbedding(nn.Module):
    def __init__(self, a: DiTFlowArgs):
        super().__init__()
        self.proj = nn.Linear(a.output_size * 2 + a.input_size + a.output_size, a.dim)
        self.conv_pos_embed = CausalConvPositionEmbedding(a.dim)

    def __call__(self, x: mx.array, cond: mx.array, mu: mx.array, spks: mx.array) -> mx.array:
        spk = mx.broadcast_to(spks[:, None, :], (*x.shape[:2], spks.shape[-1]))
        x = self.proj(mx.concatenate([x, cond, mu, spk], axis=-1))
        return self.conv_pos_embed(x) + x


class TimestepEmbedding(nn.Module):
    """Sinusoidal features of the flow time (256, scale 1000) -> Linear, SiLU, Linear."""

    def __init__(self, dim: int, freq_dim: int = 256):
        super().__init__()
        self.freq_dim = freq_dim
        self.time_mlp = [nn.Linear(freq_dim, dim), nn.Identity(), nn.Linear(dim, dim)]

    def __call__(self, t: mx.array) -> mx.array:
        h = self.time_mlp[0](timestep_features(t, self.freq_dim))
        return self.time_mlp[2](silu(h))


class RotaryEmbedding(nn.Module):
    """x-transformers' rotary table; ``inv_freq`` is a checkpoint tensor (``dim_head / 2``)."""

    def __init__(self, dim_head: int):
        super().__init__()
        self.inv_freq = 1.0 / (10000 ** (mx.arange(0, dim_head, 2).astype(mx.float32) / dim_head))

    def tables(self, t: int) -> tuple[mx.array, mx.array]:
        """(cos, sin) ``[t, dim_head]``, each frequency twice in a row (interleaved pairs)."""
        ang = mx.arange(t).astype(mx.float32)[:, None] * self.inv_freq[None, :]
        ang = mx.repeat(ang, 2, axis=-1)
        return mx.cos(ang), mx.sin(ang)


def rotate_first(x: mx.array, cos: mx.array, sin: mx.array) -> mx.array:
    """Rotate the first ``cos.shape[-1]`` channels of ``x [B, T, C]`` (interleaved pairs); the
    rest pass through, as x-transformers' partial rotary does."""
    d = cos.shape[-1]
    head, rest = x[..., :d], x[..., d:]
    pairs = head.reshape(*head.shape[:-1], d // 2, 2)
    rotated = mx.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(head.shape)
    return mx.concatenate([head * cos + rotated * sin, rest], axis=-1)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int):
        super().__init__()
        inner = heads * dim_head
        self.heads, self.dim_head = heads, dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = [nn.Linear(inner, dim)]

    def __call__(self, x: mx.array, rope: tuple[mx.array, mx.array], mask: mx.array | None) -> mx.array:
        B, T, _ = x.shape
        q = rotate_first(self.to_q(x), *rope)
        k = rotate_first(self.to_k(x), *rope)
        v = self.to_v(x)

        def heads(y):
            return y.reshape(B, T, self.heads, self.dim_head).transpose(0, 2, 1, 3)

        o = attention(heads(q), heads(k), heads(v), self.dim_head ** -0.5, mask)
        return self.to_out[0](o.transpose(0, 2, 1, 3).reshape(B, T, -1))


class AdaLayerNormZero(nn.Module):
    """The block's modulation: ``chunks`` rows (shifts, scales, gates) from SiLU(t) by one linear."""

    def __init__(self, dim: int, chunks: int = 6):
        super().__init__()
        self.chunks = chunks
        self.linear = nn.Linear(dim, dim * chunks)

    def __call__(self, t: mx.array) -> list[mx.array]:
        """``t [B, dim]`` -> ``chunks`` arrays ``[B, 1, dim]``."""
        return mx.split(self.linear(silu(t))[:, None, :], self.chunks, axis=-1)


class FeedForward(nn.Module):
    """Linear, tanh-approximated GELU, Linear (``ff.ff.0.0`` and ``ff.ff.2``)."""

    def __init__(self, dim: int, mult: int):
        super().__init__()
        self.ff = [[nn.Linear(dim, dim * mult)], nn.Identity(), nn.Linear(dim * mult, dim)]

    def __call__(self, x: mx.array) -> mx.array:
        return self.ff[2](nn.gelu_approx(self.ff[0][0](x)))


class DiTBlock(nn.Module):
    def __init__(self, a: DiTFlowArgs):
        super().__init__()
        self.attn_norm = AdaLayerNormZero(a.dim)
        self.attn = Attention(a.dim, a.heads, a.dim_head)
        self.ff = FeedForward(a.dim, a.ff_mult)

    def __call__(self, x: mx.array, t: mx.array, rope, mask) -> mx.array:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.attn_norm(t)
        x = x + gate_msa * self.attn(layer_norm(x) * (1 + scale_msa) + shift_msa, rope, mask)
        return x + gate_mlp * self.ff(layer_norm(x) * (1 + scale_mlp) + shift_mlp)


class DiT(nn.Module):
    """The velocity estimator: ``(x, mu, t, spks, cond)`` -> velocity, as :class:`flow.ConditionalDecoder`."""

    def __init__(self, a: DiTFlowArgs):
        super().__init__()
        self.a = a
        self.time_embed = TimestepEmbedding(a.dim)
        self.input_embed = InputEmbedding(a)
        self.rotary_embed = RotaryEmbedding(a.dim_head)
        self.transformer_blocks = [DiTBlock(a) for _ in range(a.depth)]
        self.norm_out = AdaLayerNormZero(a.dim, chunks=2)
        self.proj_out = nn.Linear(a.dim, a.output_size)

    def __call__(self, x: mx.array, mu: mx.array, t: mx.array, spks: mx.array, cond: mx.array,
                 streaming: bool = False) -> mx.array:
        """All ``[B, T, 80]`` but ``t [B]`` and ``spks [B, 80]`` -> ``[B, T, 80]``."""
        temb = self.time_embed(t)
        h = self.input_embed(x, cond, mu, spks)
        rope = self.rotary_embed.tables(h.shape[1])
        mask = chunk_mask(h.shape[1], self.a.static_chunk_size) if streaming else None
        for block in self.transformer_blocks:
            h = block(h, temb, rope, mask)
        scale, shift = self.norm_out(temb)
        return self.proj_out(layer_norm(h) * (1 + scale) + shift)


class CausalMaskedDiffWithDiT(nn.Module):
    def __init__(self, a: DiTFlowArgs):
        super().__init__()
        self.a = a
        self.input_embedding = nn.Embedding(a.vocab_size, a.input_size)
        self.spk_embed_affine_layer = nn.Linear(a.spk_embed_dim, a.output_size)
        self.pre_lookahead_layer = PreLookaheadLayer(a.input_size, a.pre_lookahead_len, a.pre_lookahead_channels)
        self.decoder = CausalConditionalCFM(a, DiT(a))

    def mu(self, tokens: mx.array, finalize: bool = True) -> mx.array:
        """``[T_tok]`` ids -> mu ``[1, ratio * T_tok, 80]``; ``finalize=False`` drops the last
        ``pre_lookahead_len`` tokens, whose lookahead has not arrived."""
        h = self.pre_lookahead_layer(self.input_embedding(mx.maximum(tokens, 0))[None])
        if not finalize:
            h = h[:, : h.shape[1] - self.a.pre_lookahead_len]
        return mx.repeat(h, self.a.token_mel_ratio, axis=1)

    def __call__(self, tokens: mx.array, prompt_token: mx.array, prompt_feat: mx.array, embedding: mx.array,
                 noise: mx.array, *, streaming: bool = False, finalize: bool = True) -> mx.array:
        """Mel ``[T_mel, 80]`` of ``tokens`` after the prompt (``prompt_feat [ratio * T_prompt, 80]``).

        ``noise [>= T_total, 80]`` is the CFM's starting point by absolute frame (upstream reads
        a fixed draw the same way), prompt frames included.
        """
        e = embedding.reshape(1, -1)
        e = e / mx.maximum(mx.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
        spks = self.spk_embed_affine_layer(e)
        mu = self.mu(mx.concatenate([prompt_token.reshape(-1), tokens.reshape(-1)]), finalize)
        n_prompt = prompt_feat.shape[0]
        cond = pad_time(prompt_feat[None].astype(mu.dtype), 0, mu.shape[1] - n_prompt)
        x0 = noise[None, : mu.shape[1]].astype(mu.dtype)
        mel = self.decoder(mu, spks, cond, x0, self.a.n_timesteps, streaming=streaming)
        return mel[0, n_prompt:]


def fixed_noise(frames: int, channels: int = 80, seed: int = 0) -> np.ndarray:
    """The CFM's starting noise ``[frames, channels]``, one fixed standard-normal draw read by
    absolute frame, as upstream's ``rand_noise`` buffer is (its values are torch's seed-0 draw;
    these are NumPy's: same distribution, other numbers)."""
    return np.random.default_rng(seed).standard_normal((frames, channels), dtype=np.float32)


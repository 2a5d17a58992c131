"""Conformer encoder blocks in the WeNet / ESPnet layout, shared by the families that use them.

Parameter names are the WeNet checkpoints' (``embed.conv.0``, ``embed.out.0``, ``embed.pos_enc.pe``,
``encoders.N.self_attn.linear_{q,k,v,out,pos}``, ``pos_bias_{u,v}``, ``feed_forward.w_{1,2}``,
``conv_module.{pointwise_conv1,depthwise_conv,norm,pointwise_conv2}``, ``norm_{mha,conv,ff,final}``,
``after_norm``), so weights load without renaming. Channels-last ``[B, T, C]``; every row is
taken at its full length (no padding mask).

Two users, two variants of the relative-position attention:

- CosyVoice's encoder (``ttscli.codecs.s3gen.flow``) is ESPnet's: a table of relative positions
  ``t-1 .. -(t-1)`` (:func:`rel_pos_emb`) and the relative shift, so query i reads key j's
  relative position j - i.
- IndexTTS2's conditioners (:class:`ConformerEncoder`) use WeNet's copy with the shift removed:
  the table is the plain sinusoid of positions ``0 .. t-1`` (the checkpoint's saved
  ``pos_enc.pe``), and the position term of query i, key j is ``(q_i + v) . P(j)``. Both terms
  then go through one attention product over doubled head features (see
  :class:`RelPositionMultiHeadedAttention`).
"""
from __future__ import annotations

import math
from functools import lru_cache

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.nn.compiled import compile_bounded
from ttscli.nn.conv import Conv1d, DepthwiseConv1d
from ttscli.nn.fastmath import fast_sigmoid, on_cpu
from ttscli.nn.fastmath import softmax as fast_softmax

# ----------------------------------------------------------------------------- activations


@compile_bounded   # not shapeless: fast_exp reinterprets bits
def _silu_cpu(x: mx.array) -> mx.array:
    return x * fast_sigmoid(x)


def silu(x: mx.array) -> mx.array:
    """SiLU; on the CPU from fast_exp's multiply-adds (MLX's CPU sigmoid is a scalar loop)."""
    return _silu_cpu(x) if on_cpu() else nn.silu(x)


@compile_bounded
def _glu_cpu(a: mx.array, b: mx.array) -> mx.array:
    return a * fast_sigmoid(b)


def glu(x: mx.array) -> mx.array:
    """torch's ``glu`` over the last axis: first half times the sigmoid of the second."""
    a, b = mx.split(x, 2, axis=-1)
    return _glu_cpu(a, b) if on_cpu() else a * mx.sigmoid(b)


# ----------------------------------------------------------------------------- positions


@lru_cache(maxsize=32)
def rel_pos_emb(t: int, d: int) -> mx.array:
    """ESPnet relative positional encoding ``[2t-1, d]``: positions t-1 .. -(t-1)."""
    pos = np.arange(t, dtype=np.float32)[:, None]
    div = np.exp(np.arange(0, d, 2, dtype=np.float32) * np.float32(-(math.log(10000.0) / d)))
    pe = np.zeros((2 * t - 1, d), np.float32)
    ang = np.concatenate([pos[::-1] * div, -pos[1:] * div])
    pe[:, 0::2] = np.sin(ang)
    pe[:, 1::2] = np.cos(ang)
    return mx.array(pe)


def sinusoid_table(n: int, d: int) -> np.ndarray:
    """The absolute sinusoid ``[n, d]`` WeNet saves as ``pos_enc.pe``: row p holds
    ``sin(p w_i)`` at even and ``cos(p w_i)`` at odd channels, ``w_i = 10000^(-2i/d)``."""
    pos = np.arange(n, dtype=np.float32)[:, None]
    div = np.exp(np.arange(0, d, 2, dtype=np.float32) * np.float32(-(math.log(10000.0) / d)))
    pe = np.zeros((n, d), np.float32)
    pe[:, 0::2] = np.sin(pos * div)
    pe[:, 1::2] = np.cos(pos * div)
    return pe


# ----------------------------------------------------------------------------- blocks


class RelPositionMultiHeadedAttention(nn.Module):
    """Multi-head self-attention with position biases ``pos_bias_u`` / ``pos_bias_v``
    (Transformer-XL's content and position terms).

    ``rel_shift=True`` (ESPnet): ``pos`` is :func:`rel_pos_emb`'s ``[2t-1, d]`` table and the
    position scores are shifted so query i reads relative position j - i. ``rel_shift=False``
    (WeNet without the shift, as IndexTTS2 ships it): ``pos`` is ``[t, d]``, indexed by the key
    alone. Then ``(q+u).k + (q+v).p`` is one dot product of ``[q+u | q+v]`` with ``[k | p]``, so
    the whole attention is a single scaled-dot-product over doubled head features, no separate
    position-score matrix.
    """

    def __init__(self, heads: int, dim: int, rel_shift: bool = True):
        super().__init__()
        self.h, self.d_k = heads, dim // heads
        self.rel_shift = rel_shift
        self.linear_q = nn.Linear(dim, dim)
        self.linear_k = nn.Linear(dim, dim)
        self.linear_v = nn.Linear(dim, dim)
        self.linear_out = nn.Linear(dim, dim)
        self.linear_pos = nn.Linear(dim, dim, bias=False)
        self.pos_bias_u = mx.zeros((heads, self.d_k))
        self.pos_bias_v = mx.zeros((heads, self.d_k))

    def __call__(self, x: mx.array, pos: mx.array) -> mx.array:
        if not self.rel_shift:
            return self._unshifted(x, pos)
        b, t, _ = x.shape
        h, dk = self.h, self.d_k

        def heads(y):
            return y.reshape(b, -1, h, dk)

        q = heads(self.linear_q(x))
        k = heads(self.linear_k(x)).transpose(0, 2, 3, 1)           # [b, h, dk, t]
        v = heads(self.linear_v(x)).transpose(0, 2, 1, 3)
        p = self.linear_pos(pos).reshape(-1, h, dk).transpose(1, 2, 0)   # [h, dk, 2t-1]
        ac = (q + self.pos_bias_u).transpose(0, 2, 1, 3) @ k           # [b, h, t, t]
        bd = (q + self.pos_bias_v).transpose(0, 2, 1, 3) @ p           # [b, h, t, 2t-1]
        # relative shift: query i, key j reads relative position j - i, stored at t-1-i+j
        idx = (t - 1) - mx.arange(t)[:, None] + mx.arange(t)[None, :]
        bd = mx.take_along_axis(bd, mx.broadcast_to(idx, (b, h, t, t)), axis=-1)
        scores = (ac + bd) * (1.0 / math.sqrt(dk))
        attn = fast_softmax(scores) if on_cpu() else mx.softmax(scores, axis=-1, precise=True)
        y = (attn @ v).transpose(0, 2, 1, 3).reshape(b, t, h * dk)
        return self.linear_out(y)

    def _unshifted(self, x: mx.array, pos: mx.array) -> mx.array:
        b, t, _ = x.shape
        h, dk = self.h, self.d_k
        q = self.linear_q(x).reshape(b, t, h, dk)
        k = self.linear_k(x).reshape(b, t, h, dk).transpose(0, 2, 1, 3)
        v = self.linear_v(x).reshape(b, t, h, dk).transpose(0, 2, 1, 3)
        p = self.linear_pos(pos).reshape(t, h, dk).transpose(1, 0, 2)      # [h, t, dk]
        q2 = mx.concatenate([q + self.pos_bias_u, q + self.pos_bias_v], axis=-1).transpose(0, 2, 1, 3)
        k2 = mx.concatenate([k, mx.broadcast_to(p, (b, h, t, dk))], axis=-1)
        scores = (q2 * (1.0 / math.sqrt(dk))) @ k2.swapaxes(-1, -2)                  # [b, h, t, t]
        attn = fast_softmax(scores) if on_cpu() else mx.softmax(scores, axis=-1, precise=True)
        y = attn @ v
        return self.linear_out(y.transpose(0, 2, 1, 3).reshape(b, t, h * dk))


class PositionwiseFeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w_1 = nn.Linear(dim, hidden)
        self.w_2 = nn.Linear(hidden, dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.w_2(silu(self.w_1(x)))


class ConvolutionModule(nn.Module):
    """Pointwise conv to 2C -> GLU -> depthwise conv (``kernel``, centred) -> LayerNorm -> SiLU ->
    pointwise conv; the pointwise convs are single GEMMs, the depthwise one shifted scaled sums."""

    def __init__(self, channels: int, kernel: int = 15):
        super().__init__()
        self.pointwise_conv1 = Conv1d(channels, 2 * channels, 1)
        self.depthwise_conv = DepthwiseConv1d(channels, kernel, padding=(kernel - 1) // 2)
        self.norm = nn.LayerNorm(channels, eps=1e-5)
        self.pointwise_conv2 = Conv1d(channels, channels, 1)

    def __call__(self, x: mx.array) -> mx.array:
        x = self.depthwise_conv(glu(self.pointwise_conv1(x)))
        return self.pointwise_conv2(silu(self.norm(x)))


class ConformerEncoderLayer(nn.Module):
    """Pre-norm block: attention, then (with ``conv_kernel``) the convolution module, then the
    feed-forward, each residual; with the convolution module a final LayerNorm (``norm_final``).
    No macaron feed-forward (neither user configures one). ``eps``: the LayerNorms' (WeNet 1e-5,
    CosyVoice 1e-12); ``rel_shift``: the attention variant (:class:`RelPositionMultiHeadedAttention`)."""

    def __init__(self, dim: int, heads: int, hidden: int, *, conv_kernel: int = 0, eps: float = 1e-5,
                 rel_shift: bool = True):
        super().__init__()
        self.self_attn = RelPositionMultiHeadedAttention(heads, dim, rel_shift=rel_shift)
        self.feed_forward = PositionwiseFeedForward(dim, hidden)
        self.norm_mha = nn.LayerNorm(dim, eps=eps)
        self.norm_ff = nn.LayerNorm(dim, eps=eps)
        if conv_kernel:
            self.conv_module = ConvolutionModule(dim, conv_kernel)
            self.norm_conv = nn.LayerNorm(dim, eps=eps)
            self.norm_final = nn.LayerNorm(dim, eps=eps)

    def __call__(self, x: mx.array, pos: mx.array) -> mx.array:
        x = x + self.self_attn(self.norm_mha(x), pos)
        if "conv_module" in self:
            x = x + self.conv_module(self.norm_conv(x))
        x = x + self.feed_forward(self.norm_ff(x))
        return self.norm_final(x) if "conv_module" in self else x


# ----------------------------------------------------------------------------- input layer


class Conv2dStride2(nn.Module):
    """``nn.Conv2d(1, C, 3, stride=2)`` over ``x [B, T, F]`` (time x features), ReLU after, weight
    ``[C, 1, 3, 3]``. Returns ``[B, T', C * F']`` with T' = (T-1)//2, F' = (F-1)//2, channel-major
    as torch flattens ``[B, C, T', F'] -> [B, T', C, F']``: each output frame is ONE product
    ``W [C, 9] @ patches [9, F']``, so the flattened rows come out in the order the following
    Linear's weight expects, with no transpose of the (large) activation or of that weight."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = mx.zeros((channels, 1, 3, 3))
        self.bias = mx.zeros((channels,))

    def __call__(self, x: mx.array) -> mx.array:
        b, t, f = x.shape
        if t < 3 or f < 3:
            raise ValueError(f"a 3x3 stride-2 conv needs at least 3 frames and 3 features, got [{t}, {f}]")
        t2, f2 = (t - 1) // 2, (f - 1) // 2
        taps = [x[:, i:i + 2 * t2 - 1:2, j:j + 2 * f2 - 1:2] for i in range(3) for j in range(3)]
        patches = mx.stack(taps, axis=2)                                   # [B, T', 9, F']
        c = self.weight.shape[0]
        y = self.weight.reshape(c, 9) @ patches + self.bias[:, None]      # [B, T', C, F']
        return nn.relu(y).reshape(b, t2, c * f2)


class PositionTable(nn.Module):
    """The saved sinusoid ``pe [1, max_len, d]`` (a checkpoint buffer, used as stored)."""

    def __init__(self, d: int, max_len: int = 5000):
        super().__init__()
        self.pe = mx.array(sinusoid_table(max_len, d)[None])

    def __call__(self, t: int) -> mx.array:
        if t >= self.pe.shape[1]:
            raise ValueError(f"{t} frames after subsampling; the position table holds {self.pe.shape[1] - 1} at most")
        return self.pe[0, :t]


class Conv2dSubsampling2(nn.Module):
    """WeNet's ``Conv2dSubsampling2`` with the relative-position encoding: conv 3x3 stride 2 +
    ReLU (``conv.0``), a Linear over channels x features (``out.0``), scaled by sqrt(d); returns
    the frames and the position table ``[T', d]`` (``pos_enc.pe``, positions 0 .. T'-1)."""

    def __init__(self, idim: int, odim: int, max_len: int = 5000):
        super().__init__()
        self.conv = [Conv2dStride2(odim)]
        self.out = [nn.Linear(odim * ((idim - 1) // 2), odim)]
        self.pos_enc = PositionTable(odim, max_len)
        self.scale = math.sqrt(odim)

    def __call__(self, x: mx.array) -> tuple[mx.array, mx.array]:
        x = self.out[0](self.conv[0](x)) * self.scale
        return x, self.pos_enc(x.shape[1])


class ConformerEncoder(nn.Module):
    """WeNet's ``ConformerEncoder`` as IndexTTS2 builds it: ``Conv2dSubsampling2`` input layer
    (frame rate halved), ``num_blocks`` pre-norm blocks with the un-shifted relative-position
    attention, the convolution module (``cnn_module_kernel``) and SiLU feed-forwards, then
    ``after_norm``. ``x [B, T, input_size]`` -> ``[B, (T-1)//2, output_size]``."""

    def __init__(self, input_size: int, output_size: int = 256, attention_heads: int = 4,
                 linear_units: int = 2048, num_blocks: int = 6, cnn_module_kernel: int = 15):
        super().__init__()
        self.embed = Conv2dSubsampling2(input_size, output_size)
        self.encoders = [ConformerEncoderLayer(output_size, attention_heads, linear_units,
                                               conv_kernel=cnn_module_kernel, eps=1e-5, rel_shift=False)
                         for _ in range(num_blocks)]
        self.after_norm = nn.LayerNorm(output_size, eps=1e-5)

    def __call__(self, x: mx.array) -> mx.array:
        x, pos = self.embed(x)
        for layer in self.encoders:
            x = layer(x, pos)
        return self.after_norm(x)

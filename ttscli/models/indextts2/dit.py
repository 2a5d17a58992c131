"""IndexTTS2's velocity network (``net.cfm.estimator.*`` of ``s2mel.pth``): upstream's ``DiT``
(``indextts/s2mel/modules/diffusion_transformer.py``) over gpt-fast blocks
(``gpt_fast/model.py``), ending in a WaveNet stack.

Per frame the input is ``x ‖ prompt mel ‖ cond_projection(content) ‖ style`` merged by one linear;
then ``depth`` pre-norm blocks (fused-qkv attention with rotary positions on adjacent channel
pairs, SwiGLU) whose norms are *adaptive*: RMSNorm scaled and shifted by a projection of the
flow time's embedding. With ``uvit_skip_connection`` the first ``depth // 2`` blocks' outputs are
fed, last first, into the blocks after the middle one (``skip_in_linear`` of ``x ‖ skip``). The
result, joined with ``x`` again (``skip_linear``), goes through the WaveNet (conditioned on a
second time embedding), a time-modulated LayerNorm + linear, and a 1x1 conv to 80 channels.

For the Euler solver the network is split in two: :meth:`DiT.condition` computes, once per
synthesis, the part of the input merge that does not change between steps (prompt, content,
style: all but the noisy ``x``), and :meth:`DiT.velocity` runs one step from it. Everything that
depends on the flow time alone (the two embeddings, every adaptive norm's scale and shift) is
computed for one row and broadcast over the batch (the CFG pair shares it).

On the CPU the attention softmax and the SwiGLU run in numpy (:func:`host_attention`,
:func:`host_swiglu`), as the WaveNet's gates do: MLX's CPU elementwise kernels are scalar on
x86-64 while numpy's float32 ``exp``/``tanh`` are SIMD; all matrix products stay MLX's.

Upstream's unused tensors (``x_embedder``, ``cond_embedder``, ``content_mask_embedder``: they
belong to training and discrete-content variants) are loaded so the file is checked strictly.
``input_pos`` (positions 0..16383, a saved buffer) is loaded too; rotary positions are computed
by ``mx.fast.rope``, which gives the same angles.

Channels-last ``[B, T, C]``; every frame valid (upstream's length mask is all ones at inference).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.codecs.s3gen.flow import silu
from ttscli.models.indextts2.wavenet import WN
from ttscli.nn.conv import Conv1d
from ttscli.nn.fastmath import on_cpu
from ttscli.nn.layers import RMSNorm, RoPE, attention

if TYPE_CHECKING:
    from ttscli.models.indextts2.s2mel import S2MelArgs

# upstream hard-codes the position table's length (``block_size=16384`` in DiT.__init__)
MAX_POSITIONS = 16384
ROPE_BASE = 10000.0
NORM_EPS = 1e-5


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - n % k


def ffn_width(dim: int) -> int:
    """gpt-fast's default SwiGLU width: 2/3 of 4 dim, rounded up to a multiple of 256."""
    return find_multiple(int(2 * 4 * dim / 3), 256)


def rope_inv_freq(head_dim: int, base: float = ROPE_BASE) -> np.ndarray:
    """``1 / base^(2i / head_dim)`` in float32 as gpt-fast's ``precompute_freqs_cis`` computes it."""
    exps = np.arange(0, head_dim, 2)[: head_dim // 2].astype(np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / np.power(np.float32(base), exps, dtype=np.float32)).astype(np.float32)


class AdaptiveLayerNorm(nn.Module):
    """``scale(c) * RMSNorm(x) + shift(c)``, scale and shift one linear of the time embedding."""

    def __init__(self, dim: int, eps: float = NORM_EPS):
        super().__init__()
        self.project_layer = nn.Linear(dim, 2 * dim)
        self.norm = RMSNorm(dim, eps)

    def modulation(self, c: mx.array) -> tuple[mx.array, mx.array]:
        """``c [B, 1, dim]`` -> (scale with the norm's own gain folded in, shift), each ``[B, 1, dim]``."""
        scale, shift = mx.split(self.project_layer(c), 2, axis=-1)
        return scale * self.norm.weight, shift

    def apply(self, x: mx.array, mod: tuple[mx.array, mx.array]) -> mx.array:
        scale, shift = mod
        return mx.fast.rms_norm(x, None, self.norm.eps) * scale + shift

    def __call__(self, x: mx.array, c: mx.array) -> mx.array:
        return self.apply(x, self.modulation(c))


# scores per chunk: a chunk's softmax passes then stay in a core's L2 cache (at 1291 frames
# 1 MB chunks ran 20% faster than 24 MB ones, which go to memory on every pass)
HOST_CHUNK_BYTES = 1 << 20


def _host_softmax_product(q: mx.array, kt: mx.array, v: mx.array) -> mx.array:
    scores = np.asarray(q @ kt)
    e = scores - scores.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    return (mx.array(e) @ v) / mx.array(e.sum(axis=-1, keepdims=True))


def host_attention(q: mx.array, k: mx.array, v: mx.array, scale: float) -> mx.array:
    """Unmasked attention ``q [B, H, L, D]``, ``k``/``v [B, H, S, D]`` with the softmax in numpy.

    The DiT attends over every frame of prompt and target (over a thousand with a long
    reference), so each block exponentiates ``B H L S`` scores. MLX's CPU elementwise kernels are
    scalar on x86-64 while numpy's float32 ``exp`` is SIMD: at 1291 frames this is about five
    times faster per block than :func:`ttscli.nn.layers.attention`. The two products stay MLX's
    (one BLAS and its threads); the scores cross to numpy in chunks of about
    :data:`HOST_CHUNK_BYTES` (groups of heads, or blocks of queries of one head), and the softmax
    is normalised after the value product, over ``[L, D]`` instead of ``[L, S]``."""
    B, H, L, D = q.shape
    S = k.shape[2]
    q = (q * scale).reshape(B * H, L, D)
    kt = k.reshape(B * H, S, D).swapaxes(-1, -2)
    v = v.reshape(B * H, S, D)
    rows = max(1, HOST_CHUNK_BYTES // (4 * S))
    if rows >= L:
        n = rows // L
        out = [_host_softmax_product(q[i:i + n], kt[i:i + n], v[i:i + n]) for i in range(0, B * H, n)]
        return mx.concatenate(out).reshape(B, H, L, D)
    out = [mx.concatenate([_host_softmax_product(q[i, j:j + rows], kt[i], v[i]) for j in range(0, L, rows)])
           for i in range(B * H)]
    return mx.stack(out).reshape(B, H, L, D)


class Attention(nn.Module):
    """Fused ``wqkv`` (q, k, v blocks, heads contiguous), rotary on adjacent pairs, no biases."""

    def __init__(self, dim: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.head_dim = dim // n_head
        self.wqkv = nn.Linear(dim, 3 * n_head * self.head_dim, bias=False)
        self.wo = nn.Linear(n_head * self.head_dim, dim, bias=False)
        self.rope = RoPE(self.head_dim, inv_freq=rope_inv_freq(self.head_dim), traditional=True)

    def __call__(self, x: mx.array, mask: Any = None, queries_from: int = 0) -> mx.array:
        """``x [B, T, dim]`` -> ``[B, T - queries_from, dim]``: the outputs of frames
        ``queries_from..T-1``, attending over all T frames (``mask`` then must be None)."""
        B, T, _ = x.shape
        if queries_from == 0:
            qkv = self.wqkv(x).reshape(B, T, 3, self.n_head, self.head_dim).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
        else:
            n = self.n_head * self.head_dim
            w = self.wqkv.weight
            q = (x[:, queries_from:] @ w[:n].T).reshape(B, T - queries_from, self.n_head, self.head_dim)
            q = q.transpose(0, 2, 1, 3)
            kv = (x @ w[n:].T).reshape(B, T, 2, self.n_head, self.head_dim).transpose(2, 0, 3, 1, 4)
            k, v = kv[0], kv[1]
        q, k = self.rope(q, queries_from), self.rope(k)
        if mask is None and on_cpu() and q.dtype == mx.float32:
            o = host_attention(q, k, v, self.head_dim ** -0.5)
        else:
            o = attention(q, k, v, self.head_dim ** -0.5, mask)
        return self.wo(o.transpose(0, 2, 1, 3).reshape(B, T - queries_from, -1))


def host_swiglu(gate: mx.array, up: mx.array) -> mx.array:
    """``silu(gate) * up`` by numpy (SIMD ``tanh``; MLX's CPU kernels are scalar on x86-64)."""
    g, u = np.asarray(gate), np.asarray(up)
    half = np.multiply(g, np.float32(0.5))
    out = np.tanh(half)                # silu(g) = g / 2 (1 + tanh(g / 2))
    out += 1.0
    out *= half
    out *= u
    return mx.array(out)


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        g, u = self.w1(x), self.w3(x)
        if on_cpu() and g.dtype == mx.float32:
            return self.w2(host_swiglu(g, u))
        return self.w2(nn.silu(g) * u)


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, n_head: int, uvit_skip: bool):
        super().__init__()
        self.attention = Attention(dim, n_head)
        self.feed_forward = FeedForward(dim, ffn_width(dim))
        self.ffn_norm = AdaptiveLayerNorm(dim)
        self.attention_norm = AdaptiveLayerNorm(dim)
        if uvit_skip:
            self.skip_in_linear = nn.Linear(2 * dim, dim)

    def modulation(self, c: mx.array) -> tuple:
        return self.attention_norm.modulation(c), self.ffn_norm.modulation(c)

    def __call__(self, x: mx.array, mod: tuple, mask: Any = None, skip: mx.array | None = None,
                 queries_from: int = 0) -> mx.array:
        """``mod``: :meth:`modulation` of the time embedding; the outputs of frames ``queries_from..``."""
        if skip is not None:
            x = self.skip_in_linear(mx.concatenate([x, skip], axis=-1))
        h = x[:, queries_from:] + self.attention(self.attention_norm.apply(x, mod[0]), mask, queries_from)
        return h + self.feed_forward(self.ffn_norm.apply(h, mod[1]))


class Transformer(nn.Module):
    """gpt-fast's ``Transformer`` without embeddings or head: blocks, U-ViT skips, adaptive final norm."""

    def __init__(self, depth: int, dim: int, n_head: int, uvit_skip: bool):
        super().__init__()
        self.uvit_skip = uvit_skip
        self.layers = [TransformerBlock(dim, n_head, uvit_skip) for _ in range(depth)]
        self.norm = AdaptiveLayerNorm(dim)

    def __call__(self, x: mx.array, c: mx.array, mask: Any = None, queries_from: int = 0) -> mx.array:
        """``x [B, T, dim]``, ``c [B or 1, 1, dim]`` (the time embedding) -> ``[B, T - queries_from,
        dim]``: every block sees all frames, the last computes only the frames asked for."""
        n = len(self.layers)
        skips = []
        for i, layer in enumerate(self.layers):
            # blocks before the middle one emit, blocks after it take the latest emitted
            skip = skips.pop() if self.uvit_skip and i > n // 2 and skips else None
            x = layer(x, layer.modulation(c), mask, skip, queries_from if i == n - 1 else 0)
            if self.uvit_skip and i < n // 2:
                skips.append(x)
        return self.norm(x, c)


class TimestepEmbedder(nn.Module):
    """``cos ‖ sin`` of ``1000 t freqs`` (``freqs``: a saved buffer, 128 frequencies) -> Linear, SiLU, Linear."""

    def __init__(self, dim: int, frequency_embedding_size: int = 256):
        super().__init__()
        half = frequency_embedding_size // 2
        self.freqs = mx.array(np.exp(np.float32(-math.log(10000)) * np.arange(half, dtype=np.float32)
                                     / np.float32(half)).astype(np.float32))
        self.mlp = [nn.Linear(frequency_embedding_size, dim), nn.SiLU(), nn.Linear(dim, dim)]

    def __call__(self, t: mx.array) -> mx.array:
        """``t [B]`` -> ``[B, dim]``."""
        args = (1000.0 * t.astype(mx.float32))[:, None] * self.freqs[None]
        emb = mx.concatenate([mx.cos(args), mx.sin(args)], axis=-1)
        return self.mlp[2](silu(self.mlp[0](emb)))


class FinalLayer(nn.Module):
    """LayerNorm (no affine, eps 1e-6) shifted/scaled by SiLU(time) -> linear (weight-normed upstream)."""

    def __init__(self, hidden: int, out_channels: int):
        super().__init__()
        self.linear = nn.Linear(hidden, out_channels)
        self.adaLN_modulation = [nn.SiLU(), nn.Linear(hidden, 2 * hidden)]

    def __call__(self, x: mx.array, c: mx.array) -> mx.array:
        """``x [B, T, hidden]``, ``c [B or 1, hidden]``."""
        shift, scale = mx.split(self.adaLN_modulation[1](silu(c))[:, None, :], 2, axis=-1)
        return self.linear(mx.fast.layer_norm(x, None, None, 1e-6) * (1 + scale) + shift)


class DiT(nn.Module):
    """The estimator: ``(x, prompt_x, t, style, content)`` -> velocity ``[B, T, 80]``."""

    def __init__(self, args: S2MelArgs):
        super().__init__()
        d, w = args.DiT, args.wavenet
        self.in_channels = d.in_channels
        self.hidden_dim = d.hidden_dim
        self.is_causal = d.is_causal
        self.long_skip_connection = d.long_skip_connection
        self.style_condition = d.style_condition
        self.final_layer_type = d.final_layer_type
        self.transformer = Transformer(d.depth, d.hidden_dim, d.num_heads, d.uvit_skip_connection)
        self.x_embedder = nn.Linear(d.in_channels, d.hidden_dim)
        self.cond_embedder = nn.Embedding(d.content_codebook_size, d.hidden_dim)
        self.cond_projection = nn.Linear(d.content_dim, d.hidden_dim)
        self.t_embedder = TimestepEmbedder(d.hidden_dim)
        self.input_pos = mx.arange(MAX_POSITIONS)
        if d.final_layer_type == "wavenet":
            self.t_embedder2 = TimestepEmbedder(w.hidden_dim)
            self.conv1 = nn.Linear(d.hidden_dim, w.hidden_dim)
            self.conv2 = Conv1d(w.hidden_dim, d.in_channels, 1)
            self.wavenet = WN(w.hidden_dim, w.kernel_size, w.dilation_rate, w.num_layers, w.hidden_dim)
            self.final_layer = FinalLayer(w.hidden_dim, w.hidden_dim)
            self.res_projection = nn.Linear(d.hidden_dim, w.hidden_dim)
        else:
            self.final_mlp = [nn.Linear(d.hidden_dim, d.hidden_dim), nn.SiLU(), nn.Linear(d.hidden_dim, d.in_channels)]
        self.content_mask_embedder = nn.Embedding(1, d.hidden_dim)
        self.skip_linear = nn.Linear(d.hidden_dim + d.in_channels, d.hidden_dim)
        style_dim = args.style_encoder.dim if d.style_condition else 0
        self.cond_x_merge_linear = nn.Linear(d.hidden_dim + 2 * d.in_channels + style_dim, d.hidden_dim)

    def condition(self, prompt_x: mx.array, content: mx.array, style: mx.array) -> mx.array:
        """The input merge without its ``x`` columns: ``prompt_x [B, T, 80]``, ``content [B, T,
        content_dim]``, ``style [B, style_dim]`` -> ``[B, T, hidden]`` (bias included)."""
        c, h = self.in_channels, self.hidden_dim
        w = self.cond_x_merge_linear.weight
        out = prompt_x @ w[:, c:2 * c].T + self.cond_projection(content) @ w[:, 2 * c:2 * c + h].T
        out = out + self.cond_x_merge_linear.bias
        if self.style_condition:
            out = out + (style @ w[:, 2 * c + h:].T)[:, None, :]
        return out

    def velocity(self, x: mx.array, t: mx.array, cond: mx.array, start: int = 0) -> mx.array:
        """One evaluation: ``x [B, T, 80]``, ``t [1]`` (or ``[B]``), ``cond`` from :meth:`condition`
        -> the velocity of frames ``start..T-1``, ``[B, T - start, 80]``.

        ``start`` (the prompt length, whose velocity the solver discards) saves work without
        changing the frames returned: after the last block everything is per frame but the
        WaveNet, whose output frames see ``wavenet.reach`` frames back, so the last block, the
        WaveNet and the output layers run on frames ``start - reach..`` only.
        """
        T = x.shape[1]
        if T > MAX_POSITIONS:
            raise ValueError(f"the DiT takes at most {MAX_POSITIONS} frames, got {T}")
        if not 0 <= start < T:
            raise ValueError(f"start frame {start} outside the {T} frames")
        reach = self.wavenet.reach if self.final_layer_type == "wavenet" else 0
        # a causal mask would need the cut too: keep the full pass there
        cut = 0 if self.is_causal else max(start - reach, 0)
        t1 = self.t_embedder(t)
        h = x @ self.cond_x_merge_linear.weight[:, :self.in_channels].T + cond
        res = self.transformer(h, t1[:, None, :], "causal" if self.is_causal else None, cut)
        if self.long_skip_connection:
            res = self.skip_linear(mx.concatenate([res, x[:, cut:]], axis=-1))
        if self.final_layer_type != "wavenet":
            return self.final_mlp[2](silu(self.final_mlp[0](res[:, start - cut:])))
        y = self.wavenet(self.conv1(res), self.t_embedder2(t)) + self.res_projection(res)
        return self.conv2(self.final_layer(y[:, start - cut:], t1))

    def __call__(self, x: mx.array, prompt_x: mx.array, t: mx.array, style: mx.array,
                 content: mx.array) -> mx.array:
        """Upstream's ``forward`` (channels-last): all rows' inputs at once."""
        return self.velocity(x, t, self.condition(prompt_x, content, style))

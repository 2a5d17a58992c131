"""S3Gen's flow (``flow.*``): speech tokens -> 80-mel at 50 Hz.

CosyVoice2's ``CausalMaskedDiffWithXvec``: token embedding -> ``UpsampleConformerEncoder``
(a lookahead conv, conformer blocks with ESPnet relative-position attention, x2 upsampling,
more conformer blocks) -> ``encoder_proj`` to 80 channels = mu; then a conditional flow-matching
decoder (``decoder.estimator``, a 1-level causal U-Net of resnet and transformer blocks) is
integrated with Euler steps on the cosine schedule, classifier-free guidance inside each step.

Channels-last ``[B, T, C]``; batch 1 in, the CFG pair (conditional, unconditional) inside.
Attention everywhere is full (upstream's chunk masks are off at inference), so nothing is masked.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.nn.compiled import compile_bounded
from ttscli.nn.conformer import ConformerEncoderLayer, rel_pos_emb, silu
from ttscli.nn.conv import Conv1d, pad_time
from ttscli.nn.fastmath import fast_exp, on_cpu
from ttscli.nn.layers import attention

# ----------------------------------------------------------------------------- config


@dataclass
class FlowArgs:
    vocab_size: int = 6561
    input_size: int = 512            # token embedding and encoder width
    output_size: int = 80            # mel channels
    spk_embed_dim: int = 192
    token_mel_ratio: int = 2
    pre_lookahead_len: int = 3
    attention_heads: int = 8
    linear_units: int = 2048
    num_blocks: int = 6
    num_up_blocks: int = 4
    # estimator
    dec_channels: int = 256
    dec_heads: int = 8
    dec_head_dim: int = 64
    dec_n_blocks: int = 4
    dec_mid_blocks: int = 12
    inference_cfg_rate: float = 0.7


# ----------------------------------------------------------------------------- activations
# MLX's CPU exp/tanh/erf are scalar loops (~30 ns per element here); the flow applies them to
# every element of the estimator's 56 blocks x 10 Euler steps x 2 CFG rows, where they cost more
# than all the GEMMs. On the CPU they are built from fast_exp's multiply-adds instead.

# Abramowitz & Stegun 7.1.26: erfc(z) = t P(t) exp(-z^2), t = 1 / (1 + p z), z >= 0, |error| <= 1.5e-7
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


@compile_bounded   # not shapeless: fast_exp reinterprets bits
def _gelu_cpu(x: mx.array) -> mx.array:
    z = mx.abs(x) * (1.0 / math.sqrt(2.0))
    t = 1.0 / (1.0 + _ERF_P * z)
    poly = t * (_ERF_A[0] + t * (_ERF_A[1] + t * (_ERF_A[2] + t * (_ERF_A[3] + t * _ERF_A[4]))))
    q = poly * fast_exp(-z * z)                  # erfc(|x| / sqrt 2)
    return 0.5 * x * mx.where(x >= 0, 2.0 - q, q)


def gelu(x: mx.array) -> mx.array:
    """The exact (erf) GELU, as diffusers' ``GELU(approximate="none")``."""
    return _gelu_cpu(x) if on_cpu() else nn.gelu(x)


@compile_bounded
def _mish_cpu(x: mx.array) -> mx.array:
    # tanh(log(1 + n)) = (n^2 + 2n) / (n^2 + 2n + 2) with n = e^x; past x = 20 the ratio is 1 in float32
    n = fast_exp(mx.minimum(x, 20.0))
    num = n * (n + 2.0)
    return x * num / (num + 2.0)


def mish(x: mx.array) -> mx.array:
    return _mish_cpu(x) if on_cpu() else x * mx.tanh(nn.softplus(x))


# ----------------------------------------------------------------------------- encoder


class LinearEmbed(nn.Module):
    """``LinearNoSubsampling``: Linear + LayerNorm, scaled by sqrt(d); keys ``out.0``/``out.1``."""

    def __init__(self, idim: int, odim: int):
        super().__init__()
        self.out = [nn.Linear(idim, odim), nn.LayerNorm(odim, eps=1e-5)]
        self.scale = math.sqrt(odim)

    def __call__(self, x: mx.array) -> tuple[mx.array, mx.array]:
        x = self.out[1](self.out[0](x)) * self.scale
        return x, rel_pos_emb(x.shape[-2], x.shape[-1])


class PreLookaheadLayer(nn.Module):
    """Each frame sees ``n`` future frames (conv1, right zero padding) then 2 past (conv2).
    ``hidden``: conv1's output width (default ``channels``; CosyVoice3 widens 80 to 1024)."""

    def __init__(self, channels: int, n: int, hidden: int | None = None):
        super().__init__()
        hidden = hidden or channels
        self.conv1 = Conv1d(channels, hidden, n + 1, padding=(0, n))
        self.conv2 = Conv1d(hidden, channels, 3, padding=(2, 0))

    def __call__(self, x: mx.array) -> mx.array:
        return self.conv2(nn.leaky_relu(self.conv1(x), 0.01), residual=x)


class Upsample1D(nn.Module):
    """Nearest x``stride`` then a causal conv of kernel ``2 stride + 1``."""

    def __init__(self, channels: int, stride: int = 2):
        super().__init__()
        self.stride = stride
        self.conv = Conv1d(channels, channels, 2 * stride + 1, padding=(2 * stride, 0))

    def __call__(self, x: mx.array) -> mx.array:
        return self.conv(mx.repeat(x, self.stride, axis=-2))


class UpsampleConformerEncoder(nn.Module):
    def __init__(self, a: FlowArgs):
        super().__init__()
        d = a.input_size
        self.embed = LinearEmbed(d, d)
        self.pre_lookahead_layer = PreLookaheadLayer(d, a.pre_lookahead_len)
        self.encoders = [ConformerEncoderLayer(d, a.attention_heads, a.linear_units, eps=1e-12)
                         for _ in range(a.num_blocks)]
        self.up_layer = Upsample1D(d, a.token_mel_ratio)
        self.up_embed = LinearEmbed(d, d)
        self.up_encoders = [ConformerEncoderLayer(d, a.attention_heads, a.linear_units, eps=1e-12)
                            for _ in range(a.num_up_blocks)]
        self.after_norm = nn.LayerNorm(d, eps=1e-5)

    def __call__(self, x: mx.array) -> mx.array:
        """``[B, T_tok, d]`` token embeddings -> ``[B, 2 T_tok, d]``."""
        x, pos = self.embed(x)
        x = self.pre_lookahead_layer(x)
        for layer in self.encoders:
            x = layer(x, pos)
        x, pos = self.up_embed(self.up_layer(x))
        for layer in self.up_encoders:
            x = layer(x, pos)
        return self.after_norm(x)


# ----------------------------------------------------------------------------- estimator


class _Act(nn.Module):
    """A parameterless slot of an upstream ``nn.Sequential`` (keeps the checkpoint's indices)."""

    def __init__(self, fn=None):
        super().__init__()
        self._fn = fn

    def __call__(self, x: mx.array) -> mx.array:
        return x if self._fn is None else self._fn(x)


class CausalBlock1D(nn.Module):
    """Causal conv k3 -> LayerNorm over channels -> Mish (keys ``block.0``, ``block.2``)."""

    def __init__(self, dim: int, dim_out: int):
        super().__init__()
        self.block = [Conv1d(dim, dim_out, 3, padding="causal"), _Act(), nn.LayerNorm(dim_out), _Act(), _Act(mish)]

    def __call__(self, x: mx.array) -> mx.array:
        return mish(self.block[2](self.block[0](x)))


class CausalResnetBlock1D(nn.Module):
    def __init__(self, dim: int, dim_out: int, time_emb_dim: int):
        super().__init__()
        self.mlp = [_Act(mish), nn.Linear(time_emb_dim, dim_out)]
        self.block1 = CausalBlock1D(dim, dim_out)
        self.block2 = CausalBlock1D(dim_out, dim_out)
        self.res_conv = Conv1d(dim, dim_out, 1)

    def __call__(self, x: mx.array, temb: mx.array) -> mx.array:
        h = self.block1(x) + self.mlp[1](mish(temb))[:, None, :]
        return self.res_conv(x, residual=self.block2(h))


class Attention(nn.Module):
    """diffusers ``Attention`` as the estimator builds it: no q/k/v bias, out projection with bias."""

    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        inner = heads * head_dim
        self.heads, self.scale = heads, head_dim ** -0.5
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = [nn.Linear(inner, dim)]

    def __call__(self, x: mx.array) -> mx.array:
        b, t, _ = x.shape

        def heads(y):
            return y.reshape(b, t, self.heads, -1).transpose(0, 2, 1, 3)

        y = attention(heads(self.to_q(x)), heads(self.to_k(x)), heads(self.to_v(x)), self.scale)
        return self.to_out[0](y.transpose(0, 2, 1, 3).reshape(b, t, -1))


class GELUProj(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.proj = nn.Linear(dim, hidden)

    def __call__(self, x: mx.array) -> mx.array:
        return gelu(self.proj(x))


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = Attention(dim, heads, head_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = _FeedForward(dim)

    def __call__(self, x: mx.array) -> mx.array:
        x = x + self.attn1(self.norm1(x))
        return x + self.ff(self.norm3(x))


class _FeedForward(nn.Module):
    def __init__(self, dim: int, mult: int = 4):
        super().__init__()
        self.net = [GELUProj(dim, dim * mult), _Act(), nn.Linear(dim * mult, dim)]

    def __call__(self, x: mx.array) -> mx.array:
        return self.net[2](self.net[0](x))


class TimestepEmbedding(nn.Module):
    def __init__(self, in_channels: int, dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.linear_2(silu(self.linear_1(x)))


def timestep_features(t: mx.array, dim: int, scale: float = 1000.0) -> mx.array:
    """Matcha's ``SinusoidalPosEmb``: ``t [B]`` -> ``[B, dim]`` (sin ‖ cos)."""
    half = dim // 2
    freqs = mx.exp(mx.arange(half, dtype=mx.float32) * -(math.log(10000) / (half - 1)))
    ang = scale * t[:, None] * freqs[None, :]
    return mx.concatenate([mx.sin(ang), mx.cos(ang)], axis=-1)


class ConditionalDecoder(nn.Module):
    """The CFM's velocity estimator (one down level, mid blocks, one up level; no resampling)."""

    def __init__(self, a: FlowArgs, in_channels: int = 320, out_channels: int = 80):
        super().__init__()
        ch = a.dec_channels
        temb = ch * 4
        self.in_channels = in_channels

        def tblocks():
            return [BasicTransformerBlock(ch, a.dec_heads, a.dec_head_dim) for _ in range(a.dec_n_blocks)]

        self.time_mlp = TimestepEmbedding(in_channels, temb)
        self.down_blocks = [[CausalResnetBlock1D(in_channels, ch, temb), tblocks(),
                             Conv1d(ch, ch, 3, padding="causal")]]
        self.mid_blocks = [[CausalResnetBlock1D(ch, ch, temb), tblocks()] for _ in range(a.dec_mid_blocks)]
        self.up_blocks = [[CausalResnetBlock1D(2 * ch, ch, temb), tblocks(), Conv1d(ch, ch, 3, padding="causal")]]
        self.final_block = CausalBlock1D(ch, ch)
        self.final_proj = Conv1d(ch, out_channels, 1)

    def __call__(self, x: mx.array, mu: mx.array, t: mx.array, spks: mx.array, cond: mx.array) -> mx.array:
        """All ``[B, T, 80]`` but ``t [B]`` and ``spks [B, 80]`` -> velocity ``[B, T, 80]``."""
        temb = self.time_mlp(timestep_features(t, self.in_channels))
        spk = mx.broadcast_to(spks[:, None, :], x.shape)
        x = mx.concatenate([x, mu, spk, cond], axis=-1)
        resnet, blocks, down = self.down_blocks[0]
        x = resnet(x, temb)
        for blk in blocks:
            x = blk(x)
        skip = x
        x = down(x)
        for resnet, blocks in self.mid_blocks:
            x = resnet(x, temb)
            for blk in blocks:
                x = blk(x)
        resnet, blocks, up = self.up_blocks[0]
        x = resnet(mx.concatenate([x, skip], axis=-1), temb)
        for blk in blocks:
            x = blk(x)
        x = self.final_block(up(x))
        return self.final_proj(x)


class CausalConditionalCFM(nn.Module):
    """``estimator``: the velocity network (default CosyVoice2's U-Net; CosyVoice3 passes its DiT).

    On a GPU the steps are queued without waiting for each other (``sync_steps`` None), so the
    host builds step n+1 while the device runs step n: a velocity call is hundreds of small
    kernels, bound by their launches. ``compiled=True`` makes each Euler step, CFG mix included,
    one :func:`mx.compile` trace per shape (the same values; opt-in: a streamed utterance meets
    every length once, so each pass pays a trace, and what that costs against what it saves has
    not been measured on a GPU). The CPU evaluates each step, the path its goldens were taken on
    (the values do not depend on where evaluation happens).
    """

    compiled: bool = False
    sync_steps: bool | None = None

    def __init__(self, a: FlowArgs, estimator: nn.Module | None = None):
        super().__init__()
        self.cfg = a.inference_cfg_rate
        self.estimator = estimator if estimator is not None else ConditionalDecoder(a)
        # the same network on another runtime (onnx_flow.OnnxEstimator), called in its place
        self.external_estimator = None

    def _euler(self, estimator, estimator_kw: dict):
        """``(x, mu2, t2, spks2, cond2, dt) -> x + dt * v``, compiled when ``compiled`` (one trace
        per keyword set, kept on the module)."""
        def step(x, mu2, t2, spks2, cond2, dt):
            v = estimator(mx.concatenate([x, x]), mu2, t2, spks2, cond2, **estimator_kw)
            return x + dt * ((1.0 + self.cfg) * v[:1] - self.cfg * v[1:])

        if not self.compiled or self.external_estimator is not None:
            return step
        kept = self.__dict__.setdefault("_ttscli_euler", {})
        key = tuple(sorted(estimator_kw.items()))
        if key not in kept:
            kept[key] = mx.compile(step)
        return kept[key]

    def __call__(self, mu: mx.array, spks: mx.array, cond: mx.array, noise: mx.array,
                 n_timesteps: int = 10, **estimator_kw) -> mx.array:
        """Euler integration from ``noise`` ``[1, T, 80]`` to a mel ``[1, T, 80]``;
        ``estimator_kw`` go to every estimator call (the DiT's ``streaming``)."""
        t_span = 1 - np.cos(np.linspace(0, 1, n_timesteps + 1, dtype=np.float32) * np.float32(0.5 * np.pi))
        t_span = t_span.astype(np.float32)
        # the unconditional row sees zero mu, speaker and prompt mel
        mu2 = mx.concatenate([mu, mx.zeros_like(mu)])
        spks2 = mx.concatenate([spks, mx.zeros_like(spks)])
        cond2 = mx.concatenate([cond, mx.zeros_like(cond)])
        estimator = self.external_estimator or self.estimator
        from ttscli.nn.fastmath import on_cpu

        sync = on_cpu() if self.sync_steps is None else self.sync_steps
        euler = self._euler(estimator, estimator_kw)
        x = noise
        for t, r in pairwise(t_span.tolist()):
            x = euler(x, mu2, mx.array([t, t]), spks2, cond2, mx.array(r - t, mx.float32))
            if sync:
                mx.eval(x)
        return x


# ----------------------------------------------------------------------------- flow


class CausalMaskedDiffWithXvec(nn.Module):
    def __init__(self, a: FlowArgs):
        super().__init__()
        self.a = a
        self.input_embedding = nn.Embedding(a.vocab_size, a.input_size)
        self.spk_embed_affine_layer = nn.Linear(a.spk_embed_dim, a.output_size)
        self.encoder = UpsampleConformerEncoder(a)
        self.encoder_proj = nn.Linear(a.input_size, a.output_size)
        self.decoder = CausalConditionalCFM(a)

    def encode(self, tokens: mx.array) -> mx.array:
        """``[T_tok]`` int -> encoder output ``[2 T_tok, d]`` (before ``encoder_proj``)."""
        return self.encoder(self.input_embedding(tokens)[None])[0]

    def __call__(self, tokens: mx.array, prompt_token: mx.array, prompt_feat: mx.array, embedding: mx.array,
                 noise: mx.array | None = None, *, finalize: bool = True, n_timesteps: int = 10,
                 key: mx.array | None = None) -> mx.array:
        """Mel ``[T_mel, 80]`` of ``tokens`` after the prompt (``prompt_feat [2 T_prompt, 80]``).

        ``finalize=False`` drops the last ``pre_lookahead_len`` tokens' frames (their lookahead
        has not arrived yet), as upstream's streaming path does. ``noise [T_total, 80]`` (prompt
        frames included) replaces the CFM's Gaussian draw.
        """
        a = self.a
        e = embedding.reshape(1, -1)
        e = e / mx.maximum(mx.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
        spks = self.spk_embed_affine_layer(e)
        h = self.encode(mx.concatenate([prompt_token.reshape(-1), tokens.reshape(-1)]))
        if not finalize:
            h = h[: h.shape[0] - a.pre_lookahead_len * a.token_mel_ratio]
        mu = self.encoder_proj(h)[None]
        n_prompt = prompt_feat.shape[0]
        cond = pad_time(prompt_feat[None].astype(mu.dtype), 0, mu.shape[1] - n_prompt)
        if noise is None:
            noise = mx.random.normal(mu.shape, key=key)
        else:
            noise = noise[None, : mu.shape[1]].astype(mu.dtype)
        mel = self.decoder(mu, spks, cond, noise, n_timesteps)
        return mel[0, n_prompt:]

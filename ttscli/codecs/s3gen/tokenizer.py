"""S3TokenizerV2 (``tokenizer.*``): 16 kHz speech -> 25 Hz speech tokens (FSQ, 3^8 = 6561 codes).

Two stride-2 convs over the 128-mel log spectrogram (100 -> 25 frames/s), pre-norm blocks whose
attention has rotary q/k (rotate-half, 64 dims, theta 1e4; q and k each scaled by d^-1/4) plus
an FSMN memory (a depthwise conv of width 31 over v, added to v), then FSQ: an 8-dim
projection, tanh, rounded to {-1, 0, 1}, read as base-3 digits. Channels-last, batch 1; one
pass covers references up to 30 s (upstream windows longer audio; Chatterbox never needs it).
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.nn.conv import Conv1d, DepthwiseConv1d

from .frontend import s3_log_mel


@dataclass
class S3TokenizerArgs:
    n_mels: int = 128
    n_audio_state: int = 1280
    n_audio_head: int = 20
    n_audio_layer: int = 6
    rope_dim: int = 64
    max_frames: int = 3000          # 30 s of mel frames, the longest one pass may see


def _rope_tables(t: int, dim: int, theta: float = 10000.0) -> tuple[mx.array, mx.array]:
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2)[: dim // 2].astype(np.float32) / dim))
    ang = np.outer(np.arange(t, dtype=np.float32), freqs).astype(np.float32)
    ang = np.concatenate([ang, ang], axis=-1)
    return mx.array(np.cos(ang)), mx.array(np.sin(ang))


def _rotate(x: mx.array, cos: mx.array, sin: mx.array) -> mx.array:
    half = x.shape[-1] // 2
    rot = mx.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


class FSMNMultiHeadAttention(nn.Module):
    def __init__(self, dim: int, heads: int, kernel_size: int = 31):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.fsmn_block = DepthwiseConv1d(dim, kernel_size, padding=(kernel_size - 1) // 2, bias=False)

    def __call__(self, x: mx.array, cos: mx.array, sin: mx.array) -> mx.array:
        t, d = x.shape
        h = self.heads
        q = self.query(x).reshape(t, h, -1)
        k = self.key(x).reshape(t, h, -1)
        v = self.value(x)
        memory = self.fsmn_block(v) + v
        q = _rotate(q, cos[:, None], sin[:, None])
        k = _rotate(k, cos[:, None], sin[:, None])
        scale = (d // h) ** -0.25
        q = (q * scale).transpose(1, 0, 2)
        k = (k * scale).transpose(1, 2, 0)
        w = mx.softmax(q @ k, axis=-1, precise=True)
        y = (w @ v.reshape(t, h, -1).transpose(1, 0, 2)).transpose(1, 0, 2).reshape(t, d)
        return self.out(y) + memory


class ResidualAttentionBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.attn = FSMNMultiHeadAttention(dim, heads)
        self.attn_ln = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = [nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)]
        self.mlp_ln = nn.LayerNorm(dim)

    def __call__(self, x: mx.array, cos: mx.array, sin: mx.array) -> mx.array:
        x = x + self.attn(self.attn_ln(x), cos, sin)
        return x + self.mlp[2](nn.gelu(self.mlp[0](self.mlp_ln(x))))


class AudioEncoderV2(nn.Module):
    def __init__(self, a: S3TokenizerArgs):
        super().__init__()
        self.conv1 = Conv1d(a.n_mels, a.n_audio_state, 3, stride=2, padding=1)
        self.conv2 = Conv1d(a.n_audio_state, a.n_audio_state, 3, stride=2, padding=1)
        self.blocks = [ResidualAttentionBlock(a.n_audio_state, a.n_audio_head) for _ in range(a.n_audio_layer)]
        self.rope_dim = a.rope_dim

    def __call__(self, mel: mx.array) -> mx.array:
        x = nn.gelu(self.conv2(nn.gelu(self.conv1(mel))))
        cos, sin = _rope_tables(x.shape[0], self.rope_dim)
        for block in self.blocks:
            x = block(x, cos, sin)
        return x


class FSQCodebook(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.project_down = nn.Linear(dim, 8)

    def __call__(self, x: mx.array) -> mx.array:
        h = mx.round(mx.tanh(self.project_down(x)) * 0.9990000128746033) + 1
        powers = mx.array([3 ** j for j in range(8)], dtype=mx.float32)
        return (h * powers).sum(axis=-1).astype(mx.int32)


class _Quantizer(nn.Module):
    """Upstream's ``quantizer._codebook``; MLX leaves underscored names out of the parameter
    tree, so it is ``codebook`` here and :func:`sanitize` renames the checkpoint's keys."""

    def __init__(self, dim: int):
        super().__init__()
        self.codebook = FSQCodebook(dim)


def sanitize(weights: dict) -> dict:
    return {k.replace("quantizer._codebook.", "quantizer.codebook."): v for k, v in weights.items()}


class S3TokenizerV2(nn.Module):
    def __init__(self, a: S3TokenizerArgs | None = None):
        super().__init__()
        self.a = a or S3TokenizerArgs()
        self.encoder = AudioEncoderV2(self.a)
        self.quantizer = _Quantizer(self.a.n_audio_state)

    def tokens_from_mel(self, mel: mx.array) -> mx.array:
        """``[T_mel, 128]`` -> int32 ``[ceil(T_mel / 4)]``."""
        return self.quantizer.codebook(self.encoder(mel))

    def __call__(self, wav16: np.ndarray, max_len: int | None = None) -> np.ndarray:
        """S3 tokens of a mono 16 kHz signal; ``max_len`` keeps the first ``4 max_len`` mel frames."""
        mel = s3_log_mel(wav16, self.a.n_mels)
        if max_len is not None:
            mel = mel[: 4 * max_len]
        if mel.shape[0] > self.a.max_frames:
            raise ValueError(f"reference too long for the S3 tokenizer ({mel.shape[0] / 100:.1f} s, at most 30 s)")
        return np.array(self.tokens_from_mel(mx.array(mel)))

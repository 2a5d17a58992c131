"""VITS text encoder: phoneme embedding + transformer with windowed relative-position attention.

One utterance at a time (batch 1, no padding), so the masks of the original are all ones and
are left out. Activations are channels-last ``[1, T, C]``.
"""
from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

from ttscli.nn.fastmath import on_cpu, softmax

from .conv import Conv1d


class LayerNorm(nn.Module):
    """LayerNorm over channels with the checkpoint's ``gamma`` / ``beta`` names."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.gamma = mx.ones((channels,))
        self.beta = mx.zeros((channels,))
        self.eps = eps

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.layer_norm(x, self.gamma, self.beta, self.eps)


def relative_to_absolute(r: mx.array, window: int) -> mx.array:
    """``[H, T, 2w+1]`` relative-position logits -> ``[H, T, T]`` with ``out[h, i, j] =
    r[h, i, j - i + w]`` inside the window, 0 outside.

    Padding each row with T zeros and reading the padded rows with a stride one shorter
    shifts row i by i places (a strided view, no gather): several times faster than summing a
    one-hot ``[T, T, 2w+1]`` band against the logits.
    """
    h, t, _ = r.shape
    width = t + 2 * window + 1
    p = mx.pad(r, [(0, 0), (0, 0), (0, t)])
    return mx.as_strided(p, (h, t, t), (t * width, width - 1, 1), window)


def absolute_to_relative(p: mx.array, window: int) -> mx.array:
    """The transpose of ``relative_to_absolute``: ``[H, T, T]`` -> ``[H, T, 2w+1]`` with
    ``out[h, i, r] = p[h, i, i + r - w]`` (0 outside), by the same padded, skewed view."""
    h, t, _ = p.shape
    width = t + 2 * window + 1
    q = mx.pad(p, [(0, 0), (0, 0), (window, window + 1)])
    return mx.as_strided(q, (h, t, 2 * window + 1), (t * width, width + 1, 1), 0)


class MultiHeadAttention(nn.Module):
    def __init__(self, channels: int, n_heads: int, window_size: int):
        super().__init__()
        self.n_heads = n_heads
        self.k_channels = channels // n_heads
        self.window_size = window_size
        self.conv_q = Conv1d(channels, channels, 1)
        self.conv_k = Conv1d(channels, channels, 1)
        self.conv_v = Conv1d(channels, channels, 1)
        self.conv_o = Conv1d(channels, channels, 1)
        # heads share the relative embeddings (leading dim 1)
        self.emb_rel_k = mx.zeros((1, 2 * window_size + 1, self.k_channels))
        self.emb_rel_v = mx.zeros((1, 2 * window_size + 1, self.k_channels))

    def __call__(self, x: mx.array) -> mx.array:
        _, t, c = x.shape
        h, d = self.n_heads, self.k_channels

        def heads(y):
            return y.reshape(t, h, d).transpose(1, 0, 2)          # [H, T, D]

        q = heads(self.conv_q(x)) / math.sqrt(d)
        k = heads(self.conv_k(x))
        v = heads(self.conv_v(x))
        scores = q @ k.transpose(0, 2, 1)                          # [H, T, T]
        rel_k = q @ self.emb_rel_k[0].T                            # [H, T, 2w+1]
        scores = scores + relative_to_absolute(rel_k, self.window_size)
        # MLX's CPU exp is a scalar loop: fastmath's softmax about halves this softmax's time
        p = softmax(scores) if on_cpu() else mx.softmax(scores, axis=-1, precise=True)
        out = p @ v
        rel_w = absolute_to_relative(p, self.window_size)          # [H, T, 2w+1]
        out = out + rel_w @ self.emb_rel_v[0]
        out = out.transpose(1, 0, 2).reshape(1, t, c)
        return self.conv_o(out)


class FFN(nn.Module):
    def __init__(self, channels: int, filter_channels: int, kernel_size: int):
        super().__init__()
        self.conv_1 = Conv1d(channels, filter_channels, kernel_size)
        self.conv_2 = Conv1d(filter_channels, channels, kernel_size)

    def __call__(self, x: mx.array) -> mx.array:
        # conv_1 (192 -> 768) as accumulated per-tap GEMMs (a little faster per FFN);
        # conv_2 (768 -> 192) keeps the output-side form (no faster that way)
        return self.conv_2(nn.relu(self.conv_1.accumulate(x[0]))[None])


class Encoder(nn.Module):
    def __init__(self, hidden: int, filter_channels: int, n_heads: int, n_layers: int,
                 kernel_size: int, window_size: int):
        super().__init__()
        self.window_size = window_size
        self.attn_layers = [MultiHeadAttention(hidden, n_heads, window_size) for _ in range(n_layers)]
        self.norm_layers_1 = [LayerNorm(hidden) for _ in range(n_layers)]
        self.ffn_layers = [FFN(hidden, filter_channels, kernel_size) for _ in range(n_layers)]
        self.norm_layers_2 = [LayerNorm(hidden) for _ in range(n_layers)]

    def __call__(self, x: mx.array) -> mx.array:
        for attn, n1, ffn, n2 in zip(self.attn_layers, self.norm_layers_1, self.ffn_layers,
                                     self.norm_layers_2):
            x = n1(x + attn(x))
            x = n2(x + ffn(x))
        return x


class TextEncoder(nn.Module):
    def __init__(self, n_vocab: int, out_channels: int, hidden: int, filter_channels: int,
                 n_heads: int, n_layers: int, kernel_size: int, window_size: int):
        super().__init__()
        self.hidden = hidden
        self.out_channels = out_channels
        self.emb = nn.Embedding(n_vocab, hidden)
        self.encoder = Encoder(hidden, filter_channels, n_heads, n_layers, kernel_size, window_size)
        self.proj = Conv1d(hidden, 2 * out_channels, 1)

    def __call__(self, ids: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """``ids [1, T]`` -> hidden ``x``, prior mean ``m_p`` and log-std ``logs_p``, all ``[1, T, C]``."""
        x = self.emb(ids) * math.sqrt(self.hidden)
        x = self.encoder(x)
        stats = self.proj(x)
        return x, stats[..., : self.out_channels], stats[..., self.out_channels:]

"""Kokoro's text side: LSTMs, adaptive norms, the text encoder and the prosody predictor.

Batch 1, channels-last ``[T, C]`` throughout (the checkpoint's convs are channels-first; the
shared conv module keeps their PyTorch weight layout). Parameter names are hexgrad's state-dict
names, so every checkpoint layout converts to one set of names (convert.py).
"""
from __future__ import annotations

import math

import mlx.core as mx
from mlx import nn

from ttscli.nn.conv import Conv1d, pad_time
from ttscli.nn.lstm import LSTM

RSQRT2 = 1.0 / math.sqrt(2.0)


def leaky_relu(x: mx.array, slope: float) -> mx.array:
    return mx.maximum(x, slope * x)


class BiLSTM(LSTM):
    """``nn.LSTM(in, H, bidirectional=True, batch_first=True)``, one layer: every LSTM of the text side."""

    def __init__(self, input_size: int, hidden: int):
        super().__init__(input_size, hidden, bidirectional=True)


class Linear(nn.Module):
    """``nn.Linear`` with the PyTorch weight ``[out, in]``."""

    def __init__(self, din: int, dout: int, bias: bool = True):
        super().__init__()
        self.weight = mx.zeros((dout, din))
        if bias:
            self.bias = mx.zeros((dout,))

    def __call__(self, x: mx.array) -> mx.array:
        if "bias" in self:
            return mx.addmm(self.bias, x, self.weight.T)
        return x @ self.weight.T


class _StyleNorm(nn.Module):
    """A norm without affine parameters (:meth:`norm`), then ``(1 + gamma) x + beta`` with gamma
    and beta projected from the style by ``fc``."""

    def __init__(self, style_dim: int, channels: int, eps: float = 1e-5):
        super().__init__()
        self.channels, self.eps = channels, eps
        self.fc = Linear(style_dim, 2 * channels)

    def norm(self, x: mx.array) -> mx.array:
        raise NotImplementedError

    def __call__(self, x: mx.array, s: mx.array) -> mx.array:
        h = self.fc(s)
        gamma, beta = h[: self.channels], h[self.channels:]
        return (1 + gamma) * self.norm(x) + beta


class AdaLayerNorm(_StyleNorm):
    """LayerNorm over channels (no affine, eps 1e-5), then the style's scale and shift."""

    def norm(self, x: mx.array) -> mx.array:
        return mx.fast.layer_norm(x, None, None, self.eps)


class AdaIN1d(_StyleNorm):
    """InstanceNorm over time (biased variance, eps 1e-5, no affine: hexgrad's checkpoint has none),
    then the style's scale and shift."""

    def norm(self, x: mx.array) -> mx.array:
        mean = mx.mean(x, axis=0, keepdims=True)
        var = mx.mean(mx.square(x - mean), axis=0, keepdims=True)
        return (x - mean) * mx.rsqrt(var + self.eps)


class UpsamplePool(nn.Module):
    """The ``up`` blocks' pool: depthwise ``ConvTranspose1d(C, C, 3, stride 2, padding 1,
    output_padding 1, groups C)``; weight ``[C, 1, 3]``. T frames -> 2T:
    ``y[2u] = w1 x[u]``, ``y[2u+1] = w2 x[u] + w0 x[u+1]`` (x[T] = 0), plus the bias."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = mx.zeros((channels, 1, 3))
        self.bias = mx.zeros((channels,))

    def __call__(self, x: mx.array) -> mx.array:
        w = self.weight[:, 0, :]
        nxt = pad_time(x[1:], 0, 1)
        even = x * w[:, 1]
        odd = x * w[:, 2] + nxt * w[:, 0]
        return mx.stack([even, odd], axis=1).reshape(-1, x.shape[-1]) + self.bias


class AdainResBlk1d(nn.Module):
    def __init__(self, dim_in: int, dim_out: int, style_dim: int, upsample: bool = False):
        super().__init__()
        self.upsample = upsample
        self.conv1 = Conv1d(dim_in, dim_out, 3, padding=1)
        self.conv2 = Conv1d(dim_out, dim_out, 3, padding=1)
        self.norm1 = AdaIN1d(style_dim, dim_in)
        self.norm2 = AdaIN1d(style_dim, dim_out)
        if dim_in != dim_out:
            self.conv1x1 = Conv1d(dim_in, dim_out, 1, bias=False)
        if upsample:
            self.pool = UpsamplePool(dim_in)

    def __call__(self, x: mx.array, s: mx.array) -> mx.array:
        r = leaky_relu(self.norm1(x, s), 0.2)
        if self.upsample:
            r = self.pool(r)
        r = self.conv1(r)
        r = self.conv2(leaky_relu(self.norm2(r, s), 0.2))
        sc = mx.repeat(x, 2, axis=0) if self.upsample else x
        if "conv1x1" in self:
            sc = self.conv1x1(sc)
        return (r + sc) * RSQRT2


class LayerNormGB(nn.Module):
    """StyleTTS2's channel LayerNorm with parameters named ``gamma``/``beta``."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = mx.ones((channels,))
        self.beta = mx.zeros((channels,))

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.layer_norm(x, self.gamma, self.beta, self.eps)


class TextEncoder(nn.Module):
    def __init__(self, channels: int, kernel_size: int, depth: int, n_symbols: int):
        super().__init__()
        self.embedding = nn.Embedding(n_symbols, channels)
        # cnn.k = [weight-normed conv, LayerNorm] as in the checkpoint (cnn.k.0 / cnn.k.1)
        self.cnn = [[Conv1d(channels, channels, kernel_size, padding=(kernel_size - 1) // 2), LayerNormGB(channels)]
                    for _ in range(depth)]
        self.lstm = BiLSTM(channels, channels // 2)

    def __call__(self, tokens: mx.array) -> mx.array:
        x = self.embedding(tokens)
        for conv, norm in self.cnn:
            x = leaky_relu(norm(conv(x)), 0.2)
        return self.lstm(x)


class DurationEncoder(nn.Module):
    """``lstms``: BiLSTM, AdaLayerNorm, BiLSTM, ... ; the style is appended after each norm."""

    def __init__(self, style_dim: int, d_model: int, nlayers: int):
        super().__init__()
        self.lstms = []
        for _ in range(nlayers):
            self.lstms.append(BiLSTM(d_model + style_dim, d_model // 2))
            self.lstms.append(AdaLayerNorm(style_dim, d_model))

    def __call__(self, x: mx.array, s: mx.array) -> mx.array:
        srow = mx.broadcast_to(s, (x.shape[0], s.shape[-1]))
        x = mx.concatenate([x, srow], axis=-1)
        for block in self.lstms:
            if isinstance(block, AdaLayerNorm):
                x = mx.concatenate([block(x, s), srow], axis=-1)
            else:
                x = block(x)
        return x


class DurationProj(nn.Module):
    def __init__(self, din: int, dout: int):
        super().__init__()
        self.linear_layer = Linear(din, dout)

    def __call__(self, x: mx.array) -> mx.array:
        return self.linear_layer(x)


class ProsodyPredictor(nn.Module):
    def __init__(self, style_dim: int, d_hid: int, nlayers: int, max_dur: int):
        super().__init__()
        self.text_encoder = DurationEncoder(style_dim, d_hid, nlayers)
        self.lstm = BiLSTM(d_hid + style_dim, d_hid // 2)
        self.duration_proj = DurationProj(d_hid, max_dur)
        self.shared = BiLSTM(d_hid + style_dim, d_hid // 2)
        half = d_hid // 2
        self.F0 = [AdainResBlk1d(d_hid, d_hid, style_dim), AdainResBlk1d(d_hid, half, style_dim, upsample=True),
                   AdainResBlk1d(half, half, style_dim)]
        self.N = [AdainResBlk1d(d_hid, d_hid, style_dim), AdainResBlk1d(d_hid, half, style_dim, upsample=True),
                  AdainResBlk1d(half, half, style_dim)]
        self.F0_proj = Conv1d(half, 1, 1)
        self.N_proj = Conv1d(half, 1, 1)

    def durations(self, d_en: mx.array, s: mx.array, speed: float) -> tuple[mx.array, mx.array]:
        """(d [T, d_hid + style], frames per token [T] as float) — rounded half to even as
        torch.round / ONNX Round, at least one frame."""
        d = self.text_encoder(d_en, s)
        logits = self.duration_proj(self.lstm(d))
        dur = mx.sum(mx.sigmoid(logits), axis=-1) / speed
        return d, mx.maximum(mx.round(dur), 1.0)

    def f0_n(self, en: mx.array, s: mx.array) -> tuple[mx.array, mx.array]:
        """``en [F, d_hid + style]`` -> F0 (Hz) and N, each ``[2F]``."""
        x = self.shared(en)
        f0, n = x, x
        for block in self.F0:
            f0 = block(f0, s)
        for block in self.N:
            n = block(n, s)
        return self.F0_proj(f0)[:, 0], self.N_proj(n)[:, 0]

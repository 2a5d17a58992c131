"""CAMPPlus (``speaker_encoder.*``): the 192-d x-vector S3Gen is conditioned on, and its Kaldi fbank.

3D-Speaker's CAM++: a 2-D conv front (``FCM``: conv, two stride-2 residual stages, a stride
(2, 1) conv) over 80 fbank bins, a stride-2 TDNN, three densely connected CAM-TDNN blocks
(each layer's output is gated by a context-aware mask from utterance- and 100-frame-segment
means) with transition layers, statistics pooling (mean, unbiased std) and a dense layer with
a non-affine BatchNorm. Eval-mode BatchNorm everywhere (running statistics).

Time-major ``[T, C]``, batch 1. 1-D convs go through ``ttscli.nn.conv``; the FCM's 2-D convs
are ``mx.conv2d`` (NHWC, height = fbank bin, width = frame).
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.nn.conv import Conv1d

# ----------------------------------------------------------------------------- Kaldi fbank


def _kaldi_mel_banks(n_bins: int, n_fft: int, sr: float, low: float, high: float) -> np.ndarray:
    """``[n_bins, n_fft//2 + 1]`` triangles on Kaldi's mel scale (1127 ln(1 + f/700)),
    the Nyquist column zero, as torchaudio.compliance.kaldi builds them."""
    def mel(f):
        return 1127.0 * np.log(1.0 + np.asarray(f, np.float64) / 700.0)

    half = n_fft // 2
    width = sr / n_fft
    lo, hi = mel(low), mel(high)
    delta = (hi - lo) / (n_bins + 1)
    b = np.arange(n_bins, dtype=np.float64)[:, None]
    left, center, right = lo + b * delta, lo + (b + 1) * delta, lo + (b + 2) * delta
    m = mel(width * np.arange(half, dtype=np.float64))[None, :]
    up = (m - left) / (center - left)
    down = (right - m) / (right - center)
    banks = np.maximum(0.0, np.minimum(up, down))
    return np.pad(banks, ((0, 0), (0, 1))).astype(np.float32)


def kaldi_fbank(wav16: np.ndarray, n_bins: int = 80, sr: int = 16000) -> np.ndarray:
    """``torchaudio.compliance.kaldi.fbank(wav[None], num_mel_bins=80)`` with its defaults:
    25/10 ms frames (snip edges), DC removal, pre-emphasis 0.97, Povey window, 512-point power
    spectrum, bins from 20 Hz to Nyquist, log floored at float32 epsilon. ``[frames, n_bins]``."""
    x = np.asarray(wav16, np.float32)
    flen, shift, n_fft = int(sr * 0.025), int(sr * 0.010), 512
    if x.shape[0] < flen:
        raise ValueError(f"reference too short for the speaker encoder ({x.shape[0]} samples at {sr} Hz)")
    n = 1 + (x.shape[0] - flen) // shift
    frames = np.lib.stride_tricks.sliding_window_view(x, flen)[::shift][:n].astype(np.float64)
    frames = frames - frames.mean(axis=1, keepdims=True)
    prev = np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    frames = frames - 0.97 * prev
    win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(flen) / (flen - 1))) ** 0.85
    spec = np.fft.rfft(frames * win, n=n_fft, axis=1)
    power = (spec.real ** 2 + spec.imag ** 2).astype(np.float32)
    mel = power @ _kaldi_mel_banks(n_bins, n_fft, float(sr), 20.0, sr / 2).T
    return np.log(np.maximum(mel, np.finfo(np.float32).eps)).astype(np.float32)


# ----------------------------------------------------------------------------- layers


class BatchNorm(nn.Module):
    """Eval-mode BatchNorm over the last axis, with PyTorch's buffers as named in the checkpoint."""

    def __init__(self, channels: int, affine: bool = True, eps: float = 1e-5):
        super().__init__()
        if affine:
            self.weight = mx.ones((channels,))
            self.bias = mx.zeros((channels,))
        self.running_mean = mx.zeros((channels,))
        self.running_var = mx.ones((channels,))
        self.num_batches_tracked = mx.array(0, dtype=mx.int64)
        self.eps = eps

    def __call__(self, x: mx.array) -> mx.array:
        y = (x - self.running_mean) * mx.rsqrt(self.running_var + self.eps)
        return y * self.weight + self.bias if "weight" in self else y


class _BNReLU(nn.Module):
    """``get_nonlinear("batchnorm-relu")``: key ``batchnorm``."""

    def __init__(self, channels: int, affine: bool = True, relu: bool = True):
        super().__init__()
        self.batchnorm = BatchNorm(channels, affine)
        self.relu = relu

    def __call__(self, x: mx.array) -> mx.array:
        y = self.batchnorm(x)
        return nn.relu(y) if self.relu else y


class Conv2d(nn.Module):
    """PyTorch ``Conv2d`` (no bias), weight ``[out, in, kh, kw]``, on NHWC input."""

    def __init__(self, cin: int, cout: int, k: int, stride=(1, 1), padding: int = 0):
        super().__init__()
        self.weight = mx.zeros((cout, cin, k, k))
        self.stride, self.padding = stride, padding

    def __call__(self, x: mx.array) -> mx.array:
        return mx.conv2d(x, self.weight.transpose(0, 2, 3, 1), stride=self.stride, padding=self.padding)


class BasicResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = Conv2d(cin, cout, 3, (stride, 1), 1)
        self.bn1 = BatchNorm(cout)
        self.conv2 = Conv2d(cout, cout, 3, (1, 1), 1)
        self.bn2 = BatchNorm(cout)
        if stride != 1 or cin != cout:
            self.shortcut = [Conv2d(cin, cout, 1, (stride, 1)), BatchNorm(cout)]

    def __call__(self, x: mx.array) -> mx.array:
        y = self.bn2(self.conv2(nn.relu(self.bn1(self.conv1(x)))))
        s = self.shortcut[1](self.shortcut[0](x)) if "shortcut" in self else x
        return nn.relu(y + s)


class FCM(nn.Module):
    def __init__(self, m: int = 32, feat_dim: int = 80):
        super().__init__()
        self.conv1 = Conv2d(1, m, 3, (1, 1), 1)
        self.bn1 = BatchNorm(m)
        self.layer1 = [BasicResBlock(m, m, 2), BasicResBlock(m, m, 1)]
        self.layer2 = [BasicResBlock(m, m, 2), BasicResBlock(m, m, 1)]
        self.conv2 = Conv2d(m, m, 3, (2, 1), 1)
        self.bn2 = BatchNorm(m)
        self.out_channels = m * (feat_dim // 8)

    def __call__(self, feats: mx.array) -> mx.array:
        """``[T, 80]`` -> ``[T, 32 * 10]`` (channel-major, as upstream's reshape)."""
        x = feats.T[None, :, :, None]                                  # [1, F, T, 1]
        x = nn.relu(self.bn1(self.conv1(x)))
        for blk in (*self.layer1, *self.layer2):
            x = blk(x)
        x = nn.relu(self.bn2(self.conv2(x)))                            # [1, F/8, T, C]
        _, f, t, c = x.shape
        return x[0].transpose(1, 2, 0).reshape(t, c * f)


class TDNNLayer(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, dilation: int = 1):
        super().__init__()
        self.linear = Conv1d(cin, cout, k, stride=stride, dilation=dilation,
                             padding=(k - 1) // 2 * dilation, bias=False)
        self.nonlinear = _BNReLU(cout)

    def __call__(self, x: mx.array) -> mx.array:
        return self.nonlinear(self.linear(x))


def _segment_means(x: mx.array, seg: int = 100) -> mx.array:
    """Each frame gets the mean of its ``seg``-frame segment (the last one partial), as
    ``avg_pool1d(ceil_mode=True)`` then repeat."""
    t = x.shape[0]
    n = -(-t // seg)
    pad = n * seg - t
    sums = mx.pad(x, [(0, pad), (0, 0)]).reshape(n, seg, -1).sum(axis=1)
    counts = mx.array(np.minimum(seg, t - seg * np.arange(n)).astype(np.float32))[:, None]
    return mx.repeat(sums / counts, seg, axis=0)[:t]


class CAMLayer(nn.Module):
    def __init__(self, cbn: int, cout: int, k: int, dilation: int, reduction: int = 2):
        super().__init__()
        self.linear_local = Conv1d(cbn, cout, k, dilation=dilation, padding=(k - 1) // 2 * dilation, bias=False)
        self.linear1 = Conv1d(cbn, cbn // reduction, 1)
        self.linear2 = Conv1d(cbn // reduction, cout, 1)

    def __call__(self, x: mx.array) -> mx.array:
        y = self.linear_local(x)
        context = x.mean(axis=0, keepdims=True) + _segment_means(x)
        m = mx.sigmoid(self.linear2(nn.relu(self.linear1(context))))
        return y * m


class CAMDenseTDNNLayer(nn.Module):
    def __init__(self, cin: int, cout: int, cbn: int, k: int, dilation: int):
        super().__init__()
        self.nonlinear1 = _BNReLU(cin)
        self.linear1 = Conv1d(cin, cbn, 1, bias=False)
        self.nonlinear2 = _BNReLU(cbn)
        self.cam_layer = CAMLayer(cbn, cout, k, dilation)

    def __call__(self, x: mx.array) -> mx.array:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class CAMDenseTDNNBlock(nn.Module):
    def __init__(self, n: int, cin: int, growth: int, cbn: int, k: int, dilation: int):
        super().__init__()
        self.n = n
        for i in range(n):
            setattr(self, f"tdnnd{i + 1}", CAMDenseTDNNLayer(cin + i * growth, growth, cbn, k, dilation))

    def __call__(self, x: mx.array) -> mx.array:
        for i in range(self.n):
            x = mx.concatenate([x, getattr(self, f"tdnnd{i + 1}")(x)], axis=-1)
        return x


class TransitLayer(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.nonlinear = _BNReLU(cin)
        self.linear = Conv1d(cin, cout, 1, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.linear(self.nonlinear(x))


class DenseLayer(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.linear = Conv1d(cin, cout, 1, bias=False)
        self.nonlinear = _BNReLU(cout, affine=False, relu=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.nonlinear(self.linear(x))


@dataclass
class CAMPPlusArgs:
    feat_dim: int = 80
    embedding_size: int = 192
    growth_rate: int = 32
    bn_size: int = 4
    init_channels: int = 128
    layers: tuple[int, ...] = (12, 24, 16)
    dilations: tuple[int, ...] = (1, 2, 2)


class _XVector(nn.Module):
    def __init__(self, a: CAMPPlusArgs, cin: int):
        super().__init__()
        self.tdnn = TDNNLayer(cin, a.init_channels, 5, stride=2)
        ch = a.init_channels
        self.n_blocks = len(a.layers)
        for i, (n, d) in enumerate(zip(a.layers, a.dilations)):
            setattr(self, f"block{i + 1}", CAMDenseTDNNBlock(n, ch, a.growth_rate, a.bn_size * a.growth_rate, 3, d))
            ch += n * a.growth_rate
            setattr(self, f"transit{i + 1}", TransitLayer(ch, ch // 2))
            ch //= 2
        self.out_nonlinear = _BNReLU(ch)
        self.dense = DenseLayer(2 * ch, a.embedding_size)

    def __call__(self, x: mx.array) -> mx.array:
        x = self.tdnn(x)
        for i in range(self.n_blocks):
            x = getattr(self, f"transit{i + 1}")(getattr(self, f"block{i + 1}")(x))
        x = self.out_nonlinear(x)
        t = x.shape[0]
        mean = x.mean(axis=0)
        std = mx.sqrt(((x - mean) ** 2).sum(axis=0) / max(t - 1, 1))
        return self.dense(mx.concatenate([mean, std])[None])[0]


class CAMPPlus(nn.Module):
    def __init__(self, a: CAMPPlusArgs | None = None):
        super().__init__()
        a = a or CAMPPlusArgs()
        self.head = FCM(feat_dim=a.feat_dim)
        self.xvector = _XVector(a, self.head.out_channels)

    def __call__(self, feats: mx.array) -> mx.array:
        """Mean-normalised fbank ``[T, 80]`` -> x-vector ``[192]``."""
        return self.xvector(self.head(feats))

    def embed(self, wav16: np.ndarray) -> np.ndarray:
        """x-vector of a mono 16 kHz signal, as upstream ``CAMPPlus.inference``."""
        f = kaldi_fbank(wav16)
        f = f - f.mean(axis=0, keepdims=True)
        return np.array(self(mx.array(f)), np.float32)


def campplus_args(w: dict) -> CAMPPlusArgs:
    """Sizes from the tensors (``w`` without the ``speaker_encoder.`` prefix)."""
    init = w["xvector.tdnn.linear.weight"].shape[0]
    growth = w["xvector.block1.tdnnd1.cam_layer.linear_local.weight"].shape[0]
    cbn = w["xvector.block1.tdnnd1.linear1.weight"].shape[0]
    layers = []
    for b in range(1, 10):
        pre = f"xvector.block{b}.tdnnd"
        n = len({k[len(pre):].split(".")[0] for k in w if k.startswith(pre)})
        if not n:
            break
        layers.append(n)
    # the dilations (1, 2, 2) are in no shape; upstream hard-codes three blocks with them
    return CAMPPlusArgs(embedding_size=w["xvector.dense.linear.weight"].shape[0], growth_rate=growth,
                        bn_size=cbn // growth, init_channels=init, layers=tuple(layers))

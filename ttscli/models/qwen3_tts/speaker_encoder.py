"""Qwen3-TTS speaker encoder (Base models): 24 kHz log-mel -> ECAPA-TDNN x-vector of size enc_dim.

Parameter names follow the checkpoint keys after the ``speaker_encoder.`` prefix of the root
model.safetensors. Activations are channels-last ``[B, T, C]``; conv weights keep the checkpoint's
PyTorch layout ``[out, in, k]`` (ttscli.nn.conv's Conv1d derives its GEMM layout). Every conv is
computed as one matmul over stacked taps, because MLX's CPU conv1d takes a slow generic path for
dilated kernels and the "same" reflect padding is not a conv1d option anyway.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from ttscli import dsp
from ttscli.checkpoint import load_strict, read_component
from ttscli.config import BaseArgs, read_json
from ttscli.errors import AudioInputError, CheckpointError
from ttscli.nn import conv
from ttscli.nn.conv import pad_time

# Fixed in upstream extract_speaker_embedding (not read from the config).
SAMPLE_RATE = 24000
N_FFT = 1024
HOP = 256
WIN = 1024
N_MELS = 128
FMIN = 0.0
FMAX = 12000.0

PREFIX = "speaker_encoder."


@dataclass
class SpeakerEncoderConfig(BaseArgs):
    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: list[int] = field(default_factory=lambda: [512, 512, 512, 512, 1536])
    enc_kernel_sizes: list[int] = field(default_factory=lambda: [5, 3, 3, 3, 1])
    enc_dilations: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 1])
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    def __post_init__(self):
        n = len(self.enc_channels)
        if len(self.enc_kernel_sizes) != n or len(self.enc_dilations) != n or n < 3:
            raise CheckpointError(
                "speaker_encoder_config: enc_channels, enc_kernel_sizes and enc_dilations "
                "must have the same length (>= 3)"
            )


# ----------------------------------------------------------------------------- features

def mel_filterbank(sr: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS,
                   fmin: float = FMIN, fmax: float = FMAX) -> np.ndarray:
    """Slaney-scale, Slaney-normalised triangular filters ``[n_mels, n_fft//2 + 1]`` (float32)."""
    return dsp.mel_filterbank(sr, n_fft, n_mels, fmin, fmax)


_FEATURE_CONSTS: dict = {}


def _feature_consts():
    if not _FEATURE_CONSTS:
        n = np.arange(WIN, dtype=np.float64)
        _FEATURE_CONSTS["window"] = mx.array((0.5 - 0.5 * np.cos(2 * np.pi * n / WIN)).astype(np.float32))
        _FEATURE_CONSTS["mel_t"] = mx.array(mel_filterbank().T.copy())  # [n_fft//2+1, n_mels]
    return _FEATURE_CONSTS["window"], _FEATURE_CONSTS["mel_t"]


def mel_spectrogram(wav_24k) -> mx.array:
    """Log-mel features ``[frames, 128]`` of a mono 24 kHz waveform, as upstream computes them.

    Reflect-pad (n_fft - hop) / 2 on both sides, frame without centring, periodic Hann window,
    magnitude sqrt(re^2 + im^2 + 1e-9), Slaney mel, natural log clamped at 1e-5.
    """
    y = mx.array(np.asarray(wav_24k, dtype=np.float32)) if not isinstance(wav_24k, mx.array) else wav_24k
    y = y.astype(mx.float32).reshape(-1)
    pad = (N_FFT - HOP) // 2
    y = pad_time(y, pad, pad, "reflect", axis=0)
    n_frames = (y.shape[0] - N_FFT) // HOP + 1
    if n_frames < 1:
        raise ValueError("reference audio is too short for the speaker encoder")
    window, mel_t = _feature_consts()
    idx = mx.arange(n_frames)[:, None] * HOP + mx.arange(N_FFT)[None, :]
    spec = mx.fft.rfft(y[idx] * window, axis=-1)
    mag = mx.sqrt(mx.real(spec) ** 2 + mx.imag(spec) ** 2 + 1e-9)
    return mx.log(mx.maximum(mag @ mel_t, 1e-5))


# ----------------------------------------------------------------------------- layers

class Conv1d(conv.Conv1d):
    """Conv1d with torch's ``padding="same", padding_mode="reflect"``, always one GEMM over stacked
    taps (a few hundred frames of 512 channels: weight-bound)."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int = 1, dilation: int = 1):
        super().__init__(in_ch, out_ch, kernel_size, dilation=dilation, padding="same", pad_mode="reflect")
        scale = 1.0 / math.sqrt(in_ch * kernel_size)
        self.weight = mx.random.uniform(-scale, scale, (out_ch, in_ch, kernel_size))

    def __call__(self, x: mx.array) -> mx.array:
        return self.im2col(x)


class TimeDelayNetBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, dilation: int):
        super().__init__()
        self.conv = Conv1d(in_ch, out_ch, kernel_size, dilation)

    def __call__(self, x: mx.array) -> mx.array:
        return nn.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    def __init__(self, channels: int, scale: int, kernel_size: int, dilation: int):
        super().__init__()
        self.scale = scale
        self.blocks = [TimeDelayNetBlock(channels // scale, channels // scale, kernel_size, dilation)
                       for _ in range(scale - 1)]

    def __call__(self, x: mx.array) -> mx.array:
        parts = mx.split(x, self.scale, axis=-1)
        outs = [parts[0]]
        y = None
        for i, block in enumerate(self.blocks, start=1):
            y = block(parts[i] if i == 1 else parts[i] + y)
            outs.append(y)
        return mx.concatenate(outs, axis=-1)


class SqueezeExcitationBlock(nn.Module):
    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = Conv1d(channels, se_channels)
        self.conv2 = Conv1d(se_channels, channels)

    def __call__(self, x: mx.array) -> mx.array:
        s = mx.mean(x, axis=1, keepdims=True)
        return x * mx.sigmoid(self.conv2(nn.relu(self.conv1(s))))


class SqueezeExcitationRes2NetBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, scale: int, se_channels: int, kernel_size: int, dilation: int):
        super().__init__()
        self.tdnn1 = TimeDelayNetBlock(in_ch, out_ch, 1, 1)
        self.res2net_block = Res2NetBlock(out_ch, scale, kernel_size, dilation)
        self.tdnn2 = TimeDelayNetBlock(out_ch, out_ch, 1, 1)
        self.se_block = SqueezeExcitationBlock(out_ch, se_channels)

    def __call__(self, x: mx.array) -> mx.array:
        return self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x)))) + x


def _stats(x: mx.array, w: mx.array) -> tuple[mx.array, mx.array]:
    """Weighted mean and std over time; ``w`` sums to 1 over axis 1."""
    mean = mx.sum(w * x, axis=1, keepdims=True)
    var = mx.sum(w * (x - mean) ** 2, axis=1, keepdims=True)
    return mean, mx.sqrt(mx.maximum(var, 1e-12))


class AttentiveStatisticsPooling(nn.Module):
    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TimeDelayNetBlock(channels * 3, attention_channels, 1, 1)
        self.conv = Conv1d(attention_channels, channels)

    def __call__(self, x: mx.array) -> mx.array:
        c, t = x.shape[-1], x.shape[1]
        mean, std = _stats(x, mx.full((1, t, 1), 1.0 / t))
        # The attention input is concat[x, mean, std] with mean/std constant over time: apply the
        # three column blocks of the 1x1 conv separately instead of materialising [B, T, 3C].
        w = self.tdnn.conv.weight.reshape(self.tdnn.conv.weight.shape[0], -1)
        glob = mean @ w[:, c:2 * c].T + std @ w[:, 2 * c:].T + self.tdnn.conv.bias
        a = nn.relu(x @ w[:, :c].T + glob)
        a = mx.softmax(self.conv(mx.tanh(a)), axis=1)
        mean, std = _stats(x, a)
        return mx.concatenate([mean, std], axis=-1)  # [B, 1, 2C]


class SpeakerEncoder(nn.Module):
    def __init__(self, config: SpeakerEncoderConfig):
        super().__init__()
        self.config = config
        ch, ks, dil = config.enc_channels, config.enc_kernel_sizes, config.enc_dilations
        self.blocks = [TimeDelayNetBlock(config.mel_dim, ch[0], ks[0], dil[0])]
        for i in range(1, len(ch) - 1):
            self.blocks.append(SqueezeExcitationRes2NetBlock(
                ch[i - 1], ch[i], config.enc_res2net_scale, config.enc_se_channels, ks[i], dil[i]))
        self.mfa = TimeDelayNetBlock(sum(ch[1:-1]), ch[-1], ks[-1], dil[-1])
        self.asp = AttentiveStatisticsPooling(ch[-1], config.enc_attention_channels)
        self.fc = Conv1d(ch[-1] * 2, config.enc_dim)

    def __call__(self, mels: mx.array) -> mx.array:
        """``mels [B, T, mel_dim]`` -> x-vectors ``[B, enc_dim]``."""
        x = mels
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.mfa(mx.concatenate(outs[1:], axis=-1))
        return self.fc(self.asp(x))[:, 0]

    def embed(self, wav_24k) -> mx.array:
        """Speaker embedding ``[enc_dim]`` (float32) of a mono 24 kHz waveform."""
        n = int(np.prod(wav_24k.shape))
        # reflect padding needs more frames than the widest conv's half-span
        cfg = self.config
        min_frames = max((k - 1) * d // 2 for k, d in zip(cfg.enc_kernel_sizes, cfg.enc_dilations)) + 1
        min_samples = (min_frames - 1) * HOP + N_FFT - 2 * ((N_FFT - HOP) // 2)
        if n < max(min_samples, (N_FFT - HOP) // 2 + 1):
            raise AudioInputError(f"reference audio is too short for the speaker encoder ({n} samples at 24 kHz; "
                                  f"need at least {max(min_samples, (N_FFT - HOP) // 2 + 1)})")
        return self(mel_spectrogram(wav_24k)[None])[0]


def load_speaker_encoder(path: Path, dtype="float32") -> SpeakerEncoder:
    """Speaker encoder from a Qwen3-TTS Base folder (config.json + model.safetensors, ``speaker_encoder.*``)."""
    path = Path(path)
    config = read_json(path / "config.json")
    if "speaker_encoder_config" not in config:
        raise CheckpointError(f"{path / 'config.json'} has no speaker_encoder_config: voice cloning needs a Base model")
    model = SpeakerEncoder(SpeakerEncoderConfig.from_dict(
        config["speaker_encoder_config"], source=str(path / "config.json"), where="speaker_encoder_config."))
    weights, source = read_component(path, PREFIX)
    return load_strict(model, weights, dtype=dtype, source=source, where=PREFIX,
                       hint="is this a Qwen3-TTS Base checkpoint?")


def build_random_speaker_encoder(enc_dim: int = 1024, seed: int = 0, config: SpeakerEncoderConfig | None = None
                                 ) -> SpeakerEncoder:
    """Speaker encoder at the real dimensions (or ``config``) with deterministic random weights, for bench."""
    cfg = config or SpeakerEncoderConfig(enc_dim=enc_dim)
    mx.random.seed(seed)
    model = SpeakerEncoder(cfg)
    params = []
    for key, value in tree_flatten(model.parameters()):
        # uniform with the variance of a fan-in-scaled normal (cheaper to draw on the CPU)
        std = math.sqrt(2.0 / (value.shape[1] * value.shape[2])) if key.endswith("weight") else 0.1
        params.append((key, mx.random.uniform(-std * math.sqrt(3.0), std * math.sqrt(3.0), value.shape)))
    return load_strict(model, dict(params), source="random weights")

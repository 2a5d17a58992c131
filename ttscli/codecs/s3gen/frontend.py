"""The reference-audio front ends S3Gen needs, numerically as upstream computes them.

- :func:`resample`: torchaudio's ``Resample`` (windowed-sinc, Hann window, 6 zero crossings,
  rolloff 0.99), which upstream's ``embed_ref`` uses for 24 kHz -> 16 kHz.
- :func:`s3_log_mel`: the S3 tokenizer's Whisper-style log-mel (16 kHz, n_fft 400, hop 160,
  128 librosa mels, log10, 8-decade floor, last frame dropped).
- :func:`matcha_mel`: Matcha-TTS's log-mel at any rate and size (IndexTTS2's reference mel: 22.05 kHz,
  n_fft 1024, hop 256); :func:`prompt_mel`: Matcha's mel of the 24 kHz reference (n_fft 1920, hop 480, reflect pad
  720, magnitude, 80 librosa mels up to 8 kHz, natural log) = ``prompt_feat``.
- :func:`mel_filters`: librosa's Slaney mel filterbank (librosa itself is not a dependency).

These run once per reference on short signals, in numpy (float64 FFTs, float32 results).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ttscli import dsp

# ----------------------------------------------------------------------------- resampling


@lru_cache(maxsize=16)
def _sinc_kernel(orig: int, new: int, width_zc: int = 6, rolloff: float = 0.99) -> tuple[np.ndarray, int]:
    """``[new, 2 width + orig]`` polyphase kernel (rates already divided by their gcd)."""
    base = min(orig, new) * rolloff
    width = math.ceil(width_zc * orig / base)
    idx = np.arange(-width, width + orig, dtype=np.float64)[None, :] / orig
    t = (np.arange(0, -new, -1, dtype=np.float64)[:, None] / new + idx) * base
    t = np.clip(t, -width_zc, width_zc)
    window = np.cos(t * math.pi / width_zc / 2) ** 2
    t = t * math.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(t == 0, 1.0, np.sin(t) / t)
    return (k * window * (base / orig)).astype(np.float32), width


def resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """torchaudio ``Resample(sr_in, sr_out)`` of a mono float32 signal."""
    x = np.asarray(x, np.float32)
    if sr_in == sr_out:
        return x
    g = math.gcd(sr_in, sr_out)
    orig, new = sr_in // g, sr_out // g
    kernel, width = _sinc_kernel(orig, new)
    n = x.shape[-1]
    xp = np.pad(x, (width, width + orig))
    frames = (xp.shape[0] - kernel.shape[1]) // orig + 1
    windows = np.lib.stride_tricks.sliding_window_view(xp, kernel.shape[1])[::orig][:frames]
    y = (windows @ kernel.T).reshape(-1)
    return y[: math.ceil(new * n / orig)].astype(np.float32)


# ----------------------------------------------------------------------------- mel filters


@lru_cache(maxsize=8)
def mel_filters(sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """librosa.filters.mel (Slaney scale and area normalisation), ``[n_mels, n_fft//2 + 1]`` float32."""
    return dsp.mel_filterbank(sr, n_fft, n_mels, fmin, fmax)


# ----------------------------------------------------------------------------- spectrograms


def _hann(n: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)   # torch periodic


def _stft(x: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """Complex ``[frames, bins]`` of already-padded ``x`` (no centring)."""
    frames = np.lib.stride_tricks.sliding_window_view(x, n_fft)[::hop]
    return np.fft.rfft(frames.astype(np.float64) * _hann(n_fft), axis=-1)


def s3_log_mel(wav16: np.ndarray, n_mels: int = 128) -> np.ndarray:
    """The S3 tokenizer's log-mel ``[T, n_mels]`` of a 16 kHz signal (100 frames/s)."""
    x = np.asarray(wav16, np.float32)
    spec = _stft(np.pad(x, (200, 200), mode="reflect"), 400, 160)[:-1]
    power = (spec.real ** 2 + spec.imag ** 2).astype(np.float32)
    mel = power @ mel_filters(16000, 400, n_mels).T
    log = np.log10(np.maximum(mel, 1e-10))
    log = np.maximum(log, log.max() - 8.0)
    return ((log + 4.0) / 4.0).astype(np.float32)


def matcha_mel(wav: np.ndarray, sr: int, n_fft: int, hop: int, n_mels: int = 80, fmin: float = 0.0,
               fmax: float | None = None) -> np.ndarray:
    """Matcha-TTS's ``mel_spectrogram`` (the one the CosyVoice lineage and Seed-VC / IndexTTS2's
    S2Mel train on): reflect padding of ``(n_fft - hop) / 2`` each side, no centring, a periodic
    Hann window as long as the FFT, magnitude with a 1e-9 floor under the root, librosa's Slaney
    mel bands, natural log of the energies clamped at 1e-5. ``[T, n_mels]``."""
    x = np.asarray(wav, np.float32)
    pad = (n_fft - hop) // 2
    spec = _stft(np.pad(x, (pad, pad), mode="reflect"), n_fft, hop)
    mag = np.sqrt((spec.real ** 2 + spec.imag ** 2).astype(np.float32) + np.float32(1e-9))
    mel = mag @ mel_filters(sr, n_fft, n_mels, fmin, fmax).T
    return np.log(np.maximum(mel, 1e-5)).astype(np.float32)


def prompt_mel(wav24: np.ndarray, fmax: float | None = 8000.0) -> np.ndarray:
    """Matcha's log-mel ``[T, 80]`` of a 24 kHz signal (50 frames/s) = S3Gen's ``prompt_feat``;
    ``fmax`` the top mel band edge (Chatterbox 8 kHz; CosyVoice3 None: Nyquist)."""
    return matcha_mel(wav24, 24000, 1920, 480, 80, 0.0, fmax)

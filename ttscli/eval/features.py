"""Power and mel spectrograms equal to librosa 0.11's defaults (the feature code DNSMOS and
Resemblyzer were trained with), in numpy: centred frames zero-padded by n_fft // 2, a periodic
Hann window as long as n_fft, |rfft|^2, Slaney-style mel filters with Slaney area norm."""
from __future__ import annotations

import numpy as np

from ttscli import dsp


def power_spectrogram(y: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """(frames, n_fft // 2 + 1) power spectrum of float32 audio."""
    y = np.asarray(y, np.float32)
    pad = n_fft // 2
    y = np.pad(y, (pad, pad))
    n_frames = 1 + (len(y) - n_fft) // hop
    frames = np.lib.stride_tricks.as_strided(y, (n_frames, n_fft), (y.strides[0] * hop, y.strides[0]))
    # librosa windows and transforms in float64 and keeps complex64: quiet frames need the precision
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    spec = np.fft.rfft(frames * window, axis=1).astype(np.complex64)
    return np.abs(spec) ** 2


def mel_filters(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular filters from 0 Hz to sr / 2, each of unit area in Hz."""
    return dsp.mel_filterbank(sr, n_fft, n_mels)


def mel_spectrogram(y: np.ndarray, sr: int, n_fft: int, hop: int, n_mels: int) -> np.ndarray:
    """(frames, n_mels) mel power spectrogram (not log)."""
    return power_spectrogram(y, n_fft, hop) @ mel_filters(sr, n_fft, n_mels).T


def power_to_db(s: np.ndarray, top_db: float = 80.0, amin: float = 1e-10) -> np.ndarray:
    """Decibels relative to the maximum, floored top_db below it."""
    db = 10.0 * np.log10(np.maximum(amin, s)) - 10.0 * np.log10(max(amin, float(np.max(s))))
    return np.maximum(db, db.max() - top_db)


def resample(y: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """soxr HQ, then padded or cut to ceil(n * sr_out / sr_in) samples as librosa.resample does."""
    y = np.asarray(y, np.float32)
    if sr_in == sr_out:
        return y
    import soxr

    out = soxr.resample(y, sr_in, sr_out, quality="HQ").astype(np.float32)
    n = int(np.ceil(len(y) * sr_out / sr_in))
    return np.pad(out, (0, max(0, n - len(out))))[:n]

"""Signal-processing tables in numpy that several front ends share (speaker encoders, speech
tokenizers, quality metrics): the periodic Hann window and librosa's Slaney mel filterbank
(librosa itself is not a dependency)."""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

_F_SP, _MIN_LOG_HZ = 200.0 / 3, 1000.0
_MIN_LOG_MEL, _LOGSTEP = _MIN_LOG_HZ / _F_SP, math.log(6.4) / 27.0


def hann(n: int) -> np.ndarray:
    """Periodic Hann window (torch.hann_window, scipy fftbins=True), float64."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def hz_to_mel(f) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    return np.where(f >= _MIN_LOG_HZ, _MIN_LOG_MEL + np.log(np.maximum(f, 1e-10) / _MIN_LOG_HZ) / _LOGSTEP,
                    f / _F_SP)


def mel_to_hz(m) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    return np.where(m >= _MIN_LOG_MEL, _MIN_LOG_HZ * np.exp(_LOGSTEP * (m - _MIN_LOG_MEL)), _F_SP * m)


@lru_cache(maxsize=16)
def mel_filterbank(sr: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """librosa.filters.mel with its defaults (Slaney scale, area normalisation):
    ``[n_mels, n_fft // 2 + 1]`` float32. Cached: callers must not modify the result."""
    fmax = sr / 2 if fmax is None else fmax
    fft_freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)          # librosa.fft_frequencies (odd n_fft too)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:] - mel_f[:-2]))[:, None]
    out = weights.astype(np.float32)
    out.flags.writeable = False
    return out

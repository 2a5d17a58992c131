"""Signal processing in numpy that several parts share: tables for the front ends (speaker
encoders, speech tokenizers, quality metrics), the periodic Hann window and librosa's Slaney mel
filterbank (librosa itself is not a dependency); and the crossfade that joins the audio of
consecutive text chunks, the same in the engine's scheduler and in a family's batched generator.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
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


# ---- joining chunks ------------------------------------------------------------------------

CROSSFADE_S = 0.02                   # seconds of crossfade between the audio of two text chunks


class Crossfade:
    """The equal-power crossfade of consecutive text chunks, fed one piece at a time.

    ``push(chunk_index, samples)`` returns the samples that are final now: within a chunk they
    pass straight through except the last ``n_fade``, which are held back to blend with the start
    of the next chunk; ``finish()`` returns what is still held. Push-style so that the engine's
    row scheduler, which gets a request's audio between other rows' frames, joins chunks with the
    same arithmetic as :func:`crossfade_join`.
    """

    def __init__(self, n_fade: int):
        self.n_fade = n_fade
        self.held = np.zeros(0, np.float32)     # tail of the previous chunk, not yet emitted
        self.current = -1
        self.head_needed = 0                    # samples of the new chunk still to blend into `held`
        self.fade_in = np.sin(np.linspace(0, np.pi / 2, n_fade, dtype=np.float32)) ** 2 if n_fade else None

    def push(self, idx: int, x: np.ndarray) -> list[np.ndarray]:
        x = np.asarray(x, np.float32)
        if x.ndim != 1:  # a family bug: flattening would interleave channels into noise
            raise TypeError(f"a pipeline yielded audio of shape {x.shape}; the family contract is mono (1-D)")
        out = []
        if idx != self.current:
            self.current = idx
            self.head_needed = len(self.held)
        if self.head_needed:
            held, n = self.held, len(self.held)
            k = min(self.head_needed, len(x))
            start = n - self.head_needed
            w = (self.fade_in[start:start + k] if n == self.n_fade
                 else np.linspace(0, 1, n, dtype=np.float32)[start:start + k])
            held[start:start + k] = held[start:start + k] * (1 - w) + x[:k] * w
            self.head_needed -= k
            x = x[k:]
            if self.head_needed:
                return out
            out.append(held)
            self.held = np.zeros(0, np.float32)
        buf = np.concatenate([self.held, x]) if len(self.held) else x
        keep = min(self.n_fade, len(buf))
        if len(buf) > keep:
            out.append(buf[: len(buf) - keep])
        self.held = buf[len(buf) - keep:].copy()
        return out

    def finish(self) -> list[np.ndarray]:
        out, self.held = ([self.held] if len(self.held) else []), np.zeros(0, np.float32)
        return out


def crossfade_join(pieces: Iterator[tuple[int, np.ndarray]], n_fade: int) -> Iterator[np.ndarray]:
    """Join audio of consecutive text chunks with an equal-power crossfade of n_fade samples
    (:class:`Crossfade`); `pieces` yields (chunk_index, samples) in order."""
    join = Crossfade(n_fade)
    for idx, x in pieces:
        yield from join.push(idx, x)
    yield from join.finish()

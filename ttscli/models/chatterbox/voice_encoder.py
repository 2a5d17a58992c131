"""The voice encoder: a 3-layer LSTM over 40-band mel power spectra of 16 kHz audio, giving the
256-d speaker embedding T3's conditioning projects (upstream ``VoiceEncoder.embeds_from_wavs``).

Front end as the reference runs it: leading and trailing silence trimmed (frames 20 dB under the
loudest, 2048/512 RMS frames), centred STFT (n_fft 400, hop 160, reflect padding, periodic Hann),
power, Slaney mel filters.  The mel is cut into 160-frame partials every 77 frames (1.3 partials
per second), each partial embedded and L2-normalised, and the mean normalised again.
Names follow ``ve.safetensors`` (``lstm.weight_ih_l0`` ..., ``proj``, ``similarity_*``).
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.errors import AudioInputError
from ttscli.models.chatterbox.config import VEArgs
from ttscli.nn.lstm import LSTM


def trim_silence(wav: np.ndarray, top_db: float, frame: int = 2048, hop: int = 512) -> np.ndarray:
    """librosa.effects.trim: keep from the first to one past the last frame whose RMS is within
    ``top_db`` of the loudest frame's (frames centred, zero padded)."""
    y = np.pad(wav.astype(np.float64), (frame // 2, frame // 2))
    n = 1 + (len(y) - frame) // hop
    idx = np.arange(frame)[None, :] + hop * np.arange(n)[:, None]
    power = np.mean(y[idx] ** 2, axis=1)
    db = 10 * np.log10(np.maximum(1e-10, power)) - 10 * np.log10(max(1e-10, power.max()))
    keep = np.flatnonzero(db > -top_db)
    if keep.size == 0:
        return wav[:0]
    return wav[keep[0] * hop: min(len(wav), (keep[-1] + 1) * hop)]


def mel_power(wav: np.ndarray, a: VEArgs) -> np.ndarray:
    """``[frames, num_mels]`` mel power spectrum (frames = 1 + len // hop)."""
    from ttscli.dsp import mel_filterbank

    y = np.pad(wav.astype(np.float64), (a.n_fft // 2, a.n_fft // 2), mode="reflect")
    n = 1 + (len(y) - a.n_fft) // a.hop
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(a.n_fft) / a.n_fft)
    frames = y[np.arange(a.n_fft)[None, :] + a.hop * np.arange(n)[:, None]] * window
    spec = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    fb = mel_filterbank(a.sample_rate, a.n_fft, a.num_mels, 0.0, a.sample_rate / 2).astype(np.float64)
    return (spec @ fb.T).astype(np.float32)


def partials(mel: np.ndarray, a: VEArgs) -> np.ndarray:
    """``[n, partial_frames, num_mels]`` windows, the mel zero-padded or cut to a whole number."""
    win = a.partial_frames
    step = int(np.round((a.sample_rate / a.rate) / win))
    n, rem = divmod(max(len(mel) - win + step, 0), step)
    if n == 0 or (rem + (win - step)) / win >= a.min_coverage:
        n += 1
    target = win + step * (n - 1)
    if target > len(mel):
        mel = np.concatenate([mel, np.zeros((target - len(mel), mel.shape[1]), mel.dtype)])
    return np.stack([mel[i * step: i * step + win] for i in range(n)])


class VoiceEncoder(nn.Module):
    def __init__(self, a: VEArgs):
        super().__init__()
        self.args = a
        self.lstm = LSTM(a.num_mels, a.hidden_size, a.num_layers)
        self.proj = nn.Linear(a.hidden_size, a.embed_size)
        # kept so the file loads strictly; only training's similarity loss reads them
        self.similarity_weight = mx.array([10.0])
        self.similarity_bias = mx.array([-5.0])

    def __call__(self, mels: mx.array) -> mx.array:
        """Partials ``[B, frames, mels]`` -> L2-normalised embeddings ``[B, embed]``."""
        e = nn.relu(self.proj(self.lstm(mels)[:, -1]))     # the last layer's final state
        return e / mx.linalg.norm(e, axis=1, keepdims=True)

    def embed(self, wav16k: np.ndarray) -> np.ndarray:
        """Speaker embedding ``[1, embed]`` of one 16 kHz mono recording."""
        a = self.args
        wav = trim_silence(np.asarray(wav16k, np.float32), a.trim_top_db)
        if len(wav) < a.hop or not np.any(wav):
            raise AudioInputError("the reference is silent (nothing left after trimming silence)")
        parts = mx.array(partials(mel_power(wav, a), a))
        e = self(parts).mean(axis=0)
        e = e / mx.linalg.norm(e)
        return np.array(e, np.float32)[None]



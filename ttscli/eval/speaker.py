"""Speaker similarity: Resemblyzer's GE2E voice encoder (3-layer LSTM, 40-band mel, 256-d
embedding) in numpy, with the preprocessing of Resemblyzer 0.1.4: 16 kHz, volume raised to
-30 dBFS, silences longer than the VAD allows cut out, 1.6 s partials at 1.3 per second whose
embeddings are averaged.

The weights are Resemblyzer's `pretrained.pt` (a legacy torch pickle) read through
ttscli.torchfile. Resemblyzer's Python code imports torch and librosa, so only its weight file
is used: `pip install --no-deps resemblyzer` brings it without them.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttscli.errors import AudioInputError, CheckpointError, ModelNotFoundError
from ttscli.eval import features

SAMPLE_RATE = 16000
HOP = 160                # 10 ms mel frames
N_FFT = 400              # 25 ms windows
N_MELS = 40
PARTIAL_FRAMES = 160     # 1.6 s
TARGET_DBFS = -30.0
VAD_WINDOW = 480         # 30 ms at 16 kHz
VAD_SMOOTH = 8           # moving-average width, in VAD windows
VAD_MAX_SILENCE = 6      # VAD windows of silence kept around speech
INT16_MAX = 2 ** 15 - 1
INSTALL_HINT = "pip install --no-deps resemblyzer (its weight file; ttscli does not use its code)"


def weights_path(override: Path | None = None) -> Path:
    if override is not None:
        if not Path(override).is_file():
            raise ModelNotFoundError(f"--speaker-model {override} is not a file")
        return Path(override)
    spec = importlib.util.find_spec("resemblyzer")   # finds the folder without running its __init__ (torch)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"speaker similarity needs Resemblyzer's weights: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing; reinstall: {INSTALL_HINT}")
    return path


@dataclass
class LSTMLayer:
    w_ih: np.ndarray         # (4H, in): gates i, f, g, o as torch.nn.LSTM stacks them
    w_hh: np.ndarray         # (4H, H)
    bias: np.ndarray         # b_ih + b_hh


class VoiceEncoder:
    def __init__(self, path: Path | None = None):
        from ttscli import torchfile

        sd = torchfile.state_dict(weights_path(path), "model_state")
        expected = {"linear.weight": (256, 256), "linear.bias": (256,)}
        for layer in range(3):
            fan_in = N_MELS if layer == 0 else 256
            expected.update({f"lstm.weight_ih_l{layer}": (1024, fan_in), f"lstm.weight_hh_l{layer}": (1024, 256),
                             f"lstm.bias_ih_l{layer}": (1024,), f"lstm.bias_hh_l{layer}": (1024,)})
        bad = [k for k, shape in expected.items() if k not in sd or sd[k].shape != shape]
        if bad:
            raise CheckpointError(f"voice encoder weights: missing or mis-shaped {', '.join(bad)}")
        def f32(k):
            return np.ascontiguousarray(sd[k], np.float32)

        self.layers = [LSTMLayer(f32(f"lstm.weight_ih_l{i}"), f32(f"lstm.weight_hh_l{i}"),
                                 f32(f"lstm.bias_ih_l{i}") + f32(f"lstm.bias_hh_l{i}")) for i in range(3)]
        self.linear_w, self.linear_b = f32("linear.weight"), f32("linear.bias")

    def forward(self, mels: np.ndarray) -> np.ndarray:
        """(batch, frames, 40) mel partials -> (batch, 256) L2-normed embeddings."""
        x = mels.astype(np.float32)
        h = None
        for layer in self.layers:
            hidden = layer.w_hh.shape[1]
            inputs = x @ layer.w_ih.T + layer.bias          # all time steps' input terms at once
            h = np.zeros((x.shape[0], hidden), np.float32)
            c = np.zeros_like(h)
            outs = np.empty((x.shape[0], x.shape[1], hidden), np.float32)
            for t in range(x.shape[1]):
                gates = inputs[:, t] + h @ layer.w_hh.T
                i, f, g, o = np.split(gates, 4, axis=1)
                c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
                h = _sigmoid(o) * np.tanh(c)
                outs[:, t] = h
            x = outs
        raw = np.maximum(h @ self.linear_w.T + self.linear_b, 0.0)
        return raw / np.linalg.norm(raw, axis=1, keepdims=True)

    def embed(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        """The utterance embedding (256,) of mono float audio at any rate."""
        wav = preprocess(audio, sample_rate)
        if len(wav) < VAD_WINDOW:
            raise AudioInputError("speaker similarity: no speech found in the audio")
        return self.embed_preprocessed(wav)

    def embed_preprocessed(self, wav: np.ndarray) -> np.ndarray:
        starts = partial_starts(len(wav))
        end = (starts[-1] + PARTIAL_FRAMES) * HOP
        if end >= len(wav):
            wav = np.pad(wav, (0, end - len(wav)))
        mel = features.mel_spectrogram(wav, SAMPLE_RATE, N_FFT, HOP, N_MELS)
        partials = self.forward(np.stack([mel[s:s + PARTIAL_FRAMES] for s in starts]))
        mean = partials.mean(axis=0)
        return mean / np.linalg.norm(mean)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


def partial_starts(n_samples: int, rate: float = 1.3, min_coverage: float = 0.75) -> list[int]:
    """First mel frame of each 1.6 s partial; the last is dropped if under min_coverage of it is audio."""
    n_frames = int(np.ceil((n_samples + 1) / HOP))
    step = int(np.round((SAMPLE_RATE / rate) / HOP))
    starts = list(range(0, max(1, n_frames - PARTIAL_FRAMES + step + 1), step))
    last = starts[-1] * HOP
    coverage = (n_samples - last) / (PARTIAL_FRAMES * HOP)
    if coverage < min_coverage and len(starts) > 1:
        starts.pop()
    return starts


def preprocess(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    wav = features.resample(np.asarray(audio, np.float32), sample_rate, SAMPLE_RATE)
    rms = np.sqrt(np.mean((wav.astype(np.float64) * INT16_MAX) ** 2)) if len(wav) else 0.0
    if rms == 0.0:
        raise AudioInputError("speaker similarity: the audio is silent")
    change = TARGET_DBFS - 20 * np.log10(rms / INT16_MAX)
    if change > 0:                                        # raise quiet audio only, never lower
        wav = wav * np.float32(10 ** (change / 20))
    return trim_long_silences(wav)


def trim_long_silences(wav: np.ndarray) -> np.ndarray:
    """Keep VAD-voiced 30 ms windows (webrtcvad, most aggressive mode) plus a margin of silence."""
    from ttscli.eval import require

    require("webrtcvad", "speaker similarity")
    import webrtcvad

    wav = wav[: len(wav) - len(wav) % VAD_WINDOW]
    pcm = np.round(wav * INT16_MAX).astype(np.int16).tobytes()   # int16 wraps like the reference
    vad = webrtcvad.Vad(3)
    flags = np.array([vad.is_speech(pcm[s * 2:(s + VAD_WINDOW) * 2], SAMPLE_RATE)
                      for s in range(0, len(wav), VAD_WINDOW)], np.float64)
    if not len(flags):
        return wav
    padded = np.concatenate([np.zeros((VAD_SMOOTH - 1) // 2), flags, np.zeros(VAD_SMOOTH // 2)])
    csum = np.cumsum(padded)
    csum[VAD_SMOOTH:] = csum[VAD_SMOOTH:] - csum[:-VAD_SMOOTH]
    voiced = np.round(csum[VAD_SMOOTH - 1:] / VAD_SMOOTH).astype(bool)
    width = VAD_MAX_SILENCE + 1
    voiced = np.convolve(voiced.astype(np.int32), np.ones(width, np.int32), "same") > 0
    return wav[np.repeat(voiced, VAD_WINDOW)]


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two embeddings."""
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

"""Kokoro on onnxruntime: the graphs of onnx_export.py behind KModel's interface.

Four graphs, one session each: durations (ALBERT, the duration predictor), prosody (F0, N and
the aligned text features, given the frame -> token index that numpy makes from the durations),
the harmonic source with its STFT features, and the decoder with the iSTFT. :class:`OnnxKModel`
keeps ``durations`` / ``prosody`` / ``source`` / ``decode`` with MLX arrays in and out, so the
pipeline and parity drive it as they drive KModel.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ttscli.errors import UsageError

NOISE_ERROR = ("--source-noise runs on MLX only: the onnxruntime decoder's source is the deterministic one; "
               "use --backend acoustic=mlx")


class OnnxDecoder:
    """The four graphs of a converted folder (durations, prosody, source, decoder), one session each."""

    def __init__(self, folder: Path, threads: int | None = None):
        from ttscli.backends.onnx.manifest import component, read_manifest
        from ttscli.backends.onnx.runtime import load_session, session_options

        folder = Path(folder)
        m = read_manifest(folder)
        so = session_options(threads)
        self.folder = folder
        self._durations, self._prosody, self._source, self._decoder = (
            load_session(folder / component(m, name, folder)["path"], so)
            for name in ("durations", "prosody", "source", "decoder"))

    def durations(self, tokens: np.ndarray, style: np.ndarray, speed: float) -> tuple[np.ndarray, np.ndarray]:
        """``tokens [T]``, ``style [256]`` -> (predictor features ``d [T, 640]``, frames per token ``[T]``)."""
        d, dur = self._durations.run(None, {"tokens": np.asarray(tokens, np.int64).reshape(-1),
                                            "style": np.ascontiguousarray(style, np.float32),
                                            "speed": np.array(speed, np.float32)})
        return d, dur

    def prosody(self, tokens: np.ndarray, style: np.ndarray, d: np.ndarray,
                durations: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """F0, N ``[2F]`` and the aligned text features ``asr [F, 512]`` for these durations."""
        reps = np.asarray(durations).astype(np.int64).reshape(-1)
        index = np.repeat(np.arange(reps.size, dtype=np.int64), reps)
        f0, n, asr = self._prosody.run(None, {"tokens": np.asarray(tokens, np.int64).reshape(-1),
                                              "d": np.ascontiguousarray(d, np.float32), "index": index,
                                              "style": np.ascontiguousarray(style, np.float32)})
        return f0, n, asr

    def source(self, f0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """F0 ``[2F]`` -> (harmonic source ``[600F]``, STFT features ``[1, 22, 120F + 1]``)."""
        har, feats = self._source.run(None, {"f0": np.ascontiguousarray(f0, np.float32)})
        return har, feats

    def decode(self, asr: np.ndarray, f0: np.ndarray, n: np.ndarray, style: np.ndarray,
               har_features: np.ndarray) -> np.ndarray:
        """``asr [F, 512]``, ``f0``/``n [2F]``, decoder style ``[128]``, features -> audio ``[600F]``."""
        feeds = {"asr": asr, "f0": f0, "n": n, "style": style, "har_features": har_features}
        return self._decoder.run(None, {k: np.ascontiguousarray(v, np.float32) for k, v in feeds.items()})[0]


class OnnxKModel:
    """KModel's stages on onnxruntime (``model``: the MLX KModel the graphs were built from)."""

    def __init__(self, model, decoder: OnnxDecoder):
        self.mlx_model, self.decoder = model, decoder
        self.args = model.args

    @property
    def sample_rate(self) -> int:
        return self.mlx_model.sample_rate

    def durations(self, tokens, style, speed: float = 1.0):
        import mlx.core as mx

        d, dur = self.decoder.durations(np.asarray(tokens), np.asarray(style), speed)
        return mx.array(d), mx.array(dur)

    def prosody(self, tokens, style, d, durations):
        import mlx.core as mx

        from .model import Prosody

        f0, n, asr = self.decoder.prosody(np.asarray(tokens), np.asarray(style), np.asarray(d), np.asarray(durations))
        return Prosody(mx.array(np.asarray(durations, np.float32)), mx.array(f0), mx.array(n), mx.array(asr))

    def source(self, f0, key=None):
        """(harmonic source, STFT features ``[120F + 1, 22]`` channels-last, as KModel's)."""
        import mlx.core as mx

        if key is not None:
            raise UsageError(NOISE_ERROR)
        har, feats = self.decoder.source(np.asarray(f0))
        return mx.array(har), mx.array(np.ascontiguousarray(feats[0].T))

    def decode(self, p, style, har_features, taps: dict | None = None):
        import mlx.core as mx

        if taps is not None:
            raise UsageError("intermediate taps exist on the MLX decoder only")
        feats = np.asarray(har_features, np.float32).T[None]
        audio = self.decoder.decode(np.asarray(p.asr), np.asarray(p.f0), np.asarray(p.n),
                                    np.asarray(style)[: self.args.style_dim], feats)
        return mx.array(audio)


def open_model(model, checkpoint: Path | None, model_id: str = "kokoro-82m", threads: int | None = None) -> OnnxKModel:
    """``model`` with its decoder on onnxruntime: the graphs of ``checkpoint`` from ttscli's cache
    (built once from ``model``), or, with no checkpoint (random weights), of ``model`` itself."""
    from .onnx_export import build_from_model, find_or_build

    folder = build_from_model(model) if checkpoint is None else find_or_build(checkpoint, model, model_id)
    return OnnxKModel(model, OnnxDecoder(folder, threads))

"""What a Piper request means whichever backend runs the voice (our MLX VITS or the published
ONNX graph): the inference scales it asks for, and each sentence's samples as piper-tts hands
them out. Light (numpy only), so the onnxruntime backend does not load MLX for it."""
from __future__ import annotations

import numpy as np

from ttscli.errors import UsageError

SCALES = ("noise_scale", "noise_w", "length_scale")


def scales(defaults: dict[str, float], request) -> dict[str, float]:
    """Inference scales: the voice's ``defaults`` (:data:`SCALES`), then the request's knobs,
    then ``--speed`` (which divides the length scale)."""
    speed = 1.0 if request.speed is None else float(request.speed)
    if speed <= 0:
        raise UsageError(f"--speed must be positive, got {speed}")
    out = {k: float(request.knobs.get(k, defaults[k])) for k in SCALES}
    out["length_scale"] /= speed
    if out["length_scale"] <= 0 or out["noise_scale"] < 0 or out["noise_w"] < 0:
        raise UsageError(f"Piper settings out of range: {out}")
    return out


def sentence_audio(audio: np.ndarray, normalize: bool, volume: float) -> np.ndarray:
    """One sentence as piper-tts outputs it: peak-normalised (silence stays silent) unless
    ``normalize`` is off, scaled by ``volume``, clipped to [-1, 1], float32."""
    if normalize:
        peak = float(np.max(np.abs(audio))) if audio.size else 0.0
        audio = audio / peak if peak >= 1e-8 else np.zeros_like(audio)
    if volume != 1.0:
        audio = audio * volume
    return np.clip(audio, -1.0, 1.0).astype(np.float32)

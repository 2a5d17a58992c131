"""Piper voices (VITS, espeak-ng phonemes) on our own MLX code.

The family declaration is family.py; loading is load.py, conversion convert.py. Names are
re-exported here lazily, so importing the package (as the CLI does to read the family's knobs)
stays light.
"""
from __future__ import annotations

from ttscli.models.base import lazy_exports

_EXPORTS = {
    "load_pipeline": "load", "load_converted": "load", "find_onnx": "load", "default_voice_dir": "load",
    "random_model": "load", "convert_onnx": "convert", "phonemize": "phonemize", "phoneme_ids": "phonemize",
    "text_to_ids": "phonemize", "PiperPipeline": "pipeline", "Vits": "model", "ModelArgs": "model",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

"""Piper voices (VITS, espeak-ng phonemes) on our own MLX code.

The family declaration is family.py; loading and conversion are load.py. Names are re-exported
here lazily, so importing the package (as the CLI does to read the family's knobs) stays light.
"""
from __future__ import annotations

_EXPORTS = {
    "load_pipeline": "load", "load_converted": "load", "find_onnx": "load", "default_voice_dir": "load",
    "random_model": "load", "convert_onnx": "convert", "phonemize": "phonemize", "phoneme_ids": "phonemize",
    "text_to_ids": "phonemize", "PiperPipeline": "pipeline", "Vits": "model", "ModelArgs": "model",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Kokoro-82M (hexgrad; StyleTTS2 + iSTFTNet) on our own MLX code, English and Japanese.

The family declaration is family.py; names are re-exported here lazily so importing the package
(as the CLI does to read the family's knobs) stays light.
"""
from __future__ import annotations

_EXPORTS = {
    "KModel": "model", "ModelArgs": "config", "KokoroPipeline": "pipeline", "load_pipeline": "hooks",
    "from_onnx": "convert", "from_state_dict": "convert", "read_voices": "load", "parse_voice": "load",
    "load_model": "load", "phonemize": "g2p", "OnnxKokoro": "reference",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

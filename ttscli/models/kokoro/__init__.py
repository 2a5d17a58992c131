"""Kokoro-82M (hexgrad; StyleTTS2 + iSTFTNet) on our own MLX code, English and Japanese.

The family declaration is family.py; loading is load.py. Names are re-exported here lazily so
importing the package (as the CLI does to read the family's knobs) stays light.
"""
from __future__ import annotations

from ttscli.models.base import lazy_exports

_EXPORTS = {
    "KModel": "model", "ModelArgs": "config", "KokoroPipeline": "pipeline", "load_pipeline": "load",
    "from_onnx": "convert", "from_state_dict": "convert", "read_voices": "load", "parse_voice": "load",
    "load_model": "load", "phonemize": "g2p", "OnnxKokoro": "reference",
}
__all__ = list(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

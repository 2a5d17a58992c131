"""Qwen3-TTS 12 Hz family (Base clone, CustomVoice, VoiceDesign; 0.6B and 1.7B).

The family declaration is family.py; loading is load.py. Names are re-exported lazily so that
importing the package (as the CLI does to read the family's knobs) stays light.
"""
from __future__ import annotations

from ttscli.models.base import lazy_exports

_EXPORTS = {
    "load_pipeline": "load", "load_model": "load", "load_tokenizer": "load", "Qwen3TTSPipeline": "pipeline",
    "Qwen3TTSModel": "model", "ModelArgs": "config", "GenerationConfig": "config",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

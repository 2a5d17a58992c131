"""Breeze TTS 2 (BreezeBlue/Breeze-TTS-2): T5Gemma2 text encoder, Qwen3 backbone, llama depth decoder,
Qwen3-TTS 12 Hz codec. Voice design, clone and direction, CFG in both stages.

The family declaration is family.py; loading is load.py. Names below resolve lazily so importing
the package stays light.
"""
from __future__ import annotations

from ttscli.models.base import lazy_exports

_EXPORTS = {"load_pipeline": "load", "BreezePipeline": "pipeline",
            "BreezeModel": "model", "ModelArgs": "config", "load_model": "load"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

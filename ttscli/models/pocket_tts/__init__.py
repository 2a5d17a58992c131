"""Kyutai Pocket TTS (kyutai/pocket-tts): a causal transformer whose flow head emits continuous
Mimi latents, the Mimi decoder (shared, ttscli.codecs.mimi), built-in voices and cloning.

The family declaration is family.py; loading is load.py. Names below resolve lazily so importing
the package stays light.
"""
from __future__ import annotations

from ttscli.models.base import lazy_exports

_EXPORTS = {"load_pipeline": "load", "PocketPipeline": "pipeline", "PocketTTS": "model",
            "ModelArgs": "config", "load_model": "load"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

"""Chatterbox (Resemble AI, English): T3, a Llama text-to-speech-token LM conditioned on a voice,
and S3Gen, which turns the speech tokens into 24 kHz audio (s3gen/).

The family declaration is family.py; loading is load.py. Names are re-exported lazily so that
importing the package (as the CLI does to read the family's knobs) stays light.
"""
from __future__ import annotations

from ttscli.models.base import lazy_exports

_EXPORTS = {
    "T3": "t3", "T3Args": "config", "VoiceEncoder": "voice_encoder", "VEArgs": "config",
    "EnTokenizer": "tokenizer", "punc_norm": "tokenizer", "Conditionals": "conds",
    "load_pipeline": "load", "load_t3": "load", "load_voice_encoder": "load", "load_tokenizer": "load",
    "load_conds": "load",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

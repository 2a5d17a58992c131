"""CosyVoice3 (FunAudioLLM, Fun-CosyVoice3-0.5B): a Qwen2 LM from text to 25 Hz speech tokens,
a DiT flow-matching decoder to mel and a causal HiFT vocoder (both in ttscli/codecs/s3gen/).

The family declaration is family.py; loading is load.py. Names are re-exported lazily so that
importing the package (as the CLI does to read the family's knobs) stays light.
"""
from __future__ import annotations

from ttscli.models.base import lazy_exports

_EXPORTS = {
    "CosyVoice3LM": "llm", "CosyVoice3Args": "config", "read_args": "config", "load_pipeline": "load",
    "load_llm": "load", "load_flow": "load", "load_hift": "load",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

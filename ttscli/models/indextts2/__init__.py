"""IndexTTS2 (bilibili, IndexTeam/IndexTTS-2): a GPT from text to semantic codes conditioned on a
reference voice and an emotion, S2Mel's flow matching to mel, BigVGAN v2 to 22.05 kHz.

The family declaration is family.py; loading is load.py. Names are re-exported lazily so that
importing the package (as the CLI does to read the family's knobs) stays light.
"""
from __future__ import annotations

from ttscli.models.base import lazy_exports

_EXPORTS = {
    "IndexTTS2Args": "config", "read_args": "config", "load_pipeline": "load", "IndexTTS2Pipeline": "pipeline",
    "SemanticGPT": "gpt", "Conditioners": "conditioning", "S2Mel": "s2mel", "Voice": "voice",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

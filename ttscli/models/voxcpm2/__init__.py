"""VoxCPM2 (OpenBMB): a MiniCPM-4 LM planning continuous AudioVAE latents, a local diffusion
transformer drawing them patch by patch, the AudioVAE decoding them at 48 kHz.

The family declaration is family.py; loading is load.py. Names below resolve lazily so importing
the package stays light.
"""
from __future__ import annotations

from ttscli.models.base import lazy_exports

_EXPORTS = {"load_pipeline": "load", "load_model": "load", "VoxCPM2Pipeline": "pipeline", "VoxCPM2": "model",
            "ModelArgs": "config"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)

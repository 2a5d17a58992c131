"""The Qwen3-TTS 12 Hz tokenizer now lives in :mod:`ttscli.codecs.qwen3_12hz` (Breeze TTS 2 ships
the same codec). This package keeps the qwen3_tts family's import paths: the names and every
submodule are the codec package's own module objects, not copies."""
import sys
from importlib import import_module

from ttscli.codecs.qwen3_12hz import *  # noqa: F403
from ttscli.codecs.qwen3_12hz import __all__  # noqa: F401

for _sub in ("config", "conv", "decoder", "encoder", "streaming", "transformer", "weights"):
    sys.modules[f"{__name__}.{_sub}"] = import_module(f"ttscli.codecs.qwen3_12hz.{_sub}")

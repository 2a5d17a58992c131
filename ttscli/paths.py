"""Where ttscli keeps its own files (converted weights, user registry)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$TTSCLI_CACHE, else $XDG_CACHE_HOME/ttscli, else ~/.cache/ttscli."""
    if os.environ.get("TTSCLI_CACHE"):
        return Path(os.environ["TTSCLI_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "ttscli"


def converted_dir(model_id: str, variant: str = "mlx") -> Path:
    """Folder for weights we converted ourselves, e.g. ONNX initializers -> safetensors."""
    return cache_dir() / "converted" / model_id / variant


def config_dir() -> Path:
    """$TTSCLI_CONFIG_DIR, else $XDG_CONFIG_HOME/ttscli, else ~/.config/ttscli."""
    if os.environ.get("TTSCLI_CONFIG_DIR"):
        return Path(os.environ["TTSCLI_CONFIG_DIR"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser() / "ttscli"

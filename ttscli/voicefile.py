"""Saved voices (``--save-voice`` / ``--voice v.safetensors``) as files: one ``.safetensors`` file of
numpy tensors with a metadata format tag. Each family decides what goes in and checks what it reads
back; writing (ttscli.outfile: a temp file beside the target, renamed onto it, so an interrupted save
never leaves a partial voice, and no link another user planted is followed) and the common refusals
(missing, unreadable, another format) live here.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ttscli.errors import UsageError


def is_voice_file(voice: str | None) -> bool:
    return bool(voice) and str(voice).endswith(".safetensors")


def save(path: Path, tensors: dict[str, np.ndarray], meta: dict[str, str]) -> Path:
    """Write ``tensors`` with string ``meta`` to ``path`` atomically, as any user-named output is
    written (:func:`ttscli.outfile.write_bytes`); missing folders are made. Returns the path
    written (a link's target)."""
    from safetensors.numpy import save as to_bytes

    from ttscli.outfile import resolve, write_destination

    path = Path(path)
    if path.suffix != ".safetensors":
        raise UsageError(f"--save-voice {path}: the file name must end in .safetensors")
    data = to_bytes({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata=meta)
    return write_destination(resolve(path, "--save-voice", parents=True), data, "--save-voice")


def load(path: Path, fmt: str, what: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(tensors, metadata) of a saved voice whose format tag is ``fmt``; ``what`` names the voice
    kind in the one-line errors (e.g. "Qwen3-TTS")."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"voice file not found: {path}")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # noqa: BLE001  (safetensors raises its own error types on a corrupt header)
        raise UsageError(f"{path} is not a readable voice file ({e})") from None
    if meta.get("format") != fmt:
        raise UsageError(f"{path} is not a ttscli {what} voice file (save one with `ttscli clone --save-voice`)")
    return tensors, meta

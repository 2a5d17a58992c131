"""Saved Breeze voices: a clone reference's codes and transcript in one ``.safetensors`` file.

Tensor ``ref_codes [N, 16]`` int32 (the audio tokenizer's codes of the reference); metadata:
format tag, version, the model it was made with, codebook count and size, and ``ref_text``.
Reusing it skips the reference encoder; the prompt is rebuilt from it exactly as from the audio.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError
from ttscli.models.breeze_tts.prompt import Voice

FORMAT = "ttscli-breeze-tts-voice"
VERSION = "1"


def is_voice_file(voice: str | None) -> bool:
    return bool(voice) and str(voice).endswith(".safetensors")


def save_voice(path: Path, voice: Voice, model_id: str, args) -> Path:
    from safetensors.numpy import save_file

    path = Path(path)
    if path.suffix != ".safetensors":
        raise UsageError(f"--save-voice {path}: the file name must end in .safetensors")
    meta = {"format": FORMAT, "version": VERSION, "model_id": model_id, "ref_text": voice.text,
            "num_codebooks": str(args.num_codebooks), "codebook_size": str(args.codebook_size)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".voice-", suffix=".safetensors", dir=path.parent)
    os.close(fd)
    try:
        save_file({"ref_codes": np.ascontiguousarray(voice.codes, np.int32)}, tmp, metadata=meta)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_voice(path: Path, args) -> Voice:
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"voice file not found: {path}")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            codes = f.get_tensor("ref_codes") if "ref_codes" in f.keys() else None
    except Exception as e:  # noqa: BLE001  (safetensors raises its own error types on a corrupt header)
        raise UsageError(f"{path} is not a readable voice file ({e})") from None
    if meta.get("format") != FORMAT or codes is None:
        raise UsageError(f"{path} is not a ttscli Breeze voice file (save one with `ttscli clone --save-voice`)")
    if codes.ndim != 2 or codes.shape[1] != args.num_codebooks or codes.shape[0] == 0 \
            or codes.min() < 0 or codes.max() >= args.codebook_size:
        raise UsageError(f"{path}: its codes do not fit this model ({args.num_codebooks} codebooks of "
                         f"{args.codebook_size}); save the voice again with this model")
    if not meta.get("ref_text"):
        raise UsageError(f"{path} has no reference transcript")
    return Voice(codes.astype(np.int32), meta["ref_text"])

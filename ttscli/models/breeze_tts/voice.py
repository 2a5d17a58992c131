"""Saved Breeze voices: a clone reference's codes and transcript in one ``.safetensors`` file.

Tensor ``ref_codes [N, 16]`` int32 (the audio tokenizer's codes of the reference); metadata:
format tag, version, the model it was made with, codebook count and size, and ``ref_text``.
Reusing it skips the reference encoder; the prompt is rebuilt from it exactly as from the audio.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ttscli import voicefile
from ttscli.errors import UsageError
from ttscli.models.breeze_tts.prompt import Voice

FORMAT = "ttscli-breeze-tts-voice"
VERSION = "1"


def save_voice(path: Path, voice: Voice, model_id: str, args) -> Path:
    meta = {"format": FORMAT, "version": VERSION, "model_id": model_id, "ref_text": voice.text,
            "num_codebooks": str(args.num_codebooks), "codebook_size": str(args.codebook_size)}
    return voicefile.save(path, {"ref_codes": np.asarray(voice.codes, np.int32)}, meta)


def load_voice(path: Path, args) -> Voice:
    tensors, meta = voicefile.load(path, FORMAT, "Breeze")
    codes = tensors.get("ref_codes")
    if codes is None:
        raise UsageError(f"{path} is not a ttscli Breeze voice file (save one with `ttscli clone --save-voice`)")
    if codes.ndim != 2 or codes.shape[1] != args.num_codebooks or codes.shape[0] == 0 \
            or codes.min() < 0 or codes.max() >= args.codebook_size:
        raise UsageError(f"{path}: its codes do not fit this model ({args.num_codebooks} codebooks of "
                         f"{args.codebook_size}); save the voice again with this model")
    if not meta.get("ref_text"):
        raise UsageError(f"{path} has no reference transcript")
    return Voice(codes.astype(np.int32), meta["ref_text"])

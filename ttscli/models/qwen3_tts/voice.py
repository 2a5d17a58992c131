"""Saved clone voices: the voice prompt of a Base model in one ``.safetensors`` file.

Tensors: ``x_vector [enc_dim]`` float32, optionally ``ref_codes [Tref, 16]`` int32 and
``ref_text_ids [n]`` int32 (tokens of the reference-text template).  Metadata: format tag,
version, the model id and size it was made with, and the reference transcript.  Reusing it
skips the speaker and speech encoders entirely.
"""
from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli import voicefile
from ttscli.errors import UsageError
from ttscli.models.qwen3_tts.prompt import VoicePrompt

FORMAT = "ttscli-qwen3-tts-voice"
VERSION = "1"


def save_voice(path: Path, voice: VoicePrompt, model_id: str, tts_model_size: str) -> Path:
    tensors = {"x_vector": np.asarray(voice.x_vector, np.float32).reshape(-1)}
    if voice.ref_codes is not None:
        tensors["ref_codes"] = np.asarray(voice.ref_codes, np.int32)
    if voice.ref_ids is not None:
        tensors["ref_text_ids"] = np.asarray(voice.ref_ids, np.int32)
    meta = {"format": FORMAT, "version": VERSION, "model_id": model_id, "tts_model_size": tts_model_size,
            "mode": "icl" if voice.ref_codes is not None else "x_vector_only", "ref_text": voice.ref_text or ""}
    return voicefile.save(path, tensors, meta)


def load_voice(path: Path, tts_model_size: str, enc_dim: int) -> VoicePrompt:
    tensors, meta = voicefile.load(path, FORMAT, "Qwen3-TTS")
    if "x_vector" not in tensors:
        raise UsageError(f"{path} is not a ttscli Qwen3-TTS voice file (save one with `ttscli clone --save-voice`)")
    xv = tensors["x_vector"].astype(np.float32).reshape(-1)
    if xv.shape[0] != enc_dim or meta.get("tts_model_size") != tts_model_size:
        raise UsageError(f"{path} was saved with {meta.get('model_id', '?')} (speaker vector {xv.shape[0]}); "
                         f"this model needs a voice saved with the same model size ({enc_dim})")
    codes = tensors.get("ref_codes")
    ids = tensors.get("ref_text_ids")
    return VoicePrompt(mx.array(xv), None if codes is None else mx.array(codes.astype(np.int32)),
                       meta.get("ref_text") or None, None if ids is None else ids.astype(np.int64).tolist())

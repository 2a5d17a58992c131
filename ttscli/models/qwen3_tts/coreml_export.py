"""Qwen3-TTS on Core ML: the talker, as the pipeline's code decoder.

Only the talker's Qwen3 stack (``talker.model.*``) and its codec head go into a package, built
by the shared stateful LM export (ttscli.backends.coreml). Everything else stays with MLX in the
hybrid pipeline: embeddings and the text projection (prompt building), the code predictor (15
small steps per frame, each feeding the next) and the speech decoder.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Callable

import numpy as np

from ttscli.backends.coreml.convert import convert_code_decoder, export_code_decoder, lm_with_head
from ttscli.backends.coreml.manifest import MANIFEST, source_files
from ttscli.backends.coreml.weights import ArrayWeights, SafeTensors
from ttscli.errors import CheckpointError
from ttscli.lm.config import LMArgs

FAMILY = "qwen3_tts"
TALKER_FILE = "talker.mlpackage"
SOURCE_FILES = ("model.safetensors",)


def talker_args(cfg: dict) -> LMArgs:
    """The talker stack of a config.json (its sections are Qwen3 blocks with q/k norm)."""
    tc = cfg.get("talker_config")
    if not isinstance(tc, dict):
        raise CheckpointError("config.json has no talker_config; is this a Qwen3-TTS checkpoint?")
    return LMArgs.from_hf(tc, qk_norm=True)


def talker_weights(source, cfg: dict) -> tuple[LMArgs, dict[str, np.ndarray], np.ndarray]:
    """(args, stack tensors, codec head ``[vocab, H]``) from a source with the checkpoint's names."""
    args = talker_args(cfg)
    return lm_with_head(source, args, "talker.model.", "talker.codec_head.weight", args.vocab_size)


def export_talker(source, cfg: dict, out_dir: Path, *, model_id: str, source_record: dict,
                  capacity: int = 256, weights_8bit: bool = False, precision: str = "float16") -> dict:
    """Talker package + manifest into ``out_dir``; returns the manifest."""
    return export_code_decoder(talker_weights(source, cfg), out_dir, TALKER_FILE, model_id=model_id, family=FAMILY,
                               source={**source_record, "tts_model_type": cfg.get("tts_model_type"),
                                       "tts_model_size": cfg.get("tts_model_size")},
                               capacity=capacity, weights_8bit=weights_8bit, precision=precision)


def export_coreml(checkpoint: Path, out_dir: Path, *, model_id: str, capacity: int = 256,
                  weights_8bit: bool = False, precision: str = "float16") -> dict:
    """The packages of a checkpoint folder in the published layout."""
    checkpoint = Path(checkpoint)
    try:
        cfg = json.loads((checkpoint / "config.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{checkpoint / 'config.json'} is missing; "
                              "point at a Qwen3-TTS checkpoint folder") from None
    except ValueError as e:
        raise CheckpointError(f"{checkpoint / 'config.json'} is not valid JSON ({e})") from None
    record = {"checkpoint": str(checkpoint.resolve()), "files": source_files(checkpoint, SOURCE_FILES)}
    return export_talker(SafeTensors(checkpoint / "model.safetensors"), cfg, out_dir, model_id=model_id,
                         source_record=record, capacity=capacity, weights_8bit=weights_8bit, precision=precision)


def convert_coreml(spec, checkpoint: Path, out_dir: Path, *, capacity: int = 256, quantize: bool = False,
                   q_bits: int = 8, q_group_size: int | None = None, weights_8bit: bool = False,
                   dtype: str | None = None, progress: Callable[..., None] | None = None) -> None:
    """The family hook of ``ttscli convert MODEL --to coreml``: the talker's package."""
    convert_code_decoder(export_coreml, spec, checkpoint, out_dir, "talker", capacity=capacity, quantize=quantize,
                         q_bits=q_bits, weights_8bit=weights_8bit, dtype=dtype, progress=progress)


def _fingerprint(params: dict, capacity: int) -> str:
    import hashlib

    h = hashlib.sha256(str(capacity).encode())
    for k in sorted(params):
        v = params[k]
        h.update(f"{k}{tuple(v.shape)}{float(np.asarray(v, np.float64).sum()):.6e}".encode())
    return h.hexdigest()[:16]


def build_from_model(model, capacity: int = 256, out_dir: Path | None = None) -> Path:
    """The talker package of an in-memory MLX model (random weights at real dimensions for
    ``bench --random-weights``), cached by a fingerprint of its weights. Minutes at 0.6B size."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from ttscli.paths import cache_dir

    params = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.talker.parameters())
              if k.startswith("model.") or k.startswith("codec_head.")}
    if any(k.endswith(".scales") for k in params):
        raise CheckpointError("cannot build Core ML packages from a quantized MLX model; use the original checkpoint")
    params = {"talker." + k: v for k, v in params.items()}
    out_dir = Path(out_dir) if out_dir else cache_dir() / "coreml-random" / _fingerprint(params, capacity)
    if (out_dir / MANIFEST).is_file():
        return out_dir
    cfg = {"talker_config": json.loads(json.dumps(dataclasses.asdict(model.args.talker_config), default=str))}
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        export_talker(ArrayWeights(params, "MLX model"), cfg, tmp, model_id="random weights",
                      source_record={"checkpoint": "MLX model weights", "files": {}}, capacity=capacity)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir

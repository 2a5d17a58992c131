"""Breeze TTS 2 on Core ML: the backbone (a Qwen3 stack) and its head as the code decoder.

Only ``backbone_model.*`` and ``lm_head`` (codebook 0's classes plus the EOS class) go into the
package, built by the shared stateful LM export (ttscli.backends.coreml). The text encoder and
its projection (prompt building), the audio table, the depth decoder (a fresh 16-position stack
per frame) and the sampler stay with MLX. The package takes one row per call; CFG's two
branches, whose prompts differ in length, each get their own state
(:class:`ttscli.backends.decoder.RowwiseDecoder`).

The published checkpoint is sharded: tensors are read through its index, memory-mapped, bf16
widened exactly. The source record hashes config.json (the stack's shape, RoPE and eps are
baked into the package), the index and every shard.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from ttscli.backends.coreml.convert import convert_code_decoder, export_code_decoder, lm_with_head
from ttscli.backends.coreml.manifest import source_files
from ttscli.backends.coreml.weights import SafeTensors, ShardedSafeTensors
from ttscli.config import read_json
from ttscli.errors import CheckpointError
from ttscli.lm.config import LMArgs
from ttscli.models.breeze_tts.config import ModelArgs

FAMILY = "breeze_tts"
BACKBONE_FILE = "backbone.mlpackage"
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# prompt (~50-300 positions with a reference) + frames at 12.5 Hz: ~60 s of speech per chunk
CAPACITY = 1024


def backbone_weights(source, args: ModelArgs) -> tuple[LMArgs, dict[str, np.ndarray], np.ndarray]:
    """(stack args, stack tensors, head ``[vocab_size + 1, H]``) by the checkpoint's names."""
    return lm_with_head(source, args.backbone, "backbone_model.", "lm_head.weight", args.vocab_size + 1)


def weight_source(checkpoint: Path) -> tuple[object, tuple[str, ...]]:
    """The checkpoint's tensors (its index and shards, or one model.safetensors as
    ``ttscli convert --to mlx`` may write) and the files they come from."""
    checkpoint = Path(checkpoint)
    if (checkpoint / INDEX).is_file():
        src = ShardedSafeTensors(checkpoint / INDEX)
        return src, src.files
    if (checkpoint / SINGLE).is_file():
        return SafeTensors(checkpoint / SINGLE), (SINGLE,)
    raise CheckpointError(f"{checkpoint}: no {INDEX} or {SINGLE}; point at a Breeze-TTS-2 checkpoint folder")


def export_coreml(checkpoint: Path, out_dir: Path, *, model_id: str, capacity: int = CAPACITY,
                  weights_8bit: bool = False, precision: str = "float16") -> dict:
    """The backbone package of a checkpoint folder in the published layout, and its manifest."""
    checkpoint = Path(checkpoint)
    config = read_json(checkpoint / "config.json")
    if isinstance(config, dict) and config.get("quantization"):
        raise CheckpointError(f"{checkpoint} holds MLX-quantized weights; convert to Core ML from the original "
                              "checkpoint (Core ML quantizes with -q --q-bits 8)")
    args = ModelArgs.from_dict(config, source=str(checkpoint / "config.json"))
    source, files = weight_source(checkpoint)
    record = {"checkpoint": str(checkpoint.resolve()), "files": source_files(checkpoint, ("config.json", *files))}
    return export_code_decoder(backbone_weights(source, args), out_dir, BACKBONE_FILE, model_id=model_id,
                               family=FAMILY, source=record, capacity=capacity, weights_8bit=weights_8bit,
                               precision=precision)


def convert_coreml(spec, checkpoint: Path, out_dir: Path, *, capacity: int = CAPACITY, quantize: bool = False,
                   q_bits: int = 8, q_group_size: int | None = None, weights_8bit: bool = False,
                   dtype: str | None = None, progress: Callable[..., None] | None = None, **_unused) -> None:
    """``ttscli convert breeze-tts-2 --to coreml``. ``capacity``: the longest prompt (with CFG, the
    conditional one) plus the frames of one chunk; past it generation stops with an error."""
    convert_code_decoder(export_coreml, spec, checkpoint, out_dir, "backbone", capacity=capacity,
                         quantize=quantize, q_bits=q_bits, weights_8bit=weights_8bit, dtype=dtype, progress=progress)

"""Chatterbox on Core ML: T3's Llama stack and speech head as the code decoder.

Only ``tfmr.*`` (the backbone) and ``speech_head`` go into the package, built by the shared
stateful LM export (ttscli.backends.coreml).  Embeddings, the conditioning encoder and the
sampler stay with MLX.  The package runs one row per call; classifier-free guidance needs two
rows (conditional, and text zeroed), so the shared :class:`RowwiseDecoder` gives each row its own state.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ttscli.backends.coreml.convert import convert_code_decoder, export_code_decoder, lm_with_head
from ttscli.backends.coreml.manifest import source_files
from ttscli.backends.coreml.weights import SafeTensors
from ttscli.backends.decoder import RowwiseDecoder
from ttscli.models.chatterbox.config import T3Args

__all__ = ["RowwiseDecoder", "convert_coreml", "export_coreml", "t3_weights"]

FAMILY = "chatterbox"
T3_FILE = "t3.mlpackage"
SOURCE_FILES = ("t3_cfg.safetensors",)


def t3_weights(source, args: T3Args) -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    return lm_with_head(source, args.lm_args(), "tfmr.", "speech_head.weight", args.speech_vocab)


def export_coreml(checkpoint: Path, out_dir: Path, *, model_id: str, capacity: int = 1024,
                  weights_8bit: bool = False, precision: str = "float16") -> dict:
    from ttscli.checkpoint import read_safetensors, shapes

    checkpoint = Path(checkpoint)
    path = checkpoint / "t3_cfg.safetensors"
    args = T3Args.from_weights(shapes(read_safetensors(path)), str(path))
    record = {"checkpoint": str(checkpoint.resolve()), "files": source_files(checkpoint, SOURCE_FILES)}
    return export_code_decoder(t3_weights(SafeTensors(path), args), out_dir, T3_FILE, model_id=model_id,
                               family=FAMILY, source=record, capacity=capacity, weights_8bit=weights_8bit,
                               precision=precision)


def convert_coreml(spec, checkpoint: Path, out_dir: Path, *, capacity: int = 1024, quantize: bool = False,
                   q_bits: int = 8, q_group_size: int | None = None, weights_8bit: bool = False,
                   dtype: str | None = None, progress: Callable[..., None] | None = None, **_unused) -> None:
    """``ttscli convert chatterbox --to coreml``. ``capacity``: conditioning (34) + text + 2 +
    speech tokens; the default 1024 covers ~20 s of speech per chunk."""
    convert_code_decoder(export_coreml, spec, checkpoint, out_dir, "T3", capacity=capacity, quantize=quantize,
                         q_bits=q_bits, weights_8bit=weights_8bit, dtype=dtype, progress=progress)

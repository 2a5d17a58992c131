"""`ttscli convert chatterbox --to mlx [-q]`: T3 re-saved in a dtype, its backbone's linear layers
optionally quantized; the other files of the folder are copied unchanged.

The published folder has no config.json, so the quantization marker ttscli.quantize reads goes
into the metadata of t3_cfg.safetensors itself.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx import nn
from mlx.utils import tree_flatten

from ttscli.errors import UsageError
from ttscli.quantize import MARKER
from ttscli.quantize import quantize as quantize_layers

COPY = ("s3gen.safetensors", "ve.safetensors", "tokenizer.json", "conds.pt")


def keep(path: str, module: nn.Module) -> bool:
    """Only the Llama blocks' linears are quantized; embeddings, position tables, the
    conditioning encoder and the sampled speech head stay in full precision."""
    return not isinstance(module, nn.Linear) or not path.startswith("tfmr.layers.")


def convert_mlx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool, q_bits: int = 4, q_group_size: int = 64,
                dtype: str | None = None, progress=None, **_unused) -> None:
    from ttscli.models.chatterbox.load import load_t3, t3_marker

    progress = progress or (lambda *a, **k: None)
    dtype = dtype or "float32"          # the published on-disk dtype
    src = Path(checkpoint) / "t3_cfg.safetensors"
    if t3_marker(src):
        raise UsageError(f"{checkpoint} is already quantized; convert from the original checkpoint")
    progress(0, 3, "loading")
    model = load_t3(checkpoint, dtype=dtype)
    meta = {"format": "pt"}
    progress(1, 3, "quantizing" if quantize else "casting")
    if quantize:
        meta[MARKER] = json.dumps(quantize_layers(model, bits=q_bits, group_size=q_group_size, keep=keep))
    progress(2, 3, "saving")
    out_dir.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out_dir / "t3_cfg.safetensors"), dict(tree_flatten(model.parameters())), metadata=meta)
    for name in COPY:
        if (Path(checkpoint) / name).exists():
            shutil.copy2(Path(checkpoint) / name, out_dir / name)
    progress(3, 3, "done")

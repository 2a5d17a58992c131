"""`ttscli convert breeze-tts-2 --to mlx [-q 8|4]`: re-save in a dtype, optionally quantized.

The output keeps the published layout (an index and the two shard names the registry lists, the
published tensor names), without the unused ``embed_text_tokens`` and ``codec_model.*``.
Quantized: the linears of the text encoder, backbone and depth decoder (mlx-lm's packed layout
and config marker, :mod:`ttscli.quantize`). Full precision: the embeddings (text table, the
audio table shared by both stages), the sampled heads (``lm_head``, ``codebooks_head``, kept
float32 at load) and the text projection, which every prompt position passes through.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ttscli.config import read_json
from ttscli.errors import UsageError
from ttscli.quantize import MARKER, is_quantized
from ttscli.quantize import quantize as quantize_layers

KEEP = ("embed_tokens", "lm_head", "codebooks_head", "text_encoder_proj", "inputs_embeds_projector")
COPY = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def keep(path: str, module: nn.Module) -> bool:
    return not isinstance(module, nn.Linear) or any(k in path for k in KEEP)


def convert_mlx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool, q_bits: int, q_group_size: int,
                dtype: str | None, progress=None, **_) -> None:
    from ttscli.models.breeze_tts.load import load_model

    progress = progress or (lambda *a, **k: None)
    dtype = dtype or "bfloat16"   # the published on-disk dtype
    progress(0, 4, "loading")
    config = read_json(Path(checkpoint) / "config.json")
    if is_quantized(config):
        raise UsageError(f"{checkpoint} is already quantized; convert from the original checkpoint")
    model, _ = load_model(checkpoint, dtype)
    progress(1, 4, "quantizing" if quantize else "casting")
    if quantize:
        config[MARKER] = quantize_layers(model, bits=q_bits, group_size=q_group_size, keep=keep)
    weights = dict(tree_flatten(model.parameters()))
    progress(2, 4, "saving")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = sorted(weights)
    half = {n: ("model-00001-of-00002.safetensors" if n.startswith(("backbone_model.", "lm_head."))
                else "model-00002-of-00002.safetensors") for n in names}
    for shard in sorted(set(half.values())):
        mx.save_safetensors(str(out_dir / shard), {n: weights[n] for n in names if half[n] == shard},
                            metadata={"format": "pt"})
    total = sum(v.nbytes for v in weights.values())
    (out_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": half}, indent=2))
    config["torch_dtype"] = dtype
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    for name in COPY:
        if (Path(checkpoint) / name).exists():
            shutil.copy2(Path(checkpoint) / name, out_dir / name)
    progress(3, 4, "copying the audio tokenizer")
    shutil.copytree(Path(checkpoint) / "audio_tokenizer", out_dir / "audio_tokenizer")
    progress(4, 4, "done")

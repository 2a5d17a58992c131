"""`ttscli convert qwen3-tts-* --to mlx`: re-save a checkpoint in a dtype, optionally quantized.

The output keeps the published layout (file names, tensor names, PyTorch conv layout) so the
same strict loader reads it; quantizing is :mod:`ttscli.quantize` (mlx-lm's packed layout and
config marker) with Qwen3's choice of what stays in full precision.
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

# Quality-critical tensors stay in full precision: the embeddings (text and codec), the output
# heads that are sampled from (codec_head, the code predictor's lm_head list), the projections
# between the talker and the code predictor, the text projection MLP and the speaker encoder.
KEEP = ("embedding", "codec_head", "lm_head", "small_to_mtp_projection", "text_projection", "speaker_encoder")
COPY = ("generation_config.json", "vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.json",
        "preprocessor_config.json", "special_tokens_map.json")


def keep(path: str, module: nn.Module) -> bool:
    """What Qwen3 keeps unquantized: everything but the talker's and code predictor's linears
    outside KEEP."""
    return not isinstance(module, nn.Linear) or any(k in path for k in KEEP)


def convert_mlx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool, q_bits: int, q_group_size: int,
                dtype: str | None, progress=None) -> None:
    from ttscli.models.qwen3_tts.load import load_model

    progress = progress or (lambda *a, **k: None)
    dtype = dtype or "bfloat16"  # the published on-disk dtype
    progress(0, 4, "loading")
    model, _ = load_model(checkpoint, dtype)
    config = read_json(Path(checkpoint) / "config.json")
    if is_quantized(config):
        raise UsageError(f"{checkpoint} is already quantized; convert from the original checkpoint")
    progress(1, 4, "quantizing" if quantize else "casting")
    if quantize:
        config[MARKER] = quantize_layers(model, bits=q_bits, group_size=q_group_size, keep=keep)
    weights = dict(tree_flatten(model.parameters()))    # the published names and layouts
    progress(2, 4, "saving")
    out_dir.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights, metadata={"format": "pt"})
    config["torch_dtype"] = dtype
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    for name in COPY:
        if (Path(checkpoint) / name).exists():
            shutil.copy2(Path(checkpoint) / name, out_dir / name)
    progress(3, 4, "copying the speech tokenizer")
    st = Path(checkpoint) / "speech_tokenizer"
    if st.is_dir():
        shutil.copytree(st, out_dir / "speech_tokenizer")
    progress(4, 4, "done")

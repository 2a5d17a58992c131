"""`ttscli convert qwen3-tts-* --to mlx`: re-save a checkpoint in a dtype, optionally quantized.

The output keeps the published layout (file names, tensor names, PyTorch conv layout) so the
same strict loader reads it; quantized linears follow mlx-lm's convention: ``weight`` becomes
packed uint32 plus ``scales`` and ``biases``, and config.json gains
``"quantization": {"group_size": G, "bits": B}``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ttscli.errors import UsageError

# Quality-critical tensors stay in full precision: the embeddings (text and codec), the output
# heads that are sampled from (codec_head, the code predictor's lm_head list), the projections
# between the talker and the code predictor, the text projection MLP and the speaker encoder.
KEEP = ("embedding", "codec_head", "lm_head", "small_to_mtp_projection", "text_projection", "speaker_encoder")
COPY = ("generation_config.json", "vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.json",
        "preprocessor_config.json", "special_tokens_map.json")


def quantizable(path: str, module: nn.Module, group_size: int) -> bool:
    if not isinstance(module, nn.Linear) or any(k in path for k in KEEP):
        return False
    return module.weight.shape[-1] % group_size == 0


def quantize_model(model: nn.Module, bits: int, group_size: int) -> int:
    """Quantize the talker and code-predictor linears in place; returns how many were quantized."""
    chosen = []

    def pred(path, module):
        ok = quantizable(path, module, group_size)
        if ok:
            chosen.append(path)
        return ok

    nn.quantize(model, group_size=group_size, bits=bits, class_predicate=pred)
    return len(chosen)


def apply_quantization(model: nn.Module, config: dict, weights: dict) -> None:
    """Before loading a converted checkpoint: turn exactly the linears that carry scales into
    QuantizedLinear, so the strict loader sees the same tensor set as the file."""
    q = config.get("quantization")
    if not q:
        return
    nn.quantize(model, group_size=q["group_size"], bits=q["bits"],
                class_predicate=lambda path, m: isinstance(m, nn.Linear) and f"{path}.scales" in weights)


def _to_published_layout(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """Our speaker encoder holds convs as MLX [out, k, in]; the published file has [out, in, k]."""
    out = {}
    for k, v in weights.items():
        if k.startswith("speaker_encoder.") and k.endswith(".weight") and v.ndim == 3:
            v = mx.swapaxes(v, 1, 2)
        out[k] = v
    return out


def convert_mlx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool, q_bits: int, q_group_size: int,
                dtype: str | None, progress=None) -> None:
    from ttscli.models.qwen3_tts.loader import load_model

    progress = progress or (lambda *a, **k: None)
    dtype = dtype or "bfloat16"  # the published on-disk dtype
    progress(0, 4, "loading")
    model, _ = load_model(checkpoint, dtype)
    if getattr(model, "pending_speaker_encoder", None):
        raise UsageError("the speaker encoder module is missing from this ttscli build; cannot convert a Base model")
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    if config.get("quantization"):
        raise UsageError(f"{checkpoint} is already quantized; convert from the original checkpoint")
    progress(1, 4, "quantizing" if quantize else "casting")
    if quantize:
        n = quantize_model(model, q_bits, q_group_size)
        if n == 0:
            raise UsageError(f"no linear layer has an input size divisible by --q-group-size {q_group_size}")
        config["quantization"] = {"group_size": q_group_size, "bits": q_bits}
    weights = _to_published_layout(dict(tree_flatten(model.parameters())))
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

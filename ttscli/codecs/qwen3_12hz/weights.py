"""Load the speech decoder from speech_tokenizer/ (strictly), or build it with random weights."""
from __future__ import annotations

import math
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from ttscli.checkpoint import load_strict, read_safetensors
from ttscli.errors import CheckpointError

from .config import DecoderArgs
from .decoder import SpeechDecoder

PREFIX = "decoder."


def _checkpoint_name(key: str) -> str:
    return key.replace(".codebook.", "._codebook.")


def checkpoint_shapes(model: SpeechDecoder) -> dict[str, tuple]:
    """Every ``decoder.*`` tensor of speech_tokenizer/model.safetensors and its shape (the convs
    hold the PyTorch layout; ttscli.nn.conv derives its GEMM layouts)."""
    return {PREFIX + _checkpoint_name(k): tuple(v.shape) for k, v in tree_flatten(model.parameters())}


def sanitize(model: SpeechDecoder, weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """Checkpoint ``decoder.*`` tensors -> this module's names."""
    return {k[len(PREFIX):].replace("._codebook.", ".codebook."): w
            for k, w in weights.items() if k.startswith(PREFIX)}


def _install(model: SpeechDecoder, weights: dict[str, mx.array], dtype, source: str) -> SpeechDecoder:
    """Strictly load checkpoint-layout ``decoder.*`` tensors; codebooks stay float32 until
    ``prepare()`` has projected them."""
    load_strict(model, weights, expected=checkpoint_shapes(model), sanitize=lambda w: sanitize(model, w),
                dtype=dtype, keep_dtype=lambda name: ".codebook." in name, source=source,
                hint="use the model's own speech_tokenizer/ folder")
    model.eval()
    return model.prepare()


def load_speech_decoder(path: Path, dtype: str = "float32") -> SpeechDecoder:
    """The decoder of a speech tokenizer folder (``config.json`` + ``model.safetensors``).

    ``path`` is the ``speech_tokenizer/`` folder itself or a model folder that contains one.
    ``encoder.*`` tensors are ignored; ``decoder.*`` must match the config exactly.
    """
    path = Path(path)
    if not (path / "config.json").is_file() and (path / "speech_tokenizer" / "config.json").is_file():
        path = path / "speech_tokenizer"
    cfg, weights_file = path / "config.json", path / "model.safetensors"
    for f in (cfg, weights_file):
        if not f.is_file():
            raise CheckpointError(f"speech tokenizer file missing: {f}")
    args = DecoderArgs.from_tokenizer_config(cfg)
    weights = {k: v for k, v in read_safetensors(weights_file).items() if k.startswith(PREFIX)}
    return _install(SpeechDecoder(args), weights, dtype, f"{weights_file} (speech decoder)")


def random_weights(model: SpeechDecoder, seed: int = 0) -> dict[str, mx.array]:
    """Checkpoint-layout weights with the statistics the goldens use (audio neither silent nor clipped)."""
    key = mx.random.key(seed)
    out = {}
    for i, (name, shape) in enumerate(sorted(checkpoint_shapes(model).items())):
        k = mx.random.fold_in(key, i) if hasattr(mx.random, "fold_in") else mx.random.key(seed * 100003 + i)
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "cluster_usage":
            v = mx.random.uniform(0.5, 2.0, shape, key=k)
        elif leaf == "embedding_sum":
            v = mx.random.normal(shape, key=k) * 0.3     # usage ~1: entries ~N(0, 0.3)
        elif leaf in ("alpha", "beta"):
            v = mx.random.normal(shape, key=k) * 0.3
        elif leaf in ("scale", "gamma"):
            v = mx.random.uniform(0.2, 0.6, shape, key=k)
        elif "norm" in name and leaf == "weight":
            v = 1.0 + 0.1 * mx.random.normal(shape, key=k)
        elif leaf == "bias":
            v = 0.05 * mx.random.normal(shape, key=k)
        else:
            fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
            if ".block.1.conv." in name or name.startswith("decoder.upsample.") and name.endswith(".0.conv.weight"):
                fan_in = shape[0] * 2                        # transposed conv: in * (k / stride)
            v = mx.random.normal(shape, key=k) / math.sqrt(fan_in)
            if name.endswith("conv2.conv.weight"):
                v = v * 0.3
        out[name] = v
    n = len(model.decoder) - 1
    out[f"{PREFIX}decoder.{n}.conv.weight"] = out[f"{PREFIX}decoder.{n}.conv.weight"] * 0.1
    return out


def build_random_decoder(dtype: str = "float32", args: DecoderArgs | None = None, seed: int = 0) -> SpeechDecoder:
    """The decoder at the released dimensions (or ``args``) with random weights, for bench."""
    model = SpeechDecoder(args or DecoderArgs())
    return _install(model, random_weights(model, seed), dtype, "random weights")

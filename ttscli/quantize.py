"""The one quantizer: an MLX module's layers to ``bits``-bit affine groups, and the way back in.

Layers that MLX can quantize (``to_quantized``: Linear, Embedding) are quantized unless the
family's predicate ``keep(path, module)`` says that one stays in full precision (Qwen3 keeps its
embeddings and sampled heads; each family passes its own). A quantized layer is stored as
mlx-lm does: ``weight`` packed into uint32 plus ``scales`` and ``biases``, and config.json
carries the marker ``"quantization": {"group_size": G, "bits": B}``.

Reading back: :func:`prepare` turns exactly the layers whose ``scales`` are in the file into
quantized layers before the strict loader runs. Packed tensors without our marker come from
another tool, whose choice of layers, bits and layouts we cannot know: they are refused with
the tensor named instead of being guessed at.
"""
from __future__ import annotations

from typing import Callable, Mapping

import mlx.core as mx
import mlx.nn as nn

from ttscli.errors import CheckpointError, UsageError

MARKER = "quantization"
Keep = Callable[[str, nn.Module], bool]


def _quantizable(module: nn.Module, group_size: int) -> bool:
    # MLX quantizes along the input dimension in whole groups
    return hasattr(module, "to_quantized") and module.weight.shape[-1] % group_size == 0


def quantize(model: nn.Module, *, bits: int, group_size: int, keep: Keep) -> dict:
    """Quantize ``model`` in place; returns the config marker (``config[MARKER] = ...``).

    UsageError when no layer can be quantized at this group size."""
    chosen: list[str] = []

    def predicate(path: str, module: nn.Module) -> bool:
        ok = _quantizable(module, group_size) and not keep(path, module)
        if ok:
            chosen.append(path)
        return ok

    nn.quantize(model, group_size=group_size, bits=bits, class_predicate=predicate)
    if not chosen:
        raise UsageError(f"no layer has an input size divisible by --q-group-size {group_size}")
    return {"group_size": group_size, "bits": bits}


def is_quantized(config: Mapping) -> bool:
    return bool(config.get(MARKER))


def prepare(model: nn.Module, config: Mapping, weights: Mapping[str, mx.array], source: str) -> None:
    """Before the strict loader: quantize exactly the layers whose ``scales`` the checkpoint
    carries, with the marker's bits and group size; refuse packed tensors without the marker."""
    marker = config.get(MARKER)
    if not marker:
        packed = sorted(k for k, v in weights.items() if v.dtype == mx.uint32 and k.endswith(".weight")
                        and k[:-len("weight")] + "scales" in weights)
        if packed:
            more = f" (+{len(packed) - 1} more)" if len(packed) > 1 else ""
            raise CheckpointError(
                f"{source}: {packed[0]}{more} is quantized (packed uint32 with scales) but config.json has no "
                f"\"{MARKER}\" entry: a conversion by another tool; convert the original checkpoint with "
                "`ttscli convert --to mlx -q`")
        return
    try:
        bits, group_size = int(marker["bits"]), int(marker["group_size"])
    except (TypeError, KeyError, ValueError):
        raise CheckpointError(f"config.json: \"{MARKER}\" should be {{\"group_size\": G, \"bits\": B}}, "
                              f"got {marker!r}") from None
    nn.quantize(model, group_size=group_size, bits=bits,
                class_predicate=lambda path, m: hasattr(m, "to_quantized") and f"{path}.scales" in weights)

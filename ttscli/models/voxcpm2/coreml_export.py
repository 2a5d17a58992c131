"""VoxCPM2's two LM stacks on Core ML (``--backend lm=coreml``, macOS 15+).

The base MiniCPM-4 LM (``base_lm.layers.*``, ``base_lm.norm``: LongRoPE, muP branch scale) and
the residual LM (``residual_lm.*``: no RoPE) as two stateful packages of the shared Core ML LM
export (ttscli.backends.coreml), each without a head: a call feeds one position and returns its
post-norm hidden state, the KV cache in the package's state. The patch loop calls them as it
calls the MLX stacks (:class:`~ttscli.backends.coreml.decoder.CoreMLStack`, same call, same cache
protocol); the text embedding, the patch encoder, FSQ, the fusion, the stop head and the LocDiT
stay where they are.

The tensors are read through the MLX loader (model.safetensors or pytorch_model.bin, named as
the checkpoint names them), then handed over in float32.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ttscli.backends.coreml.weights import ArrayWeights, take
from ttscli.lm.config import stack_shapes

__all__ = ["CAPACITY", "STACKS", "attach", "convert_coreml", "export_coreml"]

FAMILY = "voxcpm2"
STACKS = (("base_lm", "base_lm.mlpackage"), ("residual_lm", "residual_lm.mlpackage"))
KEEP = ("layers.", "norm.")
# KV positions of one text chunk: the prompt (text and a 10 s reference's 63 patches) and
# upstream's bound on the patches, 6 per text token (a 300-character chunk of Chinese is up to
# about 300 tokens); the fp16 caches of the real stacks (28 and 8 layers x 2 KV heads x 128)
# are then 59 and 17 MB
CAPACITY = 2048


def stack_weights(model, name: str):
    """(args, tensors by their names within the stack) of ``model.<name>``."""
    from ttscli.backends.onnx.convert import mlx_params

    stack = getattr(model, name)
    src = ArrayWeights(mlx_params(stack, lambda k: k.startswith(KEEP)), "MLX model")
    return stack.args, take(src, "", stack_shapes(stack.args))


def export_coreml(checkpoint: Path, out_dir: Path, *, model_id: str, capacity: int = CAPACITY,
                  weights_8bit: bool = False, precision: str = "float16") -> dict:
    """Both packages and the manifest naming them (with the main weights file's hash) into ``out_dir``."""
    from ttscli.backends.coreml.export import export_lm
    from ttscli.backends.coreml.manifest import source_files, write_manifest

    from .load import load_model, main_file

    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    model = load_model(checkpoint, dtype="float32")
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = {}
    for name, file in STACKS:
        args, w = stack_weights(model, name)
        entries[name] = export_lm(args, w, out_dir, file, capacity=capacity, weights_8bit=weights_8bit,
                                  precision=precision)
    record = {"checkpoint": str(checkpoint.resolve()), "files": source_files(checkpoint, (main_file(checkpoint),))}
    return write_manifest(out_dir, model=model_id, family=FAMILY, components=entries, source=record)


def convert_coreml(spec, checkpoint: Path, out_dir: Path, *, capacity: int = CAPACITY, quantize: bool = False,
                   q_bits: int = 8, q_group_size: int | None = None, weights_8bit: bool = False,
                   dtype: str | None = None, progress: Callable[..., None] | None = None, **_unused) -> None:
    """``ttscli convert voxcpm2 --to coreml [-q]`` (``capacity``: :data:`CAPACITY`)."""
    from ttscli.backends.coreml.convert import convert_code_decoder

    convert_code_decoder(export_coreml, spec, checkpoint, out_dir, "the base and residual LMs", capacity=capacity,
                         quantize=quantize, q_bits=q_bits, weights_8bit=weights_8bit, dtype=dtype,
                         progress=progress, role="the patch loop's LMs")


def attach(model, checkpoint: Path, compute_units: str = "all") -> str:
    """Run ``model``'s two LM stacks from their Core ML packages (converted from ``checkpoint``,
    found by the manifest's source hashes) and free their MLX layers; returns ``"coreml"``."""
    from ttscli.backends.coreml import require_coreml
    from ttscli.backends.coreml.decoder import CoreMLStack
    from ttscli.backends.coreml.manifest import for_checkpoint

    require_coreml()
    folder, manifest = for_checkpoint(Path(checkpoint), STACKS[0][0])
    model.use_converted_stacks(lambda: tuple(CoreMLStack.open(folder, name, manifest, compute_units,
                                                              instead="--backend lm=mlx") for name, _ in STACKS))
    return "coreml"


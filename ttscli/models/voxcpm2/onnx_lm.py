"""VoxCPM2's two LM stacks on onnxruntime (``--backend lm=onnx[-f32|-int8|-int4]``).

The base MiniCPM-4 LM (``base_lm.layers.*``, ``base_lm.norm``; LongRoPE) and the residual LM
(``residual_lm.*``; no RoPE) as two graphs of the shared decoder-LM export (ttscli.backends.onnx),
each returning every fed position's post-norm hidden state, since the prefill reads them all
(FSQ at the audio positions, then the residual LM over them). The text embedding, the patch
encoder, FSQ, the fusion and the LocDiT stay where they are; :func:`~.generate.stacks` hands the
patch loop these graphs in the MLX stacks' place, same call, same cache protocol.

Why: a patch's LM step reads all 1.7 B parameters for one position; onnxruntime's float32
GEMV read weights at about twice MLX's bandwidth on the project's CPU, and its prefill GEMMs are
faster too (docs/benchmarks.md#voxcpm2-cpu-lm-onnx). ``onnx-f32`` is the goldens' arithmetic up
to summation order; int8 and int4 are opt-in.

Where the graphs live: from a checkpoint, in ttscli's cache (``paths.converted_dir(MODEL,
"onnx-<precision>")``), found by the sha256 of model.safetensors (or pytorch_model.bin);
from random weights, under a fingerprint of the weights. The MLX stacks' layers are then freed:
the graphs hold the weights, and a 1.7 B float32 LM held twice would need twice its 6.8 GB.
Requests then go one at a time (the rows of serve/batch batch the MLX stacks).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ttscli.backends.onnx.graph import Quant
from ttscli.errors import UsageError

FAMILY = "voxcpm2"
GRAPH_LAYOUT = 1
STACKS = (("base_lm", "base_lm.onnx"), ("residual_lm", "residual_lm.onnx"))
KEEP = ("layers.", "norm.")


def export_stacks(model, out_dir: Path, quant: Quant, *, model_id: str, source_record: dict,
                  progress: Callable[..., None] | None = None) -> dict:
    """Both graphs (+ ``.data``) and the manifest into ``out_dir`` from the loaded model's stacks."""
    from ttscli.backends.coreml.weights import ArrayWeights
    from ttscli.backends.onnx.convert import mlx_params
    from ttscli.backends.onnx.export import export_components, export_lm

    def graph(name: str, file: str):
        def build(folder: Path) -> dict:
            stack = getattr(model, name)
            src = ArrayWeights(mlx_params(stack, lambda k: k.startswith(KEEP)), "MLX model")
            return export_lm(stack.args, {k: src.get(k) for k in src.keys()}, folder, file, heads={},
                             max_positions=int(model.args.max_length), quant=quant, all_positions=True)
        return name, f"the {name.replace('_', ' ')}", build

    return export_components(out_dir, [graph(n, f) for n, f in STACKS], model_id=model_id, family=FAMILY,
                             precision=quant.precision, source=source_record, layout=GRAPH_LAYOUT, progress=progress)


def convert_onnx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool = False, q_bits: int = 8,
                 q_group_size: int | None = 32, dtype: str | None = None,
                 progress: Callable[..., None] | None = None, **_) -> None:
    """``ttscli convert voxcpm2 --to onnx [-q --q-bits 8|4]``: both LM graphs of ``checkpoint``."""
    from ttscli.backends.onnx.convert import quant_for
    from ttscli.backends.onnx.export import checkpoint_record

    from .load import load_model, main_file

    if dtype not in (None, "float32"):
        raise UsageError("ONNX graphs compute in float32 (weights float32, int8 or int4); drop --dtype")
    checkpoint = Path(checkpoint)
    export_stacks(load_model(checkpoint, dtype="float32"), out_dir, quant_for(quantize, q_bits, q_group_size),
                  model_id=spec.id, source_record=checkpoint_record(checkpoint, (main_file(checkpoint),)),
                  progress=progress)


def find_or_build(model, checkpoint: Path | None, quant: Quant, model_id: str | None = None) -> Path:
    from ttscli.backends.onnx.convert import mlx_params, model_graphs

    from .load import main_file

    def params():
        return {f"{n}.{k}": v for n, _ in STACKS
                for k, v in mlx_params(getattr(model, n), lambda k: k.startswith(KEEP)).items()}

    return model_graphs(params, checkpoint, quant, model_id, family=FAMILY, layout=GRAPH_LAYOUT,
                        source_files=lambda ck: (main_file(ck),), export=functools.partial(export_stacks, model))


class OnnxStack:
    """One stack's graph, called as the MLX stack is in the patch loop."""

    def __init__(self, lm):
        self.lm = lm

    def make_cache(self):
        return self.lm.new_cache()

    def __call__(self, input_embeddings, cache):
        import mlx.core as mx

        x = np.asarray(input_embeddings.astype(mx.float32))
        return mx.array(self.lm.run(x, cache, ("hidden",))[0])


def check_options(options) -> None:
    """What the ONNX LMs cannot honour, one line each, before anything loads."""
    if options.dtype not in (None, "float32"):
        raise UsageError(f"--dtype {options.dtype}: VoxCPM2's LMs on onnxruntime compute in float32 (weights "
                         "float32, int8 or int4 by the backend name); drop --dtype or use --backend lm=mlx")


def attach(model, backend: str, checkpoint: Path | None, model_id: str | None = None) -> str:
    """Run ``model``'s two LM stacks on onnxruntime from now on and free their MLX layers;
    returns the backend's full name (``onnx-float32`` etc.)."""
    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.onnx.manifest import component, read_manifest
    from ttscli.backends.onnx.runtime import OnnxLM
    from ttscli.backends.select import split_backend

    require_onnxruntime()
    quant = Quant(split_backend(backend)[1])
    folder = find_or_build(model, None if checkpoint is None else Path(checkpoint), quant, model_id)
    manifest = read_manifest(folder)
    model.use_converted_stacks(lambda: tuple(OnnxStack(OnnxLM(folder, component(manifest, n, folder)))
                                             for n, _ in STACKS))
    return f"onnx-{quant.precision}"

"""Build .mlpackage files with coremltools' MIL builder (runs on Linux too; running the packages
needs macOS 15+) and describe each one as a manifest component entry."""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np

from ttscli.backends.blocks import Style
from ttscli.errors import UsageError
from ttscli.lm.config import LMArgs

from .lm import build_step_program, cache_shape

PRECISIONS = ("float16", "float32")
INT8 = "int8-linear-symmetric-per-channel"


def _feature(f, kind: str) -> dict:
    from coremltools.proto import FeatureTypes_pb2 as ft

    t = f.type.stateType.arrayType if kind == "state" else f.type.multiArrayType
    dtype = ft.ArrayFeatureType.ArrayDataType.Name(t.dataType).lower()
    return {"name": f.name, "shape": [int(s) for s in t.shape], "dtype": dtype}


def describe_spec(spec) -> dict:
    """Inputs, outputs and states as a Core ML spec declares them."""
    d = spec.description
    return {"inputs": [_feature(f, "input") for f in d.input],
            "outputs": [_feature(f, "output") for f in d.output],
            "states": [_feature(f, "state") for f in d.state]}


def dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())


def convert_program(prog, weights_8bit: bool = False, precision: str = "float16"):
    """An in-memory mlprogram (macOS 15 target) from a MIL program; 8-bit quantizes linear
    weights only: a global config would also quantize constant tables (RoPE cos/sin, whose
    all-zero sin row at position 0 gets a zero scale), which must stay exact."""
    import coremltools as ct
    import coremltools.optimize.coreml as cto

    if precision not in PRECISIONS:
        raise UsageError(f"Core ML compute precision must be float16 or float32, not {precision!r}")
    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.macOS15,
                       compute_precision=ct.precision.FLOAT16 if precision == "float16" else ct.precision.FLOAT32,
                       skip_model_load=True)
    if weights_8bit:
        q = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel")
        model = cto.linear_quantize_weights(model, config=cto.OptimizationConfig(op_type_configs={"linear": q}))
    return model


def save_package(model, out_dir: Path, file_name: str) -> dict:
    """Save ``model`` as ``out_dir/file_name``; the entry's file, features and size."""
    path = Path(out_dir) / file_name
    if path.exists():
        shutil.rmtree(path)
    model.save(str(path))
    return {"path": file_name, **describe_spec(model.get_spec()), "size_bytes": dir_size(path)}


def export_lm(args: LMArgs, weights: dict[str, np.ndarray], out_dir: Path, file_name: str, *,
              capacity: int, head: np.ndarray | None = None, weights_8bit: bool = False,
              precision: str = "float16", style: Style | None = None, head_bias: np.ndarray | None = None,
              head_norm: tuple[np.ndarray, np.ndarray, float] | None = None) -> dict:
    """The stateful one-position package of an LM stack (see :mod:`.lm`) saved into
    ``out_dir``; returns its manifest entry (kind ``stateful_lm_step``).

    ``capacity``: KV positions (prompt + generated; the runtime raises GenerationError past
    it). ``weights_8bit``: int8 per-channel symmetric linear weights, else fp16.
    ``precision``: compute precision, float16 (what the Neural Engine runs) or float32.
    ``style``: the block's flavour (:class:`~ttscli.backends.blocks.Style`; adjacent-pair RoPE
    stores keys reordered, see :mod:`.lm`). ``head_bias`` / ``head_norm``: the head's bias and a
    norm before it (:func:`~.lm.build_step_program`).
    """
    if capacity < 2:
        raise UsageError(f"capacity ({capacity}) must be at least 2 positions")
    t0 = time.perf_counter()
    style = style or Style()
    model = convert_program(build_step_program(args, weights, capacity, head, style=style, head_bias=head_bias,
                                               head_norm=head_norm), weights_8bit, precision)
    entry = save_package(model, out_dir, file_name)
    return {**entry, "kind": "stateful_lm_step", "capacity": capacity, "compute_precision": precision,
            "weights": INT8 if weights_8bit else "float16", "hidden_size": args.hidden_size,
            "vocab_size": None if head is None else int(head.shape[0]),
            "cache_shape": list(cache_shape(args, capacity)), "lm": lm_description(args),
            "style": dataclasses.asdict(style),
            "build_seconds": round(time.perf_counter() - t0, 2)}


def lm_description(args: LMArgs) -> dict:
    """The LM's arguments as the manifest's JSON reads them back (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(args)))

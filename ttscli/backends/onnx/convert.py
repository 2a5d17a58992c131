"""What every family's ONNX conversion shares: the ``convert["onnx"]`` hook's checks, finding
(or building once) the conversion of a checkpoint in ttscli's cache by its source hashes, and
building graphs from an in-memory MLX model (``--random-weights``) cached by a fingerprint of
its weights.

A family supplies one function, ``export(checkpoint, out_dir, quant, *, model_id, progress)``,
that writes its graphs and the manifest (:mod:`.export`, :mod:`.manifest`); everything around
it lives here, so a second family never writes the cache logic again.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from ttscli.backends.coreml.weights import ArrayWeights, as_float32
from ttscli.backends.manifest import MANIFEST, converted_folders
from ttscli.errors import CheckpointError, UsageError

from .graph import Quant
from .manifest import current, variant

Export = Callable[..., dict]
# the source record of graphs built from in-memory weights: no checkpoint files to hash
RANDOM_SOURCE = {"checkpoint": "MLX model weights", "files": {}}


def quant_for(quantize: bool, q_bits: int, q_group_size: int | None) -> Quant:
    """``-q --q-bits 8|4 --q-group-size N`` as a :class:`Quant` (float32 without ``-q``)."""
    if not quantize:
        return Quant("float32")
    if q_bits not in (4, 8):
        raise UsageError(f"--q-bits {q_bits}: ONNX weights quantize to 8 or 4 bits")
    return Quant({8: "int8", 4: "int4"}[q_bits], q_group_size or 32)


def convert_hook(export: Export) -> Callable[..., None]:
    """A family's ``convert["onnx"]`` hook (``ttscli convert MODEL --to onnx [-q --q-bits 8|4]
    [--q-group-size N]``) over its ``export``; options of other targets are ignored."""

    def convert_onnx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool = False, q_bits: int = 8,
                     q_group_size: int | None = 32, dtype: str | None = None,
                     progress: Callable[..., None] | None = None, **_) -> None:
        if dtype not in (None, "float32"):
            raise UsageError("ONNX graphs compute in float32 (weights float32, int8 or int4); drop --dtype")
        export(checkpoint, out_dir, quant_for(quantize, q_bits, q_group_size), model_id=spec.id, progress=progress)

    return convert_onnx


def build_into(out_dir: Path, build: Callable[[Path], object]) -> None:
    """``build(tmp)`` into a hidden sibling, renamed to ``out_dir`` only once it is complete: an
    interrupted build never leaves a folder that looks converted."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build(tmp)
        shutil.rmtree(out_dir, ignore_errors=True)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def find_or_build(checkpoint: Path, quant: Quant, export: Export, model_id: str | None = None,
                  accept: Callable[[dict], bool] | None = None, variant_name: str | None = None,
                  notice: bool = True) -> Path:
    """The folder converted from ``checkpoint`` at this precision and block size: ttscli's cache
    is searched by source hashes (``accept``: the family's own test of a manifest, e.g. a graph
    layout it needs); when nothing matches, it is built (once) into ``converted_dir(model_id)``.
    ``variant_name``: the cache folder's variant when not ``onnx-<precision>`` (a second graph of
    one model, converted apart, e.g. Chatterbox's flow estimator beside T3). ``notice``: say on
    stderr that a build starts."""
    from ttscli.paths import converted_dir

    checkpoint = Path(checkpoint)
    var = variant_name or variant(quant.precision)
    want = converted_dir(model_id or checkpoint.name, var)
    for folder in [want] + converted_folders(var):
        m = current(folder, checkpoint)
        if m is None:
            continue
        blocks = {c.get("block_size") for c in m.get("components", {}).values()}
        if blocks <= {None, quant.block_size} and (accept is None or accept(m)):
            return folder
    same = "" if variant_name else "; `ttscli convert MODEL --to onnx` does the same"
    if notice:
        sys.stderr.write(f"ttscli: building the ONNX {quant.precision} graphs of {checkpoint} into {want} "
                         f"(once{same})\n")
    build_into(want, lambda tmp: export(checkpoint, tmp, quant, model_id=model_id or checkpoint.name))
    return want


def mlx_params(module, keep: Callable[[str], bool], prefix: str = "") -> dict:
    """float32 numpy views of an MLX module's parameters whose names ``keep`` accepts, renamed
    ``prefix + name``. A quantized model is refused: its packed weights are not the
    checkpoint's tensors."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    # np.asarray shares a float32 MLX array's memory: no second copy of the weights; others
    # (a bfloat16 random model) stay MLX arrays, widened one tensor at a time when read
    # (:class:`~ttscli.backends.coreml.weights.ArrayWeights`), so the float32 copy of a 3.5 B model never exists at once
    out = {prefix + k: np.asarray(v) if v.dtype == mx.float32 else v
           for k, v in tree_flatten(module.parameters()) if keep(k)}
    if any(k.endswith(".scales") for k in out):
        raise CheckpointError("cannot build ONNX graphs from a quantized MLX model; use the original checkpoint")
    return out


def fingerprint(params: Mapping[str, np.ndarray], quant: Quant, layout: object) -> str:
    """Names, shapes and sums of the weights with the precision and the family's graph
    layout: equal for the same random model, different when any of them changes."""
    h = hashlib.sha256(f"{quant.precision}/{quant.block_size}/{layout}".encode())
    for k in sorted(params):
        v = params[k]
        h.update(f"{k}{tuple(v.shape)}{float(np.asarray(as_float32(v), np.float64).sum()):.6e}".encode())
    return h.hexdigest()[:16]


def model_graphs(params: Callable[[], Mapping[str, np.ndarray]], checkpoint: Path | None, quant: Quant,
                 model_id: str | None, *, family: str, layout: object,
                 source_files: Callable[[Path], tuple[str, ...]], export: Callable[..., dict]) -> Path:
    """The folder of a loaded model's graphs at this precision: by the hashes of
    ``source_files(checkpoint)`` when the model was loaded from ``checkpoint`` (:func:`find_or_build`,
    the family's graph ``layout`` required), or, with ``checkpoint`` None, by the fingerprint of
    ``params()`` (:func:`build_from_params`). ``export(out_dir, quant, *, model_id, source_record,
    progress=None)`` writes the graphs and their manifest. A build on first use is announced at a
    terminal only: piped stderr keeps its one line per error."""
    from .export import checkpoint_record, layout_is

    if checkpoint is None:
        return build_from_params(params(), quant, f"{family}/{layout}", lambda src, tmp: export(
            tmp, quant, model_id="random weights", source_record=RANDOM_SOURCE))

    def build(ck, out_dir, q, *, model_id, progress=None):
        return export(out_dir, q, model_id=model_id, source_record=checkpoint_record(ck, source_files(ck)),
                      progress=progress)

    return find_or_build(Path(checkpoint), quant, build, model_id, accept=layout_is(family, layout),
                         notice=sys.stderr.isatty())


def build_from_params(params: Mapping[str, np.ndarray], quant: Quant, layout: object,
                      build: Callable[[object, Path], object]) -> Path:
    """Graphs of in-memory weights (an MLX model's, e.g. random weights at real dimensions for
    ``bench --random-weights``), built once by ``build(source, out_dir)`` (``source``: the
    weights as a weight source whose ``get`` gives float32 numpy) into
    ttscli's cache under their :func:`fingerprint` with the family's graph ``layout``."""
    from ttscli.paths import cache_dir

    out_dir = cache_dir() / "onnx-random" / fingerprint(params, quant, layout)
    if not (out_dir / MANIFEST).is_file():
        build_into(out_dir, lambda tmp: build(ArrayWeights(params, "MLX model"), tmp))
    return out_dir

"""`ttscli convert`: checkpoints to MLX safetensors (optionally quantized), Core ML packages or
ONNX graphs (float32, or int8/int4 block-quantized).

A family declares its targets in ``Family.convert`` (models/base.py):
    convert["mlx"](spec, checkpoint, out_dir, *, quantize, q_bits, q_group_size, dtype, progress) -> None
    convert["coreml"](spec, checkpoint, out_dir, *, capacity, weights_8bit, progress) -> None
    convert["onnx"](spec, checkpoint, out_dir, *, quantize, q_bits, q_group_size, dtype, progress) -> None
writing into an empty `out_dir`. This module owns the rest: argument checks, refusing to
overwrite without --force, and writing into a temp folder renamed into place at the end.
"""
from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ttscli import hub
from ttscli.dtypes import check_dtype
from ttscli.models import family_of
from ttscli.errors import Interrupted, ModelNotFoundError, NotImplementedModelError, UsageError
from ttscli.outfile import Destination, resolve
from ttscli.registry import Registry


@dataclass
class ConvertRequest:
    model: str
    to: str
    output: Path | None = None
    quantize: bool = False
    q_bits: int = 4
    q_group_size: int | None = None          # None: 64 for mlx, 32 for onnx
    dtype: str | None = None
    capacity: int | None = None              # None: the family's own (Qwen3-TTS 256, Chatterbox and Breeze 1024)
    force: bool = False
    model_dir: Path | None = None


def check(req: ConvertRequest) -> None:
    if req.to not in ("mlx", "coreml", "onnx"):
        raise UsageError(f"--to {req.to}: choose mlx, coreml or onnx")
    if req.q_bits not in (4, 8):
        raise UsageError(f"--q-bits {req.q_bits}: choose 4 or 8")
    if req.q_group_size is None:
        req.q_group_size = 32 if req.to == "onnx" else 64
    if req.q_group_size not in (32, 64, 128):
        raise UsageError(f"--q-group-size {req.q_group_size}: choose 32, 64 or 128")
    if req.dtype is not None:
        check_dtype(req.dtype)
    if req.to == "coreml" and req.dtype not in (None, "float16"):
        raise UsageError("Core ML packages compute in float16; drop --dtype or use --dtype float16")
    if req.to == "onnx" and req.dtype not in (None, "float32"):
        raise UsageError("ONNX graphs compute in float32 (weights float32, or int8/int4 with -q); drop --dtype")
    if req.to == "coreml" and req.capacity is not None and not 16 <= req.capacity <= 8192:
        raise UsageError(f"--capacity {req.capacity}: choose 16..8192 positions")
    if req.output is None:
        return
    out = Path(req.output)
    if out.parent.is_dir():     # a missing parent is made by convert(), walked as it is made
        with resolve(out, "-o") as dest:
            check_destination(dest, req.force)


def check_destination(dest: Destination, force: bool) -> None:
    """The output folder may be new, or an existing folder with --force."""
    if dest.kind != "new" and not force:
        raise UsageError(f"{dest.path} already exists; pass --force to overwrite it")
    if dest.kind not in ("new", "folder"):
        raise UsageError(f"{dest.path} exists and is not a folder")


def default_output(spec, req: ConvertRequest) -> Path:
    """ttscli's converted-weights cache: `speak` finds Core ML packages, ONNX graphs (and Piper
    weights) there."""
    from ttscli.paths import converted_dir

    variant = req.to + (f"-q{req.q_bits}" if req.quantize and req.to == "mlx" else "")
    if req.to == "onnx":
        from ttscli.backends.onnx.manifest import variant as onnx_variant

        variant = onnx_variant({8: "int8", 4: "int4"}[req.q_bits] if req.quantize else "float32")
    return converted_dir(spec.cache_id, variant)


def convert(req: ConvertRequest, registry: Registry, note: Callable[[str], None] = print) -> Path:
    check(req)
    spec = registry.resolve(req.model, req.model_dir)
    if req.output is None:
        req.output = default_output(spec, req)
        check(req)
    if not spec.implemented:
        raise NotImplementedModelError(f"{spec.id} is not implemented yet, so it cannot be converted")
    fn = family_of(spec).convert.get(req.to)
    if fn is None:
        have = ", ".join(family_of(spec).convert) or "nothing"
        raise UsageError(f"{spec.id}: conversion to {req.to} is not available for the {spec.family} family "
                         f"(it converts to: {have})")
    if spec.license_notice:
        note(f"note: {spec.license_notice}")
    if req.to in ("coreml", "onnx") and req.model_dir is not None:
        # A Core ML or ONNX conversion reads part of a checkpoint and names any file it lacks, so a
        # --model-dir folder need not hold every file the registry lists (no speech tokenizer).
        checkpoint = Path(req.model_dir).expanduser()
        if not checkpoint.is_dir():
            raise ModelNotFoundError(f"--model-dir {checkpoint} is not a folder")
    else:
        checkpoint = hub.locate(spec, req.model_dir)
    with resolve(req.output, "-o", parents=True) as dest:
        check_destination(dest, req.force)
        return _write_folder(dest, lambda tmp: _run(fn, spec, checkpoint, tmp, req, note))


def _run(fn, spec, checkpoint: Path, tmp: Path, req: ConvertRequest, note: Callable[[str], None]) -> None:
    progress = _progress(note)
    if req.to in ("mlx", "onnx"):
        fn(spec, checkpoint, tmp, quantize=req.quantize, q_bits=req.q_bits, q_group_size=req.q_group_size,
           dtype=req.dtype, progress=progress)
    else:
        if req.quantize and req.q_bits != 8:
            raise UsageError("Core ML weights quantize to 8 bits only; use -q --q-bits 8")
        sized = {} if req.capacity is None else {"capacity": req.capacity}
        fn(spec, checkpoint, tmp, weights_8bit=req.quantize, progress=progress, **sized)


def _write_folder(dest: Destination, fill: Callable[[Path], None]) -> Path:
    """``fill`` a temp folder beside ``dest``'s entry (mode 0777 less the umask), then put it in
    the entry's place; the walk's folder descriptor keeps every step in the folder it checked."""
    tmp_name = f".{dest.name[:200]}.{os.getpid()}.{secrets.token_hex(8)}"
    os.mkdir(tmp_name, 0o777, dir_fd=dest.folder)
    try:
        fill(Path(dest.path).with_name(tmp_name))
        if dest.kind == "folder":
            shutil.rmtree(dest.name, dir_fd=dest.folder)
        os.rename(tmp_name, dest.name, src_dir_fd=dest.folder, dst_dir_fd=dest.folder)
    except KeyboardInterrupt:
        shutil.rmtree(tmp_name, ignore_errors=True, dir_fd=dest.folder)
        raise Interrupted() from None
    except BaseException:
        shutil.rmtree(tmp_name, ignore_errors=True, dir_fd=dest.folder)
        raise
    return Path(dest.path)


def _progress(note: Callable[[str], None]):
    """A `progress(done, total, what)` callback drawing a bar on stderr when it is a terminal."""
    import sys

    if not sys.stderr.isatty():
        return lambda done, total, what="": None
    from rich.console import Console
    from rich.progress import Progress

    state: dict = {}

    def progress(done: int, total: int, what: str = "converting"):
        if "bar" not in state:
            state["bar"] = Progress(console=Console(stderr=True), transient=True)
            state["bar"].start()
            state["task"] = state["bar"].add_task(what, total=total)
        state["bar"].update(state["task"], completed=done, total=total, description=what)
        if done >= total:
            state.pop("bar").stop()

    return progress

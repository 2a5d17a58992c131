"""What a family's Core ML conversion shares when its package is the code decoder: the LM stack
and head read from the checkpoint's names, the package plus the manifest naming it, and the
``convert["coreml"]`` hook's option checks. coremltools is imported only when a package is built.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError
from ttscli.lm.config import LMArgs, stack_shapes

from .decoder import CODE_DECODER
from .manifest import write_manifest
from .weights import take


def lm_with_head(source, args: LMArgs, stack_prefix: str, head: str,
                 vocab: int) -> tuple[LMArgs, dict[str, np.ndarray], np.ndarray]:
    """(args, stack tensors, head ``[vocab, H]``) from a weight source with the checkpoint's
    names: the stack's tensors under ``stack_prefix``, the output head as tensor ``head``."""
    w = take(source, stack_prefix, stack_shapes(args))
    return args, w, take(source, "", {head: (vocab, args.hidden_size)})[head]


def export_code_decoder(lm: tuple[LMArgs, dict[str, np.ndarray], np.ndarray], out_dir: Path, file_name: str, *,
                        model_id: str, family: str, source: dict, capacity: int, weights_8bit: bool = False,
                        precision: str = "float16", **program) -> dict:
    """The package of ``lm`` (:func:`lm_with_head`) as the model's code decoder, and the manifest
    naming it, into ``out_dir``; returns the manifest. ``source``: the manifest's source record;
    ``program``: the block style and head extras of :func:`~.export.export_lm` (``style``,
    ``head_bias``, ``head_norm``)."""
    from .export import export_lm

    args, w, head = lm
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    entry = export_lm(args, w, out_dir, file_name, capacity=capacity, head=head, weights_8bit=weights_8bit,
                      precision=precision, **program)
    return write_manifest(out_dir, model=model_id, family=family, components={CODE_DECODER: entry}, source=source)


def convert_code_decoder(export: Callable[..., dict], spec, checkpoint: Path, out_dir: Path, what: str, *,
                         capacity: int, quantize: bool = False, q_bits: int = 8, weights_8bit: bool = False,
                         dtype: str | None = None, progress: Callable[..., None] | None = None,
                         role: str = "code decoder") -> None:
    """A family's ``convert["coreml"]`` hook (see ttscli/convert.py) over its
    ``export(checkpoint, out_dir, *, model_id, capacity, weights_8bit)``; ``what``: the code
    decoder's name in progress lines (``role``: what it is, when the package is not the code decoder).

    ``quantize`` (with ``q_bits`` 8) or ``weights_8bit``: int8 linear weights, one scale per
    output row (MLX's ``q_group_size`` does not apply to Core ML).
    """
    if quantize and q_bits != 8:
        raise UsageError("Core ML weights quantize to 8 bits only; use -q --q-bits 8")
    if dtype not in (None, "float16"):
        raise UsageError("Core ML packages compute in float16; drop --dtype or use --dtype float16")
    say = progress or (lambda done, total, what="": None)
    say(0, 1, f"Core ML: {what} ({role})")
    export(checkpoint, out_dir, model_id=spec.id, capacity=capacity, weights_8bit=quantize or weights_8bit)
    say(1, 1, f"Core ML: {what} done")

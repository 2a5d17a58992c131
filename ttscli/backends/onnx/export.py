"""Save an LM graph (:mod:`.graph`) and describe it as a manifest component entry.

Weights go to one external-data file next to the graph, written tensor by tensor while the
graph is built: a float32 0.6B talker is close to protobuf's 2 GB limit, a 1.7B one far past
it, and holding either whole in memory next to its source weights costs twice their size.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ttscli.lm.config import LMArgs

from .graph import Quant, build_graph

CACHE_BLOCK = 256


def export_lm(args: LMArgs, weights: Mapping[str, np.ndarray], out_dir: Path, file_name: str, *,
              heads: Mapping[str, np.ndarray], max_positions: int, quant: Quant,
              in_proj: tuple[np.ndarray, np.ndarray] | None = None, cache_block: int = CACHE_BLOCK,
              head_select: str | None = None) -> dict:
    """Build and save ``out_dir/file_name`` (+ ``.data``); its manifest entry (kind ``lm_step``).
    ``head_select``: the heads become one ``logits`` output chosen by this int64 input."""
    import onnx

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    data = file_name + ".data"
    with open(out_dir / data, "wb") as f:
        model = build_graph(args, weights, heads, max_positions=max_positions, quant=quant, in_proj=in_proj,
                            name=Path(file_name).stem, data=f, data_name=data, head_select=head_select)
    onnx.save_model(model, str(out_dir / file_name))
    size = sum((out_dir / f).stat().st_size for f in (file_name, data) if (out_dir / f).exists())
    return {"path": file_name, "data_files": [data] if (out_dir / data).exists() else [], "kind": "lm_step",
            "precision": quant.precision, "block_size": quant.block_size if quant.bits else None,
            "accuracy_level": quant.accuracy_level if quant.bits else None,
            "layers": args.num_hidden_layers, "kv_heads": args.num_key_value_heads, "head_dim": args.head_dim,
            "hidden_size": args.hidden_size, "input_size": args.hidden_size if in_proj is None
            else int(in_proj[0].shape[1]), "max_positions": max_positions, "cache_block": cache_block,
            "heads": ["logits"] if head_select else list(heads),
            "head_select": {"input": head_select, "count": len(heads)} if head_select else None,
            "vocab_size": int(next(iter(heads.values())).shape[0]) if heads else None,
            "lm": json.loads(json.dumps(dataclasses.asdict(args))), "size_bytes": size,
            "build_seconds": round(time.perf_counter() - t0, 2)}

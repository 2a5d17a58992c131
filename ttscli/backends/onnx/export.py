"""Exporting a family's ONNX graphs: an LM graph (:mod:`.graph`) saved with its manifest entry,
and the plumbing every family's onnx_export.py shares (graphs built one after another into one
folder with progress, the manifest written last, the source record and the cache's test of a
folder's graph layout).

Weights go to one external-data file next to the graph, written tensor by tensor while the
graph is built: a float32 0.6B talker is close to protobuf's 2 GB limit, a 1.7B one far past
it, and holding either whole in memory next to its source weights costs twice their size.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from ttscli.lm.config import LMArgs

from ttscli.backends.blocks import Style

from .graph import Quant, Tail, build_graph
from .manifest import source_files, write_manifest

CACHE_BLOCK = 256

# (manifest component, what the progress line calls it, build(out_dir) -> the component's entry)
Graph = tuple[str, str, Callable[[Path], dict]]


def export_lm(args: LMArgs, weights: Mapping[str, np.ndarray], out_dir: Path, file_name: str, *,
              heads: Mapping[str, np.ndarray], max_positions: int, quant: Quant,
              in_proj: tuple[np.ndarray, np.ndarray] | None = None, cache_block: int = CACHE_BLOCK,
              head_select: str | None = None, style: Style | None = None, tail: Tail | None = None,
              all_positions: bool = False) -> dict:
    """Build and save ``out_dir/file_name`` (+ ``.data``); its manifest entry (kind ``lm_step``).
    ``head_select``: the heads become one ``logits`` output chosen by this int64 input;
    ``style`` and ``tail``: as :func:`~.graph.build_graph` takes them."""
    import onnx

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    data = file_name + ".data"
    with open(out_dir / data, "wb") as f:
        model = build_graph(args, weights, heads, max_positions=max_positions, quant=quant, in_proj=in_proj,
                            name=Path(file_name).stem, data=f, data_name=data, head_select=head_select,
                            style=style, tail=tail, all_positions=all_positions)
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
            "all_positions": all_positions,
            "lm": json.loads(json.dumps(dataclasses.asdict(args))), "size_bytes": size,
            "build_seconds": round(time.perf_counter() - t0, 2)}


def export_components(out_dir: Path, graphs: Sequence[Graph], *, model_id: str, family: str, precision: str,
                      source: dict, layout: object, progress: Callable[..., None] | None = None) -> dict:
    """Build ``graphs`` into ``out_dir`` one at a time, then write the manifest (written last, so
    a folder with a manifest is whole); returns it. Each build reads its own weights, so one
    graph's are freed before the next one's are read. ``layout`` (the graph layout version) goes
    into the manifest's source record, where the cache's :func:`layout_is` looks for it."""
    say = progress or (lambda done, total, what="": None)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    components = {}
    for i, (component, what, build) in enumerate(graphs):
        say(i, len(graphs), f"ONNX {precision}: {what}")
        components[component] = build(out_dir)
    say(len(graphs), len(graphs), f"ONNX {precision}: done")
    return write_manifest(out_dir, model=model_id, family=family, precision=precision, components=components,
                          source={**source, "graph_layout": layout})


def checkpoint_record(checkpoint: Path, files: Sequence[str]) -> dict:
    """The manifest's source record: the checkpoint folder and the hashes of the files read."""
    return {"checkpoint": str(Path(checkpoint).resolve()), "files": source_files(checkpoint, tuple(files))}


def layout_is(family: str, layout: object) -> Callable[[dict], bool]:
    """The cache's test of a converted folder's manifest: this family's graphs, this layout (an
    older layout is rebuilt, not run)."""
    return lambda m: m.get("family") == family and m.get("source", {}).get("graph_layout") == layout

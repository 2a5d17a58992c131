"""One network of a pipeline moved onto onnxruntime, as a graph of its own: the export, the
cache and the session around a family's graph builder.

A :class:`GraphComponent` names the graph (family, component, file, cache variant, the
checkpoint files it comes from). Its graph is always built from the weights the loaded MLX
module holds (names as in the checkpoint below ``prefix``), so a checkpoint's weight
preprocessing (weight norm folded, renames) is done once, in the MLX loader. Where the module
came from a checkpoint, the graph is cached under ``paths.converted_dir(model, variant)`` and
found again by the sha256 of ``source_files``; from random or in-memory weights, under a
fingerprint of those weights (:mod:`ttscli.backends.onnx.convert`). A ``layout`` string holds
what no tensor shape says (a head split, a chunk size): a cached graph of another layout is
rebuilt. A graph is float32 unless a :class:`~.graph.Quant` asks for int8 / int4 linear weights
(``--backend NAME=onnx-int8``, where the family offers it): its cache variant and layout then
name the precision.

Used by S3Gen's flow estimator and HiFT decode (Chatterbox) and CosyVoice3's DiT.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ttscli.errors import UsageError

from .graph import Quant

FLOAT32 = Quant("float32")
# build(source, data_file, data_name, quant) -> onnx.ModelProto; ``data_file`` None: weights inline
Build = Callable[..., object]


@dataclass(frozen=True)
class GraphComponent:
    family: str                    # the manifest's family (part of a cached graph's key)
    name: str                      # the component, as ``--backend NAME=onnx`` names it
    file: str                      # the graph's file name in the converted folder
    variant: str                   # the cache folder's variant (paths.converted_dir) in float32
    source_files: tuple[str, ...]  # the checkpoint files the weights come from (hashed)
    prefix: str                    # the module's parameter names get this prefix
    output: str                    # the graph's output
    what: str                      # words for messages ("S3Gen's HiFT")
    external_data: bool = True     # weights in FILE.data beside the graph (large networks)
    keep: Callable[[str], bool] = lambda k: True   # which of the module's parameters the graph reads

    def params(self, module) -> dict:
        from .convert import mlx_params

        return mlx_params(module, self.keep, prefix=self.prefix)

    def check_float32(self, module, backend_option: str) -> None:
        """Refuse a module held in another dtype: the graph computes in float32."""
        import mlx.core as mx
        from mlx.utils import tree_flatten

        dtypes = {v.dtype for k, v in tree_flatten(module.parameters()) if self.keep(k)} - {mx.float32}
        if dtypes:
            raise UsageError(f"{self.what} on onnxruntime computes in float32, not "
                             f"{', '.join(sorted(str(d).split('.')[-1] for d in dtypes))}; use {backend_option}")

    def variant_of(self, quant: Quant) -> str:
        return self.variant if quant.precision == "float32" else self.variant.replace("float32", quant.precision)

    @staticmethod
    def layout_of(layout: str, quant: Quant) -> str:
        # float32 layouts stay as they were, so graphs cached before precisions existed stay valid
        return layout if quant.precision == "float32" else f"{layout}/{quant.precision}-{quant.block_size}"

    def export(self, source, out_dir: Path, build: Build, *, model_id: str, source_record: dict, layout: str,
               info: dict | None = None, quant: Quant = FLOAT32) -> dict:
        """The graph (and its ``.data``) and the manifest into ``out_dir``."""
        import onnx

        from .manifest import write_manifest

        t0 = time.perf_counter()
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        data_files = []
        if self.external_data:
            data = self.file + ".data"
            with open(out_dir / data, "wb") as f:
                model = build(source, f, data, quant)
            data_files = [data]
        else:
            model = build(source, None, "", quant)
        onnx.save_model(model, str(out_dir / self.file))
        entry = {"path": self.file, "data_files": data_files, "kind": self.name, "precision": quant.precision,
                 "block_size": quant.block_size if quant.bits else None,
                 **{k: dataclasses.asdict(v) for k, v in (info or {}).items()},
                 "size_bytes": sum((out_dir / n).stat().st_size for n in [self.file, *data_files]),
                 "build_seconds": round(time.perf_counter() - t0, 2)}
        return write_manifest(out_dir, model=model_id, family=self.family, precision=quant.precision,
                              components={self.name: entry},
                              source={**source_record, "graph_layout": self.layout_of(layout, quant)})

    def find_or_build(self, module, checkpoint: Path | None, model_id: str | None, layout: str, build: Build,
                      info: dict | None = None, quant: Quant = FLOAT32) -> Path:
        """The folder of the graph of ``module``'s weights: by the hashes of ``checkpoint``'s
        source files when the module was loaded from it, else by the weights' fingerprint."""
        from ttscli.backends.coreml.weights import ArrayWeights

        from .convert import RANDOM_SOURCE, build_from_params
        from .convert import find_or_build as shared_find_or_build
        from .manifest import source_files

        params = self.params(module)
        if checkpoint is None:
            return build_from_params(params, quant, layout, lambda src, tmp: self.export(
                src, tmp, build, model_id="MLX model weights", source_record=RANDOM_SOURCE, layout=layout, info=info,
                quant=quant))
        checkpoint = Path(checkpoint)
        record = {"checkpoint": str(checkpoint.resolve()), "files": source_files(checkpoint, self.source_files)}

        def export(_folder, out_dir, quant, *, model_id, progress=None):
            return self.export(ArrayWeights(params, "MLX model"), out_dir, build, model_id=model_id,
                               source_record=record, layout=layout, info=info, quant=quant)

        def accept(m: dict) -> bool:
            return m.get("family") == self.family and self.name in m.get("components", {}) \
                and m.get("source", {}).get("graph_layout") == self.layout_of(layout, quant)

        # a build on first use of the default backend is announced at a terminal only: piped
        # stderr keeps its one line per error
        return shared_find_or_build(checkpoint, quant, export, model_id, accept=accept,
                                    variant_name=self.variant_of(quant),
                                    notice=sys.stderr.isatty())

    def session(self, folder: Path):
        """The graph's session; no memory arena: its tensors grow with the utterance (an arena
        would keep the longest one's high-water mark for the process's life)."""
        from .runtime import component_session

        return component_session(folder, self.name, arena=False)

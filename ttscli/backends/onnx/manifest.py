"""The record of converted ONNX graphs: ``manifest.json`` in each converted folder.

``ttscli convert MODEL --to onnx [-q --q-bits 8|4]`` writes, by default,
``paths.converted_dir(MODEL, "onnx-<precision>")``. Its manifest lists each component graph
with its file, cache geometry and precision, and the sha256 of the checkpoint files it was built
from (:mod:`ttscli.backends.manifest`); a pipeline finds the conversion of its checkpoint
through these hashes (:meth:`~ttscli.backends.manifest.ManifestFormat.current`).
"""
from __future__ import annotations

from pathlib import Path

from ttscli.backends.manifest import MANIFEST, ManifestFormat, built_from, sha256, source_files


class OnnxManifest(ManifestFormat):
    format, version, target, unit = "ttscli-onnx", 1, "onnx", "graph"

    def tools(self) -> dict:
        import onnx
        import onnxruntime

        return {"onnx_version": onnx.__version__, "onnxruntime_version": onnxruntime.__version__}

    def missing(self, folder: Path, entry: dict) -> str | None:
        for f in [entry.get("path", "")] + list(entry.get("data_files", [])):
            if not (folder / f).is_file():
                return f
        return None


RECORD = OnnxManifest()
FORMAT, FORMAT_VERSION = RECORD.format, RECORD.version
write_manifest, read_manifest, component, current = RECORD.write, RECORD.read, RECORD.component, RECORD.current

__all__ = ["MANIFEST", "FORMAT", "FORMAT_VERSION", "RECORD", "built_from", "component", "current", "read_manifest",
           "sha256", "source_files", "variant", "write_manifest"]


def variant(precision: str) -> str:
    """``paths.converted_dir(model_id, variant(precision))``."""
    return f"onnx-{precision}"

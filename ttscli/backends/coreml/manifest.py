"""The one record of converted Core ML packages: ``manifest.json`` in each converted folder.

``ttscli convert MODEL --to coreml`` writes, by default, ``paths.converted_dir(MODEL,
"coreml")``. Its manifest lists which components of the model are Core ML packages, each with
its file, inputs, outputs, states, capacity and precision, and the sha256 of the checkpoint
files it was built from (:mod:`ttscli.backends.manifest`). The pipeline (:func:`for_checkpoint`)
and ``ttscli models`` (:func:`for_model`) read only these files; nothing else says where
packages are.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ttscli.backends.manifest import MANIFEST, ManifestFormat, built_from, converted_folders, source_files
from ttscli.errors import CheckpointError

VARIANT = "coreml"          # paths.converted_dir(model_id, VARIANT)


class CoreMLManifest(ManifestFormat):
    format, version, target, unit = "ttscli-coreml", 2, "coreml", "package"

    def tools(self) -> dict:
        import coremltools as ct

        return {"coremltools_version": ct.__version__, "minimum_deployment_target": "macOS15"}

    def missing(self, folder: Path, entry: dict) -> str | None:
        return None if (folder / entry["path"]).is_dir() else entry["path"]


RECORD = CoreMLManifest()
FORMAT, FORMAT_VERSION = RECORD.format, RECORD.version
write_manifest, read_manifest, component = RECORD.write, RECORD.read, RECORD.component

__all__ = ["MANIFEST", "FORMAT", "FORMAT_VERSION", "VARIANT", "RECORD", "built_from", "component", "for_checkpoint",
           "for_model", "manifests", "read_manifest", "source_files", "write_manifest"]


def manifests() -> Iterator[tuple[Path, dict]]:
    """(folder, manifest) of every valid Core ML conversion in ttscli's cache."""
    for folder in converted_folders(VARIANT):
        try:
            yield folder, read_manifest(folder)
        except CheckpointError:
            continue


def for_model(model_id: str) -> dict | None:
    """The manifest converted for registry id ``model_id`` (``ttscli models``), or None."""
    from ttscli.paths import converted_dir

    return RECORD.find(converted_dir(model_id, VARIANT))


def for_checkpoint(checkpoint: Path, name: str) -> tuple[Path, dict]:
    """(folder, manifest) of the conversion of ``checkpoint`` that has component ``name``."""
    for folder, m in manifests():
        if name in m.get("components", {}) and built_from(m, checkpoint):
            return folder, m
    raise CheckpointError(f"no Core ML {name} converted from {checkpoint}; run `ttscli convert MODEL "
                          f"--model-dir {checkpoint} --to coreml`, or use --code-decoder-backend mlx")

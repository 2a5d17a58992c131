"""The record of converted ONNX graphs: ``manifest.json`` in each converted folder.

``ttscli convert MODEL --to onnx [-q --q-bits 8|4]`` writes, by default,
``paths.converted_dir(MODEL, "onnx-<precision>")``. Its manifest lists each component graph
(keys are the registry's component names, e.g. ``code_decoder``) with its file, cache geometry
and precision, and the sha256 of the checkpoint files it was built from; a pipeline finds the
conversion of its checkpoint through these hashes (:func:`for_checkpoint`), so a changed
checkpoint is never served by a stale graph.
"""
from __future__ import annotations

import json
from pathlib import Path

from ttscli.backends.coreml.manifest import built_from, sha256, source_files  # noqa: F401  (shared hashing)
from ttscli.errors import CheckpointError

MANIFEST = "manifest.json"
FORMAT = "ttscli-onnx"
FORMAT_VERSION = 1


def variant(precision: str) -> str:
    """``paths.converted_dir(model_id, variant(precision))``."""
    return f"onnx-{precision}"


def write_manifest(out_dir: Path, *, model: str, family: str, precision: str, components: dict[str, dict],
                   source: dict) -> dict:
    import onnx
    import onnxruntime

    import ttscli

    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "model": model, "family": family,
                "precision": precision, "ttscli_version": ttscli.__version__, "onnx_version": onnx.__version__,
                "onnxruntime_version": onnxruntime.__version__, "source": source, "components": components}
    (Path(out_dir) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(folder: Path) -> dict:
    """The manifest of ``folder``, checked: format, version, and every graph it lists present."""
    p = Path(folder) / MANIFEST
    try:
        m = json.loads(p.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{p} is missing; run `ttscli convert MODEL --to onnx`") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{p} cannot be read ({e}); convert again") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT or m.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{p} is not a {FORMAT} v{FORMAT_VERSION} manifest; convert again")
    for name, entry in m.get("components", {}).items():
        for f in [entry.get("path", "")] + list(entry.get("data_files", [])):
            if not (Path(folder) / f).is_file():
                raise CheckpointError(f"{p}: the {name} file {f} is missing; convert again")
    return m


def component(manifest: dict, name: str, folder: Path) -> dict:
    try:
        return manifest["components"][name]
    except KeyError:
        raise CheckpointError(f"{folder}: no {name} graph in the manifest; convert again") from None


def current(folder: Path, checkpoint: Path) -> dict | None:
    """The manifest in ``folder`` when it was built from ``checkpoint`` as it is now, else None."""
    try:
        m = read_manifest(folder) if (Path(folder) / MANIFEST).is_file() else None
    except CheckpointError:
        return None
    return m if m is not None and built_from(m, checkpoint) else None

"""The one record of converted Core ML packages: ``manifest.json`` in each converted folder.

``ttscli convert MODEL --to coreml`` writes, by default, ``paths.converted_dir(MODEL,
"coreml")``. Its manifest lists which components of the model are Core ML packages (keys are
the registry's component names, e.g. ``code_decoder``), each with its file, inputs, outputs,
states, capacity and precision, and the sha256 of the checkpoint files it was built from.
The pipeline (:func:`for_checkpoint`) and ``ttscli models`` (:func:`for_model`) read only
these files; nothing else says where packages are.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

from ttscli.errors import CheckpointError

MANIFEST = "manifest.json"
FORMAT = "ttscli-coreml"
FORMAT_VERSION = 2
VARIANT = "coreml"          # paths.converted_dir(model_id, VARIANT)


@functools.lru_cache(maxsize=32)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 22):
            h.update(b)
    return h.hexdigest()


def sha256(path: Path) -> str:
    """Hex digest of a file, computed once per process for an unchanged file."""
    st = os.stat(path)
    return _sha256(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def source_files(checkpoint: Path, rels: tuple[str, ...]) -> dict[str, dict]:
    """``{rel: {"sha256", "size"}}`` of the checkpoint files a conversion read."""
    out = {}
    for rel in rels:
        p = Path(checkpoint) / rel
        if not p.is_file():
            raise CheckpointError(f"{p} is missing; point at the checkpoint folder")
        out[rel] = {"sha256": sha256(p), "size": p.stat().st_size}
    return out


def write_manifest(out_dir: Path, *, model: str, family: str, components: dict[str, dict],
                   source: dict) -> dict:
    """Write ``out_dir/manifest.json``; ``source``: {"checkpoint": str, "files": source_files(...)}."""
    import coremltools as ct

    import ttscli

    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "model": model, "family": family,
                "ttscli_version": ttscli.__version__, "coremltools_version": ct.__version__,
                "minimum_deployment_target": "macOS15", "source": source, "components": components}
    (Path(out_dir) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(folder: Path) -> dict:
    """The manifest of ``folder``, checked: format, version, and every package it lists present."""
    p = Path(folder) / MANIFEST
    try:
        m = json.loads(p.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{p} is missing; run `ttscli convert MODEL --to coreml`") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{p} cannot be read ({e}); convert again") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT or m.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{p} is not a {FORMAT} v{FORMAT_VERSION} manifest; convert again")
    for name, entry in m.get("components", {}).items():
        if not (Path(folder) / entry["path"]).is_dir():
            raise CheckpointError(f"{p}: the {name} package {entry['path']} is missing; convert again")
    return m


def component(manifest: dict, name: str, folder: Path) -> dict:
    try:
        return manifest["components"][name]
    except KeyError:
        raise CheckpointError(f"{folder}: no {name} package in the manifest; convert again") from None


def store() -> Path:
    """The folder holding every converted model (``paths.converted_dir``'s parent)."""
    from ttscli.paths import converted_dir

    return converted_dir("_", VARIANT).parent.parent


def manifests() -> Iterator[tuple[Path, dict]]:
    """(folder, manifest) of every valid Core ML conversion in ttscli's cache."""
    for p in sorted(store().glob(f"*/{VARIANT}/{MANIFEST}")):
        try:
            yield p.parent, read_manifest(p.parent)
        except CheckpointError:
            continue


def for_model(model_id: str) -> dict | None:
    """The manifest converted for registry id ``model_id`` (``ttscli models``), or None."""
    from ttscli.paths import converted_dir

    folder = converted_dir(model_id, VARIANT)
    try:
        return read_manifest(folder) if (folder / MANIFEST).is_file() else None
    except CheckpointError:
        return None


def built_from(manifest: dict, checkpoint: Path) -> bool:
    """True when every source file the manifest names is in ``checkpoint`` with that content
    (sizes compared first, so an unrelated checkpoint costs no hashing)."""
    files = manifest.get("source", {}).get("files") or {}
    paths = {rel: Path(checkpoint) / rel for rel in files}
    if not files or any(not p.is_file() or p.stat().st_size != files[rel]["size"] for rel, p in paths.items()):
        return False
    return all(sha256(p) == files[rel]["sha256"] for rel, p in paths.items())


def for_checkpoint(checkpoint: Path, name: str) -> tuple[Path, dict]:
    """(folder, manifest) of the conversion of ``checkpoint`` that has component ``name``."""
    for folder, m in manifests():
        if name in m.get("components", {}) and built_from(m, checkpoint):
            return folder, m
    raise CheckpointError(f"no Core ML {name} converted from {checkpoint}; run `ttscli convert MODEL "
                          f"--model-dir {checkpoint} --to coreml`, or use --code-decoder-backend mlx")

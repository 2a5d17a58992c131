"""What every backend's conversion record shares: ``manifest.json`` in each converted folder.

A converted folder holds one backend's files for some components of a model (keys are the
registry's component names, e.g. ``code_decoder``) and a manifest naming them, with the sha256
of the checkpoint files they were built from: a pipeline finds the conversion of its checkpoint
through those hashes, so a changed checkpoint is never served by stale files. Each backend's
``manifest.py`` is a :class:`ManifestFormat` (its format tag and version, the tool versions it
records, which files an entry needs on disk); reading, checking and hashing live here.
"""
from __future__ import annotations

import json
from pathlib import Path

from ttscli.errors import CheckpointError
from ttscli.filehash import file_sha256_cached

MANIFEST = "manifest.json"


def sha256(path: Path) -> str:
    """Hex digest of a file, computed once per process for an unchanged file."""
    return file_sha256_cached(path)


def source_files(checkpoint: Path, rels: tuple[str, ...]) -> dict[str, dict]:
    """``{rel: {"sha256", "size"}}`` of the checkpoint files a conversion read."""
    out = {}
    for rel in rels:
        p = Path(checkpoint) / rel
        if not p.is_file():
            raise CheckpointError(f"{p} is missing; point at the checkpoint folder")
        out[rel] = {"sha256": sha256(p), "size": p.stat().st_size}
    return out


def built_from(manifest: dict, checkpoint: Path) -> bool:
    """True when every source file the manifest names is in ``checkpoint`` with that content
    (sizes compared first, so an unrelated checkpoint costs no hashing)."""
    files = manifest.get("source", {}).get("files") or {}
    paths = {rel: Path(checkpoint) / rel for rel in files}
    if not files or any(not p.is_file() or p.stat().st_size != files[rel]["size"] for rel, p in paths.items()):
        return False
    return all(sha256(p) == files[rel]["sha256"] for rel, p in paths.items())


def converted_folders(variant: str) -> list[Path]:
    """Every folder of ttscli's converted-weights cache (``paths.converted_dir(model, variant)``)
    that holds a manifest, in name order."""
    from ttscli.paths import converted_dir

    store = converted_dir("_", variant).parent.parent
    return sorted(p.parent for p in store.glob(f"*/{variant}/{MANIFEST}"))


class ManifestFormat:
    """One backend's manifest. A subclass sets the class attributes and says which tool versions
    it records (:meth:`tools`) and which file of an entry is missing (:meth:`missing`)."""

    format: str          # the "format" tag, e.g. "ttscli-coreml"
    version: int         # bumped when an entry's meaning changes; older manifests are refused
    target: str          # `ttscli convert MODEL --to <target>`
    unit: str            # what a component is called in messages ("package", "graph")

    def tools(self) -> dict:
        """Versions (and such) of the tools that wrote the files, recorded after ttscli's own."""
        raise NotImplementedError

    def missing(self, folder: Path, entry: dict) -> str | None:
        """The first file of component ``entry`` absent from ``folder``, else None."""
        raise NotImplementedError

    def write(self, out_dir: Path, *, model: str, family: str, components: dict[str, dict], source: dict,
              **fields) -> dict:
        """Write ``out_dir/manifest.json``; ``source``: {"checkpoint": str, "files": source_files(...)};
        ``fields``: the backend's own top-level fields (e.g. precision)."""
        import ttscli

        manifest = {"format": self.format, "format_version": self.version, "model": model, "family": family,
                    **fields, "ttscli_version": ttscli.__version__, **self.tools(), "source": source,
                    "components": components}
        (Path(out_dir) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest

    def read(self, folder: Path) -> dict:
        """The manifest of ``folder``, checked: format, version, and every file it lists present."""
        p = Path(folder) / MANIFEST
        try:
            m = json.loads(p.read_text())
        except FileNotFoundError:
            raise CheckpointError(f"{p} is missing; run `ttscli convert MODEL --to {self.target}`") from None
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{p} cannot be read ({e}); convert again") from None
        if not isinstance(m, dict) or m.get("format") != self.format or m.get("format_version") != self.version:
            raise CheckpointError(f"{p} is not a {self.format} v{self.version} manifest; convert again")
        for name, entry in m.get("components", {}).items():
            f = self.missing(Path(folder), entry)
            if f is not None:
                raise CheckpointError(f"{p}: the {name} {self.unit} {f} is missing; convert again")
        return m

    def find(self, folder: Path) -> dict | None:
        """The manifest of ``folder`` when there is a valid one, else None."""
        try:
            return self.read(folder) if (Path(folder) / MANIFEST).is_file() else None
        except CheckpointError:
            return None

    def current(self, folder: Path, checkpoint: Path) -> dict | None:
        """The manifest in ``folder`` when it was built from ``checkpoint`` as it is now, else None."""
        m = self.find(folder)
        return m if m is not None and built_from(m, checkpoint) else None

    def component(self, manifest: dict, name: str, folder: Path) -> dict:
        try:
            return manifest["components"][name]
        except KeyError:
            raise CheckpointError(f"{folder}: no {name} {self.unit} in the manifest; convert again") from None

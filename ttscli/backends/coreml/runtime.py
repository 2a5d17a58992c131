"""Where Core ML runs, loading a package, and checked stateful prediction.

coremltools builds and saves .mlpackage files anywhere, but only runs them on macOS, and the
stateful programs used here (KV cache as Core ML state) need macOS 15+. Everything that runs a
package goes through :func:`require_coreml`, which raises one clear BackendUnavailableError.
"""
from __future__ import annotations

import functools
import platform
import sys
from pathlib import Path

import numpy as np

from ttscli.errors import BackendUnavailableError, CheckpointError, UsageError

MIN_MACOS = (15, 0)
COMPUTE_UNITS = ("all", "cpu_and_gpu", "cpu_only", "cpu_and_ne")


@functools.lru_cache(maxsize=1)
def coreml_available() -> tuple[bool, str]:
    """(True, "") when Core ML models with state can run here, else (False, why)."""
    if sys.platform != "darwin":
        return False, f"Core ML needs macOS 15+ (this is {sys.platform})"
    release = platform.mac_ver()[0]
    try:
        version = tuple(int(p) for p in release.split(".")[:2])
    except ValueError:
        return False, f"Core ML needs macOS 15+ (could not read the macOS version {release!r})"
    if version < MIN_MACOS:
        return False, f"Core ML needs macOS 15+ (this is macOS {release})"
    try:
        import coremltools  # noqa: F401
        from coremltools import libcoremlpython  # noqa: F401  (the runtime bridge; absent off macOS)
    except ImportError as e:
        return False, f"Core ML needs coremltools with its macOS runtime ({e}); pip install coremltools>=8"
    return True, ""


def require_coreml() -> None:
    ok, why = coreml_available()
    if not ok:
        raise BackendUnavailableError(f"{why}; use --code-decoder-backend mlx")


def require_converted(what: str, model_id: str, random_weights: bool) -> None:
    """Before anything loads: Core ML runs here, and the weights are a checkpoint's (its packages
    are converted ahead, found by the checkpoint's hashes); one BackendUnavailableError line else."""
    require_coreml()
    if random_weights:
        raise BackendUnavailableError(f"{what} on Core ML needs a converted checkpoint (ttscli convert {model_id} "
                                      "--to coreml --model-dir DIR); random weights run on mlx")


def load_package(path: Path, compute_units: str = "all"):
    """An ``MLModel`` for a .mlpackage (compiled on first load by Core ML)."""
    require_coreml()
    import coremltools as ct

    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"Core ML package {path} is missing; run `ttscli convert MODEL --to coreml`")
    if compute_units not in COMPUTE_UNITS:
        raise UsageError(f"compute units must be one of {', '.join(COMPUTE_UNITS)}, not {compute_units!r}")
    units = getattr(ct.ComputeUnit, compute_units.upper())
    try:
        return ct.models.MLModel(str(path), compute_units=units)
    except Exception as e:  # Core ML reports compile/load failures as generic exceptions
        raise CheckpointError(f"Core ML could not load {path}: {e}") from e


_NP = {"float32": np.float32, "float16": np.float16, "int32": np.int32}


class CoreMLModel:
    """One loaded package plus its manifest component entry (input names, shapes, dtypes).

    ``predict`` checks inputs against the manifest before calling Core ML, whose own errors
    for a wrong shape are hard to read.
    """

    def __init__(self, package_dir: Path, entry: dict, compute_units: str = "all"):
        self.entry = entry
        self.path = Path(package_dir) / entry["path"]
        self.model = load_package(self.path, compute_units)
        self.inputs = {f["name"]: f for f in entry["inputs"]}
        self.stateful = bool(entry.get("states"))

    def new_state(self):
        if not self.stateful:
            raise UsageError(f"{self.path.name} has no state")
        return self.model.make_state()

    def predict(self, inputs: dict[str, np.ndarray], state=None) -> dict[str, np.ndarray]:
        feed = {}
        for name, spec in self.inputs.items():
            if name not in inputs:
                raise UsageError(f"{self.path.name}: missing input {name!r}")
            a = np.ascontiguousarray(inputs[name], dtype=_NP[spec["dtype"]])
            if list(a.shape) != spec["shape"]:
                raise UsageError(f"{self.path.name}: input {name!r} has shape {list(a.shape)}, "
                                 f"expected {spec['shape']}")
            feed[name] = a
        if self.stateful and state is None:
            raise UsageError(f"{self.path.name} is stateful: pass state=model.new_state()")
        out = self.model.predict(feed, state=state) if self.stateful else self.model.predict(feed)
        return {k: np.asarray(v) for k, v in out.items()}

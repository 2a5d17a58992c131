"""Faster float32 matmul on Linux CPUs.

The Linux ``mlx[cpu]`` wheel links a slow reference BLAS. Loading a real BLAS into the global
symbol scope *before* mlx is imported makes mlx's cblas calls resolve to it: float32 matmuls
become many times faster, and the matrix-vector products a Qwen3-TTS frame is made of (~6.6 GB
of them) run at the memory's pace (docs/benchmarks.md#blas-mkl).

Which one is not one fixed preference: the BLAS that helps one model and CPU hurts another
(on the project's AMD CPU MKL made the Qwen3-TTS frame faster than OpenBLAS, while our MLX Piper
voice ran faster on OpenBLAS; docs/benchmarks.md#qwen3-cpu-backends-before). Order:

1. ``TTSCLI_BLAS`` (``mkl``, ``openblas``, a library path, or ``none`` for mlx's own);
2. a measurement on this CPU, ``python -m ttscli._blas --measure`` (times the same matrix
   work on each installed BLAS in a fresh process, keeps the faster in ttscli's cache);
3. the choice measured for this CPU vendor (:data:`MEASURED`): MLX's BLAS work on a Linux CPU
   is the codec LMs' matrix-vector products now that Piper runs on onnxruntime there;
4. MKL when the ``mkl`` wheel is installed (``pip install 'ttscli[mkl]'``, x86-64 Linux), else
   the system OpenBLAS (Debian's ``libopenblas0-pthread``; ``make`` installs it as root).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - ctypes is imported by the preload itself: `ttscli --help` loads no BLAS
    import ctypes

OPENBLAS = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib64/libopenblasp.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)

loaded: str | None = None
_lib: ctypes.CDLL | None = None
why: str = ""        # how the choice was made, for bench reports

# CPU vendor -> the BLAS measured faster for MLX's work there (see the module docstring)
MEASURED = {"AuthenticAMD": "mkl"}
MEASURE_FILE = "blas.json"


def cpu_id() -> tuple[str, str]:
    """(vendor_id, model name) from /proc/cpuinfo ("" where unknown)."""
    vendor = model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key.strip() == "model name" and not model:
                    model = value.strip()
                if vendor and model:
                    break
    except OSError:
        pass
    return vendor, model


def _measure_path():
    from ttscli.paths import cache_dir

    return cache_dir() / MEASURE_FILE


def measured_choice() -> str | None:
    """The BLAS `--measure` found faster on this CPU (same model name and core count), or None."""
    import json

    try:
        m = json.loads(_measure_path().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(m, dict) or m.get("cpu") != list(cpu_id()) or m.get("cpus") != os.cpu_count():
        return None
    return m.get("choice") if m.get("choice") in ("mkl", "openblas", "none") else None


def mkl_library() -> str | None:
    """libmkl_rt from the installed ``mkl`` distribution (its wheel puts it in <prefix>/lib)."""
    from importlib import metadata

    try:
        files = metadata.distribution("mkl").files or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name.startswith("libmkl_rt.so"):
            path = str(f.locate())
            if os.path.exists(path):
                return os.path.realpath(path)
    return None


def _choices(choice: str) -> list[str]:
    """Libraries to try for ``TTSCLI_BLAS=choice`` ("" = the default order)."""
    if choice.lower() == "mkl":
        return [p for p in (mkl_library(),) if p]
    if choice.lower() == "openblas":
        return list(OPENBLAS)
    if choice:
        return [choice]
    return [p for p in (mkl_library(),) if p] + list(OPENBLAS)


def _warn_mlx_came_first(choice: str) -> None:
    """mlx binds its cblas calls when it is imported, so a BLAS loaded after it serves nothing:
    say so once, since a float32 GEMM of a few dozen rows then runs ~30x slower on a CPU
    (docs/benchmarks.md#mlx-cpu-matmul)."""
    global why
    if choice.lower() == "none" or why == "mlx imported first":
        return
    if not any(os.path.exists(p) for p in _choices(choice)):
        return
    why = "mlx imported first"
    import warnings

    warnings.warn("mlx was imported before ttscli, so mlx's matrix products run on its built-in reference "
                  "BLAS (many times slower on a CPU): import ttscli before mlx", RuntimeWarning, stacklevel=3)


def preload() -> str | None:
    global loaded, _lib, why
    if loaded or not sys.platform.startswith("linux"):
        return loaded
    choice = os.environ.get("TTSCLI_BLAS", "").strip()
    if "mlx.core" in sys.modules:
        _warn_mlx_came_first(choice)
        return loaded
    why = "TTSCLI_BLAS" if choice else ""
    if not choice:
        picked = measured_choice()
        why = "measured on this CPU" if picked else ""
        if picked is None:
            picked = MEASURED.get(cpu_id()[0])
            why = f"measured for {cpu_id()[0]}" if picked else "default order"
        if picked == "none":
            return None
        # a measured pick goes first; the rest of the default order stays as the fallback
        order = _choices(picked or "")
        candidates = order + [p for p in _choices("") if p not in order]
    else:
        candidates = _choices(choice)
    if choice.lower() == "none":
        return None
    problems = []
    for path in candidates:
        if not os.path.exists(path):
            problems.append(f"{path}: no such file")
            continue
        try:
            import ctypes

            _lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as err:
            problems.append(str(err))
            continue
        loaded = path
        break
    if loaded is None and choice:
        # asked for by name, so say so once rather than run ~50x slower in silence
        why = "; ".join(problems) if problems else "the mkl wheel is not installed (pip install 'ttscli[mkl]')"
        sys.stderr.write(f"ttscli: warning: TTSCLI_BLAS={choice} could not be loaded ({why}); "
                         "using mlx's built-in BLAS, which is much slower\n")
    return loaded


class _BeforeMlx:
    """A ``sys.meta_path`` finder that finds nothing: asked for ``mlx`` the first time, it loads
    the BLAS and steps aside. Whoever imports mlx first, mlx's cblas calls resolve to the
    BLAS, and a run that never imports mlx (``--help``, the onnxruntime voice) never loads it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] == "mlx":
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            preload()
        return None


def preload_before_mlx() -> None:
    """:func:`preload` at the first ``import mlx`` (at once if mlx is already imported)."""
    if "mlx" in sys.modules:
        preload()
    elif not any(isinstance(f, _BeforeMlx) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeMlx())


def name() -> str:
    """What serves mlx's BLAS calls, for bench reports."""
    if not loaded:
        return "mlx builtin"
    return ("mkl " if "mkl" in os.path.basename(loaded) else "openblas ") + loaded


PROBE = """
import time
import ttscli._blas as b  # first: the preload must come before mlx
import mlx.core as mx
w = mx.random.normal((3072, 1024)); x = mx.random.normal((1024, 1)); a = mx.random.normal((256, 1024))
mx.eval(w, x, a)
for _ in range(3): mx.eval(w @ x, a @ w.T)
best = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(50): mx.eval(w @ x)
    mx.eval(a @ w.T)
    best.append(time.perf_counter() - t)
print(b.name().split()[0], min(best))
"""


def measure() -> dict:
    """Time the same MLX matrix work (matrix-vector products as a codec LM's frame, one GEMM as
    a prefill) under each installed BLAS, each in a fresh interpreter; keep the faster."""
    import json
    import subprocess

    times = {}
    for choice in ("mkl", "openblas", "none"):
        env = {**os.environ, "TTSCLI_BLAS": choice}
        p = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600,
                           check=False)
        got = p.stdout.split()
        if p.returncode == 0 and len(got) == 2 and (got[0] == choice or choice == "none" and got[0] == "mlx"):
            times[choice] = float(got[1])
    if not times:
        raise RuntimeError("no BLAS could be timed")
    result = {"cpu": list(cpu_id()), "cpus": os.cpu_count(), "seconds": times, "choice": min(times, key=times.get)}
    path = _measure_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":  # python -m ttscli._blas --measure
    if sys.argv[1:] != ["--measure"]:
        sys.exit("usage: python -m ttscli._blas --measure")
    r = measure()
    print(f"{r['choice']} ({', '.join(f'{k} {v * 1e3:.0f} ms' for k, v in r['seconds'].items())}); "
          f"kept in {_measure_path()}")


def num_threads() -> int | None:
    """The loaded BLAS's thread count (None: no BLAS loaded, or one that does not say)."""
    if _lib is not None and hasattr(_lib, "openblas_get_num_threads"):
        return _lib.openblas_get_num_threads()
    if _lib is not None and hasattr(_lib, "MKL_Get_Max_Threads"):
        return _lib.MKL_Get_Max_Threads()
    return None


_one = {"depth": 0, "prev": None}
_one_lock = threading.Lock()


@contextlib.contextmanager
def one_thread():
    """The loaded BLAS on one thread while the block runs, for work that runs its own stages on
    the two cores in parallel (a second BLAS thread per stage would only contend, and an
    OpenMP BLAS spins its idle threads). Process-wide, as the BLAS's setting is: blocks in
    several threads share one count, and the last to leave restores the thread count."""
    with _one_lock:
        if _one["depth"] == 0:
            _one["prev"] = set_num_threads(1)
        _one["depth"] += 1
    try:
        yield
    finally:
        with _one_lock:
            _one["depth"] -= 1
            if _one["depth"] == 0 and _one["prev"] is not None:
                set_num_threads(_one["prev"])


def set_num_threads(n: int) -> int | None:
    """Set the loaded BLAS's thread count process-wide; return the previous one (None: unknown)."""
    if _lib is None:
        return None
    if hasattr(_lib, "openblas_set_num_threads") and hasattr(_lib, "openblas_get_num_threads"):
        prev = _lib.openblas_get_num_threads()
        _lib.openblas_set_num_threads(n)
        return prev
    if hasattr(_lib, "MKL_Set_Num_Threads") and hasattr(_lib, "MKL_Get_Max_Threads"):
        prev = _lib.MKL_Get_Max_Threads()
        _lib.MKL_Set_Num_Threads(n)
        return prev
    return None

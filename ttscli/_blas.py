"""Faster float32 matmul on Linux CPUs.

The Linux ``mlx[cpu]`` wheel links a slow reference BLAS. Loading a real BLAS into the global
symbol scope *before* mlx is imported makes mlx's cblas calls resolve to it. Measured on this
project's 2-core x86-64 machine:

* a 1024x1024 float32 matmul: ~400 ms with the wheel's BLAS, ~7 ms with OpenBLAS;
* 2 GB of 3072x1024 matrix-vector products (a Qwen3-TTS frame is ~6.6 GB of them):
  OpenBLAS 0.3.21 10.7 GB/s, Intel MKL 26 GB/s; the Qwen3-TTS 0.6B frame went 776 -> 379 ms.

Order: ``TTSCLI_BLAS`` (``mkl``, ``openblas``, a library path, or ``none`` for mlx's own),
else MKL when the ``mkl`` wheel is installed (``pip install 'ttscli[mkl]'``, x86-64 Linux),
else the system OpenBLAS (Debian's ``libopenblas0-pthread``; ``make`` installs it as root).
"""
from __future__ import annotations

import ctypes
import os
import sys

OPENBLAS = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib64/libopenblasp.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)

loaded: str | None = None
_lib: ctypes.CDLL | None = None


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


def preload() -> str | None:
    global loaded, _lib
    if loaded or not sys.platform.startswith("linux") or "mlx.core" in sys.modules:
        return loaded
    choice = os.environ.get("TTSCLI_BLAS", "").strip()
    if choice.lower() == "none":
        return None
    problems = []
    for path in _choices(choice):
        if not os.path.exists(path):
            problems.append(f"{path}: no such file")
            continue
        try:
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


def name() -> str:
    """What serves mlx's BLAS calls, for bench reports."""
    if not loaded:
        return "mlx builtin"
    return ("mkl " if "mkl" in os.path.basename(loaded) else "openblas ") + loaded


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

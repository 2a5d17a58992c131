"""Whether MLX can run here, and the one line a user reads when it cannot.

On Linux the ``mlx`` wheel holds only the Python bindings; the library itself (``mlx/lib/libmlx.so``)
comes from exactly one backend wheel: ``mlx-cpu``, ``mlx-cuda-12`` or ``mlx-cuda-13``. They ship the
same file, so two of them in one environment overwrite each other and uninstalling either breaks the
other. ttscli therefore leaves the choice to an extra (``ttscli[cpu]``, ``ttscli[cuda]``,
``ttscli[cuda13]``) and, without one, still speaks with the embedded voice on onnxruntime.
"""
from __future__ import annotations

import sys

from ttscli.errors import BackendUnavailableError

BACKEND_WHEELS = ("mlx-cpu", "mlx-cuda-12", "mlx-cuda-13", "mlx-cuda")
INSTALL_HINT = ("pip install 'ttscli[cpu]' for the CPU, 'ttscli[cuda]' for an NVIDIA GPU with CUDA 12 "
                "or 'ttscli[cuda13]' with CUDA 13")


def installed_backends() -> list[str]:
    """The MLX backend wheels installed in this environment (Linux has one when all is well)."""
    from importlib import metadata

    found = []
    for name in BACKEND_WHEELS:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return found


def is_missing_backend(exc: BaseException) -> bool:
    """True for the ImportError that ``import mlx.core`` raises when no backend wheel is installed."""
    if not isinstance(exc, ImportError):
        return False
    return "libmlx" in str(exc) or (exc.name or "") in ("mlx", "mlx.core")


def unavailable(exc: BaseException) -> BackendUnavailableError:
    """The error to raise in place of ``exc``: what is missing, and the command that installs it."""
    backends = installed_backends()
    if sys.platform == "darwin":
        why = f"mlx does not import ({exc}); MLX needs Apple Silicon and macOS 13.5+: pip install --force-reinstall mlx"
    elif len(backends) > 1:
        why = (f"mlx does not import ({exc}) and {len(backends)} backend wheels share its library "
               f"({', '.join(backends)}): uninstall them all, then {INSTALL_HINT}")
    else:
        why = f"MLX has no working backend here ({exc}): {INSTALL_HINT}"
    return BackendUnavailableError(why)


def require():
    """``mlx.core``, or a BackendUnavailableError naming the extra to install."""
    try:
        import mlx.core as mx
    except ImportError as exc:
        raise unavailable(exc) from None
    return mx


def available() -> bool:
    try:
        require()
    except BackendUnavailableError:
        return False
    return True

"""Which backend each component runs on, on this machine."""
from __future__ import annotations

import platform
import sys
from pathlib import Path

from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.registry import ModelSpec


def mlx_available() -> tuple[bool, str]:
    try:
        import mlx.core as mx  # noqa: F401
    except Exception as e:  # pragma: no cover - mlx is a dependency
        return False, f"mlx cannot be imported: {e}"
    return True, ""


def coreml_available() -> tuple[bool, str]:
    try:
        from ttscli.backends.coreml import coreml_available as real
    except ImportError:
        return _coreml_platform_check()
    return real()


def _coreml_platform_check() -> tuple[bool, str]:
    if sys.platform != "darwin":
        return False, "Core ML needs macOS 15+"
    major = int((platform.mac_ver()[0] or "0").split(".")[0])
    if major < 15:
        return False, f"Core ML needs macOS 15+ (this is macOS {platform.mac_ver()[0]})"
    return True, ""


def available(backend: str) -> tuple[bool, str]:
    return {"mlx": mlx_available, "coreml": coreml_available}.get(backend, lambda: (False, "unknown backend"))()


def converted_coreml_dir(spec: ModelSpec) -> Path:
    from ttscli.paths import converted_dir

    return converted_dir(spec.id, "coreml")


def choose_code_decoder_backend(spec: ModelSpec, requested: str | None, model_dir=None) -> str:
    """--code-decoder-backend, else coreml on macOS 15+ when converted packages exist, else mlx."""
    supported = spec.backends.get("code_decoder")
    if requested is None:
        if supported and "coreml" in supported and coreml_available()[0] and (converted_coreml_dir(spec) / "manifest.json").is_file():
            return "coreml"
        return "mlx"
    requested = requested.lower()
    if supported is None:
        if requested != "mlx":
            raise UsageError(f"{spec.id} has no code decoder to put on {requested}; only mlx applies")
        return requested
    if requested not in supported:
        raise UsageError(f"{spec.id}: code decoder backend '{requested}' is not supported (choose {', '.join(supported)})")
    ok, why = available(requested)
    if not ok:
        raise BackendUnavailableError(f"--code-decoder-backend {requested}: {why}")
    return requested

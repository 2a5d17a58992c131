"""Which backend each component runs on, on this machine."""
from __future__ import annotations

from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.registry import ModelSpec


def mlx_available() -> tuple[bool, str]:
    try:
        import mlx.core as mx  # noqa: F401
    except Exception as e:  # pragma: no cover - mlx is a dependency
        return False, f"mlx cannot be imported: {e}"
    return True, ""


def available(backend: str) -> tuple[bool, str]:
    """(True, "") when ``backend`` can run on this machine, else (False, why)."""
    if backend == "mlx":
        return mlx_available()
    if backend == "coreml":
        from ttscli.backends.coreml import coreml_available

        return coreml_available()
    return False, f"unknown backend {backend!r}"


def choose_code_decoder_backend(spec: ModelSpec, requested: str | None, model_dir=None) -> str:
    """--code-decoder-backend checked against the registry and this machine; mlx when not given
    (Core ML is asked for: its packages come from `ttscli convert --to coreml`)."""
    supported = spec.backends.get("code_decoder")
    if requested is None:
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

"""Which backend each component runs on, on this machine.

A backend name may carry a variant after a dash: ``onnx-int8`` is the ``onnx`` backend at int8
(``onnx`` alone: int8, the default on CPU; ``onnx-f32`` / ``onnx-float32``, ``onnx-int4``).
The registry lists base names only.
"""
from __future__ import annotations

from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.registry import ModelSpec

ONNX_VARIANTS = {"": "int8", "int8": "int8", "int4": "int4", "f32": "float32", "float32": "float32",
                 "fp32": "float32"}


def split_backend(name: str) -> tuple[str, str]:
    """``"onnx-int4"`` -> ``("onnx", "int4")``; ``"mlx"`` -> ``("mlx", "")``; an unknown ONNX
    variant is a UsageError."""
    base, _, var = name.lower().partition("-")
    if base == "onnx":
        if var not in ONNX_VARIANTS:
            raise UsageError(f"backend {name!r}: ONNX precision must be f32, int8 or int4 (e.g. onnx-int4)")
        return base, ONNX_VARIANTS[var]
    if var:
        raise UsageError(f"backend {name!r}: only onnx takes a precision suffix (onnx-f32, onnx-int8, onnx-int4)")
    return base, ""


def mlx_available() -> tuple[bool, str]:
    try:
        import mlx.core as mx  # noqa: F401
    except Exception as e:  # pragma: no cover  # noqa: BLE001 - optional backend probe: mlx can fail to load in many ways
        return False, f"mlx cannot be imported: {e}"
    return True, ""


def available(backend: str) -> tuple[bool, str]:
    """(True, "") when ``backend`` (a base name or ``onnx-<precision>``) can run here, else (False, why)."""
    base, _ = split_backend(backend)
    if base == "mlx":
        return mlx_available()
    if base == "coreml":
        from ttscli.backends.coreml import coreml_available

        return coreml_available()
    if base == "onnx":
        from ttscli.backends.onnx import onnx_available

        return onnx_available()
    return False, f"unknown backend {backend!r}"


def cpu_vendor() -> str:
    """The CPU's vendor string on Linux (``AuthenticAMD``, ``GenuineIntel``), else ""."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def mlx_or_onnx(env_name: str, measured: dict[tuple[str, str], str], gpu_means_mlx: bool = True) -> str:
    """The default of a component that runs on MLX or on onnxruntime: ``$env_name`` (mlx or onnx),
    else MLX when MLX's default device is a GPU and ``gpu_means_mlx`` (the ONNX graphs are CPU
    graphs), else the choice ``measured`` for this OS and CPU vendor (``(platform, vendor) ->
    backend``, ``("darwin", "")`` for macOS), else onnx on Linux and MLX elsewhere; onnx only
    where onnxruntime is installed. ``gpu_means_mlx=False`` never imports MLX (a voice that must
    speak without an MLX backend installed)."""
    import os
    import sys

    env = os.environ.get(env_name, "").strip().lower()
    if env:
        if env not in ("mlx", "onnx"):
            raise UsageError(f"{env_name}={env}: choose mlx or onnx")
        return env
    if gpu_means_mlx:
        import mlx.core as mx

        if mx.default_device().type == mx.DeviceType.gpu:
            return "mlx"
    plat = "linux" if sys.platform.startswith("linux") else sys.platform
    pick = measured.get((plat, cpu_vendor() if plat == "linux" else ""), "onnx" if plat == "linux" else "mlx")
    if pick == "onnx":
        from ttscli.backends.onnx import onnx_available

        if not onnx_available()[0]:
            return "mlx"
    return pick


def pick_mlx_or_onnx(asked: str | None, *, what: str, env_name: str, measured: dict[tuple[str, str], str],
                     gpu_means_mlx: bool = True) -> str:
    """Where a component that runs on MLX or onnxruntime runs: ``asked`` (a pipeline's backend
    option, checked), else :func:`mlx_or_onnx`'s default. onnx where onnxruntime is missing is
    one line naming the way out (choose mlx, or set ``$env_name=mlx``). ``what`` names the
    component in messages."""
    if asked is not None:
        asked = asked.strip().lower()
        if asked not in ("mlx", "onnx"):
            raise UsageError(f"{what} runs on mlx or onnx, not {asked!r}: choose mlx or onnx")
        pick, way_out = asked, "or choose mlx"
    else:
        pick, way_out = mlx_or_onnx(env_name, measured, gpu_means_mlx), f"or set {env_name}=mlx"
    if pick == "onnx":
        from ttscli.backends.onnx import onnx_available

        ok, why = onnx_available()
        if not ok:
            raise BackendUnavailableError(f"{what} on onnx: {why}; {way_out}")
    return pick


def choose_code_decoder_backend(spec: ModelSpec, requested: str | None, model_dir=None) -> str:
    """--code-decoder-backend checked against the registry and this machine; mlx when not given
    (Core ML and ONNX are asked for: their graphs come from `ttscli convert`)."""
    supported = spec.backends.get("code_decoder")
    if requested is None:
        return "mlx"
    requested = requested.lower()
    base, _ = split_backend(requested)
    if supported is None:
        if base != "mlx":
            raise UsageError(f"{spec.id} has no code decoder to put on {requested}; only mlx applies")
        return requested
    if base not in supported:
        raise UsageError(f"{spec.id}: code decoder backend '{requested}' is not supported "
                         f"(choose {', '.join(supported)})")
    ok, why = available(requested)
    if not ok:
        raise BackendUnavailableError(f"--code-decoder-backend {requested}: {why}")
    return requested


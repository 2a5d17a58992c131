"""Compute dtypes by name: the one map that model loading and `ttscli convert` read."""
from __future__ import annotations

from ttscli.errors import UsageError

NAMES = ("float32", "float16", "bfloat16")


def check_dtype(name: str) -> str:
    """``name`` if it is a compute dtype we run in; else one UsageError line listing the choices."""
    if name not in NAMES:
        raise UsageError(f"dtype {name!r} is not supported; choose one of {', '.join(NAMES)}")
    return name


def to_dtype(name):
    """The MLX dtype for a name (None: float32); an ``mx.Dtype`` passes through."""
    import mlx.core as mx  # here, not at import: `ttscli convert`'s argument check must not load MLX

    if isinstance(name, mx.Dtype):
        return name
    return getattr(mx, check_dtype(name or "float32"))

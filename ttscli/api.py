"""The library entry point: resolve a model, find its weights, build its pipeline."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

from ttscli import hub
from ttscli.errors import NotImplementedModelError
from ttscli.models.base import LoadOptions, Pipeline
from ttscli.registry import ModelSpec, Registry, load_registry

DEFAULT_CACHE_LIMIT = 2 << 30


def limit_mlx_cache() -> None:
    """Bound MLX's buffer cache to min(2 GiB, RAM/4), never raising a lower limit already set."""
    import mlx.core as mx

    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 8 << 30
    target = min(DEFAULT_CACHE_LIMIT, ram // 4)
    previous = mx.set_cache_limit(target)
    if previous < target:
        mx.set_cache_limit(previous)


def family_module(spec: ModelSpec):
    return importlib.import_module(f"ttscli.models.{spec.family}")


def load(
    model: str | None = None,
    *,
    model_dir: str | Path | None = None,
    registry: Registry | None = None,
    options: LoadOptions | None = None,
    **option_kw,
) -> Pipeline:
    """Load a model by id or alias (None: the registry default) and return its pipeline."""
    registry = registry or load_registry()
    spec = registry.resolve(model)
    if not spec.implemented:
        raise NotImplementedModelError(
            f"{spec.id} is in the registry but ttscli does not implement it yet; see `ttscli models`"
        )
    options = options or LoadOptions(**option_kw)
    checkpoint = None if options.random_weights else hub.locate(spec, Path(model_dir) if model_dir else None)
    limit_mlx_cache()
    pipe = family_module(spec).load_pipeline(spec, checkpoint, options)
    pipe.spec = spec
    return pipe

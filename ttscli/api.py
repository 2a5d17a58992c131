"""The library entry point: resolve a model, find its weights, build its pipeline."""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from ttscli import hub, mlx_runtime
from ttscli.backends.select import resolve
from ttscli.errors import NotImplementedModelError, UsageError
from ttscli.models import family_of
from ttscli.models.base import PREFILL_MODES, LoadOptions, Pipeline
from ttscli.registry import Registry, load_registry

DEFAULT_CACHE_LIMIT = 2 << 30


def limit_mlx_cache() -> None:
    """Bound MLX's buffer cache to min(2 GiB, RAM/4), never raising a lower limit already set.
    ``load`` calls it only where MLX runs: a model on onnxruntime alone never imports mlx.

    Nothing to bound where MLX has no backend (a Linux install without ``[cpu]`` or ``[cuda]``): the
    onnxruntime voices still load, and an MLX model's own import says what to install.
    """
    if not mlx_runtime.available():
        return
    import mlx.core as mx

    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 8 << 30
    target = min(DEFAULT_CACHE_LIMIT, ram // 4)
    previous = mx.set_cache_limit(target)
    if previous < target:
        mx.set_cache_limit(previous)


def load(
    model: str | None = None,
    *,
    model_dir: str | Path | None = None,
    registry: Registry | None = None,
    options: LoadOptions | None = None,
    **option_kw,
) -> Pipeline:
    """Load a model by id or alias (None: the registry default) and return its pipeline.

    ``options.backends`` (component -> backend) is checked before anything loads; the components
    it leaves out get their defaults here (:func:`ttscli.backends.select.resolve`)."""
    registry = registry or load_registry()
    spec = registry.resolve(model, Path(model_dir) if model_dir else None)
    if not spec.implemented:
        raise NotImplementedModelError(
            f"{spec.id} is in the registry but ttscli does not implement it yet; see `ttscli models`"
        )
    options = options or LoadOptions(**option_kw)
    family = family_of(spec)
    chosen = resolve(spec, family, options.backends, random_weights=options.random_weights)
    options = replace(options, backends={c: choice.backend for c, choice in chosen.items()})
    checkpoint = None if options.random_weights else hub.locate(spec, Path(model_dir) if model_dir else None)
    if "mlx" in options.backends.values() or "mlx.core" in sys.modules:
        limit_mlx_cache()       # before the weights load
    if options.prefill_mode not in PREFILL_MODES:
        raise UsageError(f"prefill mode {options.prefill_mode!r}: choose {' or '.join(PREFILL_MODES)}")
    try:
        pipe = family.load(spec, checkpoint, options)
    except ImportError as exc:
        if mlx_runtime.is_missing_backend(exc):
            raise mlx_runtime.unavailable(exc) from exc
        raise
    if "mlx.core" in sys.modules:
        limit_mlx_cache()       # a pipeline that imported MLX for a part no backend names
    if not isinstance(pipe, Pipeline):
        raise TypeError(f"the {spec.family} family's load() returned {type(pipe).__name__}, not a Pipeline")
    pipe.spec = spec
    return pipe

"""mx.compile with a bounded number of traces, for functions whose input shapes vary per request.

``mx.compile`` keeps one trace per new input shape for as long as the compiled function lives:
a process that synthesizes many texts of different lengths (a server, a batch run) grows by
every length it has seen. Elementwise functions need no shapes at all (``shapeless=True``);
functions that slice or pad by their input's shape cannot be shapeless (MLX cannot infer a
Slice's output shape), so ``compile_bounded`` keeps one compiled function per input signature
and drops the least recently used beyond ``max_shapes``. MLX keys its trace cache on the
compiled Python object and erases the entry when that object is freed, so each signature gets
its own object and dropping it frees its trace.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any, Callable

import mlx.core as mx

# Per site: above what one synthesis reuses (the bench's two Piper sentences use at most 9
# signatures at the busiest of its 45 sites; a longer text moves on chunk by chunk), small enough
# that all sites together hold a few hundred traces (~30 KB each) whatever the process has seen.
MAX_SHAPES = 12


def _signature(args: tuple) -> tuple:
    # arrays by shape and dtype; Python scalars by value (mx.compile bakes them in as constants)
    return tuple((a.shape, a.dtype) if isinstance(a, mx.array) else a for a in args)


class BoundedCompile:
    """``mx.compile(fn)`` holding traces for at most ``max_shapes`` input signatures (LRU)."""

    def __init__(self, fn: Callable, max_shapes: int = MAX_SHAPES):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.max_shapes = max_shapes
        self._compiled: OrderedDict[tuple, Callable] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        key = _signature(args)
        with self._lock:
            f = self._compiled.get(key)
            if f is None:
                # a new object per signature (see the module docstring): partial() is one
                f = self._compiled[key] = mx.compile(functools.partial(self.fn))
                while len(self._compiled) > self.max_shapes:
                    self._compiled.popitem(last=False)
            else:
                self._compiled.move_to_end(key)
        return f(*args)

    def __len__(self) -> int:
        return len(self._compiled)


def compile_bounded(fn: Callable | None = None, *, max_shapes: int = MAX_SHAPES):
    """Decorator or call: ``compile_bounded(fn)`` or ``@compile_bounded(max_shapes=8)``."""
    if fn is None:
        return lambda f: BoundedCompile(f, max_shapes)
    return BoundedCompile(fn, max_shapes)


def compile_shapeless(fn: Callable) -> Callable:
    """``mx.compile(fn, shapeless=True)``: for elementwise functions only (one trace for all
    shapes; inputs of one call must share a shape, or broadcast the same way every call)."""
    return mx.compile(fn, shapeless=True)

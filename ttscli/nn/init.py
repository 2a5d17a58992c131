"""Random weights at a model's real size, for bench and the contract tests (speed and shapes, not speech).

One pool of standard normals is drawn once and every tensor is tiled from it at its own offset:
a 3.5 B-parameter model is made in seconds and with no float32 copy of the whole model, where
drawing every weight anew takes minutes on a CPU. Tiled normals are as good as fresh ones for
timing and for keeping activations finite.
"""
from __future__ import annotations

from typing import Callable

import mlx.core as mx
from mlx.utils import tree_flatten

from ttscli.checkpoint import load_strict
from ttscli.dtypes import to_dtype

POOL_SIZE = 1 << 20
# a prime stride between the tensors' offsets into the pool, so neighbours do not start alike
STRIDE = 7919

# rule(name, weight, normal) -> the weight to use: ``weight`` is the default below, ``normal`` a
# standard-normal tensor of the same shape for rules that draw their own
Rule = Callable[[str, mx.array, mx.array], mx.array]


def fan_in(shape: tuple[int, ...]) -> int:
    """Inputs per output of a [out, ...] weight: a linear's in-features, a conv's kernel x channels."""
    n = 1
    for d in shape[1:]:
        n *= d
    return max(n, 1)


def _normal(pool: mx.array, index: int, shape: tuple[int, ...]) -> mx.array:
    size = 1
    for d in shape:
        size *= d
    tiled = mx.tile(mx.roll(pool, STRIDE * index), -(-size // pool.size)) if size > pool.size else \
        mx.roll(pool, STRIDE * index)
    return tiled[:size].reshape(shape)


def random_weights(model, *, seed: int = 0, dtype=None, keep_float32: Callable[[str], bool] | None = None,
                   rule: Rule | None = None):
    """Give every parameter of ``model`` a deterministic random value and return the model.

    Matrices and conv kernels are N(0, 1/fan_in), the scale at which a layer's output keeps its
    input's magnitude; biases are zero; other vectors (norm scales, running statistics) keep the
    values the modules were built with (MLX draws biases at random when building, everything
    else here is the same for the same seed). ``rule`` lets a family adjust named tensors (a gain that must start
    small, a bias that sets a duration). Tensors are cast to ``dtype`` (None: float32) one at a
    time, except those ``keep_float32(name)`` names.
    """
    dt = to_dtype(dtype or "float32")
    pool = mx.random.normal((POOL_SIZE,), key=mx.random.key(seed))
    weights = {}
    for i, (name, p) in enumerate(tree_flatten(model.parameters())):
        shape = tuple(p.shape)
        normal = _normal(pool, i, shape)
        if p.ndim >= 2:
            w = normal * fan_in(shape) ** -0.5
        elif name.endswith("bias"):
            w = mx.zeros(shape, mx.float32)
        else:
            w = p.astype(mx.float32)
        if rule is not None:
            w = rule(name, w, normal)
        weights[name] = w.astype(mx.float32 if keep_float32 is not None and keep_float32(name) else dt)
        mx.eval(weights[name])
    return load_strict(model, weights, source="random weights")

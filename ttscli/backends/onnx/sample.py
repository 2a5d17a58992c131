"""The sampler of :mod:`ttscli.lm.sample` for one row of logits in numpy, drawing the same ids
as MLX from the same PRNG keys, so a frame loop on onnxruntime needs no MLX call (and no
host sync) per code.

The draw needs, per key, the random numbers MLX draws from it; :func:`noise` makes those of a
whole frame's keys in one MLX call, the rest is numpy. Two draws exist, depending on the
ttscli and MLX at hand: Gumbel-max (``argmax(f + gumbel((1, V), key))``, what
``ttscli.lm.sample.sample`` writes out) and MLX 0.32's ``random.categorical`` on a single row,
which inverts the CDF of ``softmax(f)`` at ``uniform((1,), key)`` (found by measurement).
:func:`method` finds which one ``sample`` uses, once per process; a loop uses this sampler
only when one matches. Filters follow :func:`ttscli.lm.sample.filter_logits` step by step in
float32, with the same guards (NaN is -inf; a row left with nothing finite falls back to its
argmax).
"""
from __future__ import annotations

import functools

import numpy as np

from ttscli.lm.sample import SamplingParams

_F32 = np.float32


METHODS = ("gumbel", "cdf")


def noise(keys, vocab: int, how: str) -> np.ndarray:
    """``float32 [n, vocab]`` Gumbel noise (``how="gumbel"``) or ``[n, 1]`` uniforms (``"cdf"``):
    what a draw of one row of ``vocab`` logits takes from each of ``keys [n, 2]``. One vmapped
    MLX call (4x less time than a call per key, the same numbers: tests/onnx/test_sampler.py)."""
    import mlx.core as mx

    make = {"gumbel": lambda k: mx.random.gumbel((1, vocab), key=k),
            "cdf": lambda k: mx.random.uniform(shape=(1,), key=k)}[how]
    return np.asarray(mx.vmap(make)(keys)).reshape(keys.shape[0], -1)


def _softmax(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):    # a +inf logit makes NaNs, as it does in MLX
        e = np.exp(x - x.max())
        return e / e.sum(dtype=_F32)


def filter_logits(x: np.ndarray, p: SamplingParams) -> np.ndarray:
    """Temperature, top-k, top-p, min-p on float32 ``x [V]`` (filtered ids -> -inf)."""
    x = x / _F32(p.temperature)
    V = x.shape[-1]
    if 0 < p.top_k < V:
        kth = np.partition(x, V - p.top_k)[V - p.top_k]
        x = np.where(x < kth, -np.inf, x).astype(_F32)
    if p.top_p < 1.0:
        s = np.sort(x)
        cum = np.cumsum(_softmax(s), dtype=_F32)
        drop = cum <= _F32(1.0 - p.top_p)
        drop[-1] = False
        thresh = np.where(drop, np.inf, s).min()
        x = np.where(x < thresh, -np.inf, x).astype(_F32)
    if p.min_p > 0.0:
        probs = _softmax(x)
        x = np.where(probs < probs.max() * _F32(p.min_p), -np.inf, x).astype(_F32)
    return x


def draw(f: np.ndarray, noise_row: np.ndarray) -> int:
    """Gumbel-max with a noise row ``[V]``; inverse CDF with a uniform ``[1]`` (never an id of
    probability 0)."""
    if noise_row.size > 1:
        return int(np.argmax(f + noise_row))
    probs = _softmax(f)
    i = int(np.searchsorted(np.cumsum(probs, dtype=_F32), noise_row[0], side="right"))
    # a uniform above a last cumulative sum rounded below 1: the last id that can be drawn
    return i if i < f.shape[-1] and probs[i] > 0 else int(np.flatnonzero(probs)[-1])


def sample_row(logits: np.ndarray, p: SamplingParams, noise_row: np.ndarray | None) -> int:
    """:func:`ttscli.lm.sample.sample` for one row ``[V]`` (or ``[1, V]``) without penalty or
    bias; ``noise_row``: a row of :func:`noise` (unused when greedy)."""
    x = np.asarray(logits, _F32).reshape(-1)
    x = np.where(np.isnan(x), -np.inf, x).astype(_F32)
    fallback = int(np.argmax(x))
    if p.greedy:
        return fallback
    f = filter_logits(x, p)
    if not np.isfinite(f.max()):
        return fallback
    return draw(f, np.asarray(noise_row, _F32).reshape(-1))


@functools.lru_cache(maxsize=1)
def method() -> str | None:
    """Which draw :func:`ttscli.lm.sample.sample` makes with the installed MLX (``"gumbel"`` or
    ``"cdf"``, checked on a few rows, keys and params), or None when neither matches."""
    import mlx.core as mx

    from ttscli.lm.sample import sample

    rng = np.random.default_rng(0)
    params = [SamplingParams(0.9, 50, 1.0), SamplingParams(1.0, 0, 0.8), SamplingParams(0.7, 0, 1.0, 0.05)]
    n, V = 12, 512
    keys = mx.random.split(mx.random.key(7), n)
    logits = (rng.standard_normal((n, V)) * np.arange(1, n + 1)[:, None]).astype(_F32)
    want = [int(sample(mx.array(logits[j:j + 1]), params[j % 3], keys[j]).item()) for j in range(n)]
    for how in METHODS:
        rows = noise(keys, V, how)
        if [sample_row(logits[j], params[j % 3], rows[j]) for j in range(n)] == want:
            return how
    return None

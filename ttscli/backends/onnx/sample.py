"""The sampler of :mod:`ttscli.lm.sample` for one row of logits in numpy, drawing the same ids
as MLX from the same PRNG keys, so a frame loop on onnxruntime needs no MLX call (and no
host sync) per code.

``ttscli.lm.sample`` draws by Gumbel-max: ``argmax(f + gumbel((1, V), key))`` on the filtered
logits ``f``. :func:`noise` makes the Gumbel rows of a whole frame's keys in one MLX call; the
filters and the argmax are numpy, following :func:`ttscli.lm.sample.filter_logits` step by
step in float32, with the same guards (NaN is -inf; a row left with nothing finite falls back
to its argmax).
"""
from __future__ import annotations

import numpy as np

from ttscli.lm.sample import SamplingParams, gumbel_rows

_F32 = np.float32


def noise(keys, vocab: int) -> np.ndarray:
    """``float32 [n, vocab]``: the Gumbel row a draw of ``vocab`` logits takes from each of
    ``keys [n, 2]``, in one vmapped MLX call (:func:`ttscli.lm.sample.gumbel_rows`; 4x less time
    than a call per key, the same numbers: tests/onnx/test_sampler.py)."""
    return np.asarray(gumbel_rows((keys.shape[0], vocab), keys))


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
    return int(np.argmax(f + np.asarray(noise_row, _F32).reshape(-1)))

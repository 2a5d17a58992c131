"""Token samplers that run on device (no host sync), with numeric guards.

Order follows Hugging Face ``generate`` so a checkpoint behaves as its reference does:
repetition penalty -> additive bias (suppressed ids, min-new-tokens EOS block) -> temperature
-> top-k -> top-p -> min-p -> draw.  ``do_sample=False`` (or temperature ~0) is greedy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Iterable

import mlx.core as mx

from ttscli.errors import UsageError

NEG_INF = float("-inf")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0                   # 0: off
    top_p: float = 1.0               # 1: off
    min_p: float = 0.0               # 0: off
    repetition_penalty: float = 1.0  # 1: off
    do_sample: bool = True

    def validate(self, what: str = "sampling") -> "SamplingParams":
        bad = None
        if not math.isfinite(self.temperature) or self.temperature < 0:
            bad = f"temperature must be >= 0, got {self.temperature}"
        elif int(self.top_k) != self.top_k or self.top_k < 0:
            bad = f"top_k must be a non-negative integer, got {self.top_k}"
        elif not (0.0 < self.top_p <= 1.0):
            bad = f"top_p must be in (0, 1], got {self.top_p}"
        elif not (0.0 <= self.min_p < 1.0):
            bad = f"min_p must be in [0, 1), got {self.min_p}"
        elif not math.isfinite(self.repetition_penalty) or self.repetition_penalty <= 0:
            bad = f"repetition_penalty must be > 0, got {self.repetition_penalty}"
        if bad:
            raise UsageError(f"{what}: {bad}")
        return self

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature < 1e-5

    def merged(self, overrides: dict[str, Any] | None) -> "SamplingParams":
        """Copy with the keys of ``overrides`` that name a field (others are ignored)."""
        if not overrides:
            return self
        names = {f.name for f in fields(self)}
        kw = {k: v for k, v in overrides.items() if k in names and v is not None}
        return replace(self, **kw)


def logit_bias(vocab_size: int, banned: Iterable[int]) -> mx.array:
    """Additive ``[vocab]`` bias: -inf at ``banned`` ids, 0 elsewhere (built once, reused)."""
    import numpy as np

    b = np.zeros((vocab_size,), np.float32)
    ids = [i for i in banned if 0 <= i < vocab_size]
    b[ids] = NEG_INF
    return mx.array(b)


def apply_repetition_penalty(logits: mx.array, seen: mx.array, penalty: float) -> mx.array:
    """CTRL rule on ids flagged in ``seen`` (same shape as logits, bool): l/p if l>0 else l*p."""
    if penalty == 1.0:
        return logits
    penalised = mx.where(logits > 0, logits / penalty, logits * penalty)
    return mx.where(seen, penalised, logits)


def filter_logits(logits: mx.array, p: SamplingParams) -> mx.array:
    """Temperature, top-k, top-p and min-p on ``[B, V]`` float32 logits (filtered ids -> -inf)."""
    x = logits / p.temperature
    V = x.shape[-1]
    if 0 < p.top_k < V:
        kth = mx.topk(x, p.top_k, axis=-1).min(axis=-1, keepdims=True)
        x = mx.where(x < kth, NEG_INF, x)
    if p.top_p < 1.0:
        s = mx.sort(x, axis=-1)
        cum = mx.cumsum(mx.softmax(s, axis=-1), axis=-1)
        drop = cum <= (1.0 - p.top_p)
        drop[..., -1] = False
        thresh = mx.where(drop, mx.inf, s).min(axis=-1, keepdims=True)
        x = mx.where(x < thresh, NEG_INF, x)
    if p.min_p > 0.0:
        probs = mx.softmax(x, axis=-1)
        limit = probs.max(axis=-1, keepdims=True) * p.min_p
        x = mx.where(probs < limit, NEG_INF, x)
    return x


def gumbel_rows(shape: tuple[int, int], keys: mx.array | None) -> mx.array:
    """Gumbel noise ``[B, V]``: row ``b`` drawn from ``keys[b]`` (``[B, 2]``), exactly the noise
    :func:`sample` draws for that row alone with its key; ``None``: the global PRNG."""
    if keys is None:
        return mx.random.gumbel(shape)
    return mx.vmap(lambda k: mx.random.gumbel((shape[-1],), key=k))(keys)


def draw(f: mx.array, noise: mx.array) -> mx.array:
    """The Gumbel-max draw: ``argmax(f + noise)`` per row, ``f`` the filtered logits.

    Written out rather than ``mx.random.categorical``, whose method depends on the batch size
    (MLX 0.32 draws one row by inverse CDF and several by Gumbel-max), so that a row's draw is
    the same alone and inside a batch (:func:`ttscli.lm.batch.sample_rows`)."""
    return mx.argmax(f + noise, axis=-1).astype(mx.int32)


def sample_with(logits: mx.array, p: SamplingParams, noise: mx.array | None,
                seen: mx.array | None = None, bias: mx.array | None = None) -> mx.array:
    """:func:`sample` with the draw's Gumbel ``noise [B, V]`` given (ignored when greedy)."""
    x = logits.astype(mx.float32)
    x = mx.where(mx.isnan(x), NEG_INF, x)
    if seen is not None:
        x = apply_repetition_penalty(x, seen, p.repetition_penalty)
    if bias is not None:
        x = x + bias
    fallback = mx.argmax(x, axis=-1).astype(mx.int32)
    if p.greedy:
        return fallback
    f = filter_logits(x, p)
    ok = mx.isfinite(f.max(axis=-1))
    return mx.where(ok, draw(f, noise), fallback)


def sample(logits: mx.array, p: SamplingParams, key: mx.array | None = None,
           seen: mx.array | None = None, bias: mx.array | None = None) -> mx.array:
    """Draw one id per row of ``logits [B, V]``; returns int32 ``[B]``, still lazy.

    Guards: NaN logits count as -inf; if filtering leaves a row with nothing finite, that row
    falls back to the argmax of its unfiltered (but biased) logits instead of drawing garbage.
    """
    noise = None if p.greedy else mx.random.gumbel(logits.shape, key=key)
    return sample_with(logits, p, noise, seen, bias)


class KeyStream:
    """Seeded stream of PRNG keys; ``next()`` splits on device (no host sync)."""

    def __init__(self, seed: int | None):
        import secrets

        self.key = mx.random.key(seed if seed is not None else secrets.randbits(63))

    def next(self) -> mx.array:
        self.key, sub = mx.random.split(self.key)
        return sub

    def take(self, n: int) -> mx.array:
        """``n`` keys at once, shape ``[n, 2]`` (one per code-predictor step)."""
        self.key, sub = mx.random.split(self.key)
        return mx.random.split(sub, n)

"""Batched decoding for codec LMs: several utterances advance through one forward per step.

Each row keeps its own prompt length, positions, sampling state, seed and stop; rows join
(continuous batching) and leave between steps. A row joins by being prefilled alone into
an ordinary :class:`~ttscli.lm.cache.KVCache` (exactly as it would run alone) and is then
merged into the batch's caches; rows that are shorter than the longest are left-padded, the
padding masked out of attention, and each row is rotated at its own positions (``mx.fast.rope``
takes one offset per row). So a row's numbers are those of the same request alone, up to the
rounding of a batched matmul.

MLX still runs one batch at a time per model: the batch is the unit of concurrency, never
threads on one decoder.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx

from ttscli.lm.cache import KVCache
from ttscli.lm.model import DecoderLM
from ttscli.lm.sample import SamplingParams, sample


class BatchKVCache:
    """One layer's keys/values ``[B, kv_heads, T, head_dim]`` for rows that share a write slot.

    Row ``b`` starts at slot ``pad[b]`` (left padding); its position, the RoPE offset, is
    ``idx - pad[b]``. Storage grows in blocks of ``step`` slots like :class:`KVCache`."""

    def __init__(self, keys: mx.array, values: mx.array, pad: Sequence[int], step: int = 256):
        self.keys, self.values = keys, values      # valid up to idx
        self.idx = keys.shape[2]
        self.pad = list(pad)
        self.step = step

    @property
    def offset(self) -> mx.array:
        return mx.array([self.idx - p for p in self.pad], dtype=mx.int32)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        n = keys.shape[2]
        if self.idx + n > self.keys.shape[2]:
            B, H, _, D = self.keys.shape
            grow = ((n + self.step - 1) // self.step) * self.step
            self.keys = mx.concatenate([self.keys[..., :self.idx, :], mx.zeros((B, H, grow, D), self.keys.dtype)], 2)
            self.values = mx.concatenate([self.values[..., :self.idx, :],
                                          mx.zeros((B, H, grow, self.values.shape[3]), self.values.dtype)], 2)
        self.keys[..., self.idx:self.idx + n, :] = keys
        self.values[..., self.idx:self.idx + n, :] = values
        self.idx += n
        return self.keys[..., :self.idx, :], self.values[..., :self.idx, :]

    def visible(self, new: int = 1) -> mx.array:
        """Boolean mask ``[B, 1, new, idx + new]`` for ``new`` more positions: padding is hidden."""
        slots = mx.arange(self.idx + new)
        pad = mx.array(self.pad, dtype=mx.int32)[:, None]
        ok = slots[None, :] >= pad
        causal = slots[None, :] <= mx.arange(self.idx, self.idx + new)[:, None]
        return (ok[:, None, :] & causal[None])[:, None]

    @property
    def state(self) -> list[mx.array]:
        return [self.keys[..., :self.idx, :], self.values[..., :self.idx, :]]


def _rows_kv(c: Any) -> tuple[mx.array, mx.array, list[int]]:
    """(keys, values, pads) of a row cache or a batch cache, trimmed to the written slots."""
    if isinstance(c, BatchKVCache):
        k, v = c.state
        return k, v, list(c.pad)
    k, v = c.state
    return k, v, [0]


def merge(parts: Sequence[Any]) -> BatchKVCache:
    """One layer: batch caches and/or single-row :class:`KVCache` s, concatenated along the
    batch, each left-padded to the longest."""
    kvs = [_rows_kv(c) for c in parts]
    T = max(k.shape[2] for k, _, _ in kvs)
    keys, values, pads = [], [], []
    for k, v, pad in kvs:
        extra = T - k.shape[2]
        if extra:
            k = mx.concatenate([mx.zeros((*k.shape[:2], extra, k.shape[3]), k.dtype), k], 2)
            v = mx.concatenate([mx.zeros((*v.shape[:2], extra, v.shape[3]), v.dtype), v], 2)
        keys.append(k)
        values.append(v)
        pads += [p + extra for p in pad]
    return BatchKVCache(mx.concatenate(keys, 0), mx.concatenate(values, 0), pads)


def select(c: BatchKVCache, keep: Sequence[int]) -> BatchKVCache:
    """The rows ``keep`` of a batch cache; slots that are padding for every kept row are dropped."""
    idx = mx.array(list(keep), dtype=mx.int32)
    k, v = c.state
    pads = [c.pad[i] for i in keep]
    cut = min(pads)
    return BatchKVCache(k[idx, :, cut:], v[idx, :, cut:], [p - cut for p in pads], c.step)


class RowBatch:
    """The caches of the rows now in the batch, for one :class:`DecoderLM` (one list per layer)."""

    def __init__(self, lm: DecoderLM):
        self.lm = lm
        self.caches: list[BatchKVCache] | None = None
        self.size = 0

    def join(self, row_caches: Sequence[list[KVCache]]) -> None:
        """Append rows prefilled alone (their own per-layer caches), in order."""
        if not row_caches:
            return
        layers = len(self.lm.layers)
        self.caches = [merge(([self.caches[i]] if self.caches else []) + [rc[i] for rc in row_caches])
                       for i in range(layers)]
        self.size += len(row_caches)

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only these rows (in this order); the others leave the batch."""
        if len(rows) == self.size and list(rows) == list(range(self.size)):
            return
        self.size = len(rows)
        self.caches = [select(c, rows) for c in self.caches] if rows else None

    def step(self, embeds: mx.array) -> mx.array:
        """One position per row, ``embeds [B, 1, H]`` -> post-norm hidden ``[B, H]``."""
        mask = self.caches[0].visible(embeds.shape[1])
        h = embeds
        for layer, c in zip(self.lm.layers, self.caches):
            h = layer(h, mask, c)
        return self.lm.norm(h)[:, -1, :]


def sample_rows(logits: mx.array, params: Sequence[SamplingParams], keys: Sequence[mx.array | None],
                seen: Sequence[mx.array | None] | None = None,
                bias: Sequence[mx.array | None] | None = None) -> mx.array:
    """One id per row of ``logits [B, V]``, each with its own params, key, seen set and bias:
    the same draw :func:`ttscli.lm.sample.sample` makes for that row alone (int32 ``[B]``)."""
    out = []
    for i, p in enumerate(params):
        out.append(sample(logits[i:i + 1], p, keys[i], None if seen is None else seen[i],
                          None if bias is None else bias[i]))
    return mx.concatenate(out, 0)

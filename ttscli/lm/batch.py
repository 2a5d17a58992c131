"""Batched decoding for codec LMs: several utterances advance through one forward per step.

Each row keeps its own prompt length, positions, sampling state, seed and stop; rows join
(continuous batching) and leave between steps. Rows join by being prefilled without the batch
into an ordinary :class:`~ttscli.lm.cache.KVCache` (alone, or together with rows that join at
the same time with a prompt of the same length) and are then merged into the batch's caches;
rows that are shorter than the longest are left-padded, the padding masked out of attention,
and each row is rotated at its own positions (``mx.fast.rope`` takes one offset per row). So
a row's numbers are those of the same request alone, up to the rounding of a batched matmul.

MLX still runs one batch at a time per model: the batch is the unit of concurrency, never
threads on one decoder.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from ttscli.lm.cache import KVCache
from ttscli.lm.model import DecoderLM
from ttscli.lm.sample import SamplingParams, gumbel_rows, sample_with


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
    return k, v, [0] * k.shape[0]


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
        """Append rows prefilled without the batch (per-layer caches of one row, or of several
        rows of equal length prefilled together), in order."""
        if not row_caches:
            return
        layers = len(self.lm.layers)
        self.caches = [merge(([self.caches[i]] if self.caches else []) + [rc[i] for rc in row_caches])
                       for i in range(layers)]
        self.size += sum(rc[0].state[0].shape[0] for rc in row_caches)

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


class MemberBatch:
    """Requests that each own consecutive rows of one :class:`RowBatch` (a CFG request owns two:
    its conditioned and unconditioned branches), with every row's latest hidden state. Shared by
    the families whose rows are whole requests, so joining, spans and removal are written once."""

    def __init__(self, lm: DecoderLM):
        self.batch = RowBatch(lm)
        self.members: list[Any] = []          # in batch order
        self.hidden: mx.array | None = None   # [rows, H] of the latest position
        self._rows: dict[int, int] = {}

    def join(self, member: Any, caches: Sequence[list[KVCache]], hidden: Sequence[mx.array]) -> None:
        """Append ``member`` with its rows, prefilled without the batch: per-layer ``caches`` of one
        row or of several prefilled together, and their last hidden states ``[rows, H]``."""
        self.batch.join(caches)
        self.hidden = mx.concatenate(([self.hidden] if self.hidden is not None else []) + list(hidden), 0)
        self.members.append(member)
        self._rows[id(member)] = sum(h.shape[0] for h in hidden)

    def spans(self) -> dict[int, tuple[int, int]]:
        """``id(member) -> (first row, end row)`` in the batch."""
        out, at = {}, 0
        for m in self.members:
            n = self._rows[id(m)]
            out[id(m)] = (at, at + n)
            at += n
        return out

    def remove(self, member: Any) -> None:
        """``member``'s rows leave the batch; the others keep their order."""
        lo, hi = self.spans()[id(member)]
        keep = [i for i in range(self.hidden.shape[0]) if not lo <= i < hi]
        self.members.remove(member)
        del self._rows[id(member)]
        self.batch.keep(keep)
        self.hidden = self.hidden[mx.array(keep, dtype=mx.int32)] if keep else None

    def reorder(self, rows_of: Mapping[Any, Sequence[int]]) -> None:
        """Each member's rows become its old rows ``rows_of[member]`` (indices among its own rows,
        repeats allowed, as many as it owns): beam search's surviving beams. One pass over the
        caches for every member reordered in a step."""
        spans, order = self.spans(), []
        for m in self.members:
            lo, hi = spans[id(m)]
            rows = rows_of.get(m)
            if rows is None:
                order += range(lo, hi)
                continue
            if len(rows) != hi - lo or not all(0 <= r < hi - lo for r in rows):
                raise ValueError(f"a member of {hi - lo} rows cannot take rows {list(rows)}")
            order += [lo + r for r in rows]
        if order == list(range(len(order))):
            return
        self.batch.keep(order)
        self.hidden = self.hidden[mx.array(order, dtype=mx.int32)]

    def discard(self, member: Any) -> None:
        """``member`` leaves the batch if it is still in it (a dropped request may have ended)."""
        if member in self.members:
            self.remove(member)

    def step(self, embeds: mx.array) -> mx.array:
        """One position for every row (``embeds [rows, 1, H]``, in batch order)."""
        self.hidden = self.batch.step(embeds)
        mx.async_eval(self.hidden)
        return self.hidden


def sample_rows(logits: mx.array, params: Sequence[SamplingParams], keys: Sequence[mx.array | None] | mx.array,
                seen: Sequence[mx.array | None] | mx.array | None = None,
                bias: Sequence[mx.array | None] | mx.array | None = None) -> mx.array:
    """One id per row of ``logits [B, V]``, each with its own params, key, seen set and bias:
    the same draw :func:`ttscli.lm.sample.sample` makes for that row alone (int32 ``[B]``).

    Rows that share their params (the usual case) are drawn together: one filter over their
    rows and one Gumbel draw with a key per row, so a step costs the same few kernels at any
    batch size. ``keys`` is ``[B, 2]`` or a list (``None``: the global PRNG); ``seen`` and
    ``bias`` are ``[B, V]`` (``[1, V]``: the same for every row) or lists of ``[1, V]`` rows
    (``None`` rows: no penalty, no bias)."""
    B, V = logits.shape
    groups: dict[SamplingParams, list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault(p, []).append(i)
    parts, order = [], []
    for p, rows in groups.items():
        whole = len(rows) == B
        take = None if whole else mx.array(rows, dtype=mx.int32)
        s = _rows(seen, rows, take, V, mx.bool_) if p.repetition_penalty != 1.0 else None
        noise = None if p.greedy else gumbel_rows((len(rows), V), _keys(keys, rows, take))
        parts.append(sample_with(logits if whole else logits[take], p, noise, s,
                                 _rows(bias, rows, take, V, mx.float32)))
        order += rows
    if len(parts) == 1:
        return parts[0]
    inverse = [0] * B
    for pos, i in enumerate(order):
        inverse[i] = pos
    return mx.concatenate(parts, 0)[mx.array(inverse, dtype=mx.int32)]


def _rows(x, rows: list[int], take: mx.array | None, V: int, dtype) -> mx.array | None:
    """``[len(rows), V]`` of a per-row input given whole (``[B, V]``) or as a list (``None`` rows
    filled with zeros: no penalty, no bias); ``None`` when no row has one."""
    if x is None:
        return None
    if isinstance(x, mx.array):
        return x if take is None or x.shape[0] == 1 else x[take]   # one row: shared by all
    got = [x[i] for i in rows]
    if all(g is None for g in got):
        return None
    return mx.concatenate([mx.zeros((1, V), dtype) if g is None else g for g in got], 0)


def _keys(keys, rows: list[int], take: mx.array | None) -> mx.array | None:
    if isinstance(keys, mx.array):
        return keys if take is None else keys[take]
    got = [keys[i] for i in rows]
    if any(k is None for k in got):
        if not all(k is None for k in got):
            raise ValueError("sample_rows: give every row of a params group a key, or none")
        return None
    return mx.stack(got)


def take_pieces(pieces: list[np.ndarray]) -> np.ndarray | None:
    """The audio pieces a row has made since the engine last took them, as one array (None if
    none), emptying ``pieces``."""
    if not pieces:
        return None
    out = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
    pieces.clear()
    return out


class RowAudio:
    """A row's speech decoder stream (``push(codes) -> [samples]``, ``flush() -> samples | None``)
    and the audio it made that the engine has not taken yet.

    A streamed request hands its audio over as each decoder chunk is ready; any other request
    only once its row is done, as ``Pipeline.generate`` yields a one-shot chunk whole."""

    def __init__(self, decoder, stream: bool):
        self.decoder = decoder
        self.stream = stream
        self.pieces: list[np.ndarray] = []

    def push(self, codes: np.ndarray) -> None:
        self.pieces += self.decoder.push(codes)

    def flush(self) -> None:
        tail = self.decoder.flush()
        if tail is not None and len(tail):
            self.pieces.append(tail)

    def take(self, done: bool) -> np.ndarray | None:
        if not (self.stream or done):
            return None
        out = take_pieces(self.pieces)
        return None if out is None else np.asarray(out, np.float32)

"""KV caches owned by one request and passed explicitly into the model (as mlx-lm does).

:class:`KVCache` grows without a fixed cap: storage is allocated in blocks of ``step``
positions and extended by concatenation when full, so a step writes into preallocated memory
instead of copying the whole history.
"""
from __future__ import annotations

import mlx.core as mx


class KVCache:
    """Keys/values ``[B, kv_heads, positions, head_dim]`` for one attention layer."""

    def __init__(self, step: int = 256):
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.offset = 0
        self.step = step

    def reserve(self, n: int, like_k: mx.array, like_v: mx.array) -> None:
        """Make room for ``n`` more positions (storage shaped like ``like_k``/``like_v``)."""
        prev = self.offset
        if self.keys is None or prev + n > self.keys.shape[2]:
            B, H, _, D = like_k.shape
            grow = ((n + self.step - 1) // self.step) * self.step
            new_k = mx.zeros((B, H, grow, D), like_k.dtype)
            new_v = mx.zeros((B, H, grow, like_v.shape[3]), like_v.dtype)
            if self.keys is not None:
                self.keys = mx.concatenate([self.keys[..., :prev, :], new_k], axis=2)
                self.values = mx.concatenate([self.values[..., :prev, :], new_v], axis=2)
            else:
                self.keys, self.values = new_k, new_v

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        prev = self.offset
        n = keys.shape[2]
        self.reserve(n, keys, values)
        self.offset += n
        self.keys[..., prev:self.offset, :] = keys
        self.values[..., prev:self.offset, :] = values
        return self.keys[..., :self.offset, :], self.values[..., :self.offset, :]

    @property
    def state(self) -> list[mx.array]:
        if self.keys is None:
            return []
        return [self.keys[..., :self.offset, :], self.values[..., :self.offset, :]]

    def reset(self) -> None:
        """Forget the history but keep the storage (the code predictor restarts every frame)."""
        self.offset = 0


def make_cache(num_layers: int, step: int = 256) -> list[KVCache]:
    return [KVCache(step) for _ in range(num_layers)]


class SlotCache:
    """One decode step's view of a :class:`KVCache` inside a compiled function.

    The whole storage goes in and comes out (fixed shapes until the cache grows by a block), the
    new key/value is written at the array position ``pos`` and unwritten slots are masked, so
    one trace of the step replays at every position: no retrace, no host-side index.
    """

    def __init__(self, keys: mx.array, values: mx.array, pos: mx.array):
        self.keys, self.values, self.offset = keys, values, pos

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        at = self.offset.reshape(1)
        self.keys = mx.slice_update(self.keys, keys, at, axes=(2,))
        self.values = mx.slice_update(self.values, values, at, axes=(2,))
        return self.keys, self.values

    def make_mask(self, length: int) -> mx.array:
        # one query at pos sees slots 0..pos
        return (mx.arange(self.keys.shape[2]) <= self.offset)[None, None, None, :]


class ConcatCache:
    """Keys/values grown by concatenation: no in-place writes, so a whole short generation (the
    code predictor's 15 steps) can be traced by ``mx.compile`` and replayed."""

    def __init__(self):
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.offset = 0

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys = mx.concatenate([self.keys, keys], axis=2)
            self.values = mx.concatenate([self.values, values], axis=2)
        self.offset += keys.shape[2]
        return self.keys, self.values

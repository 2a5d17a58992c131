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

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        prev = self.offset
        n = keys.shape[2]
        if self.keys is None or prev + n > self.keys.shape[2]:
            B, H, _, D = keys.shape
            grow = ((n + self.step - 1) // self.step) * self.step
            new_k = mx.zeros((B, H, grow, D), keys.dtype)
            new_v = mx.zeros((B, H, grow, values.shape[3]), values.dtype)
            if self.keys is not None:
                self.keys = mx.concatenate([self.keys[..., :prev, :], new_k], axis=2)
                self.values = mx.concatenate([self.values[..., :prev, :], new_v], axis=2)
            else:
                self.keys, self.values = new_k, new_v
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

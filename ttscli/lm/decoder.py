"""The code decoder: the causal LM of a codec-LM TTS as its frame loop sees it.

A family's loop talks to a :class:`CodeDecoder`, so the LM can run on MLX
(:class:`MLXCodeDecoder`) or on another backend (Core ML) while embeddings, per-frame helpers
and sampling stay where they are.  Caches are opaque objects owned by one request.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import mlx.core as mx


@runtime_checkable
class CodeDecoder(Protocol):
    def new_cache(self) -> Any: ...

    def prefill(self, embeds: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        """``embeds [B, T, H]`` -> (logits ``[B, V]``, post-norm hidden ``[B, H]``) of the last position."""
        ...

    def step(self, embed: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        """One position ``[B, 1, H]`` -> (logits ``[B, V]``, hidden ``[B, H]``)."""
        ...


class LMHeadModel(Protocol):
    """What :class:`MLXCodeDecoder` wraps: an MLX LM with its output head."""

    def new_cache(self) -> Any: ...

    def __call__(self, embeds: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        """Logits and post-norm hidden state of the last position of ``embeds``."""
        ...


class MLXCodeDecoder:
    """An MLX LM as a code decoder. ``sequential=True`` prefills one position per call, syncing
    after each (the baseline bench compares batched prefill with, and a parity check)."""

    def __init__(self, model: LMHeadModel, sequential: bool = False):
        self.model = model
        self.sequential = sequential

    def new_cache(self) -> Any:
        return self.model.new_cache()

    def prefill(self, embeds: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        if not self.sequential:
            return self.model(embeds, cache)
        out = None
        for i in range(embeds.shape[1]):
            out = self.model(embeds[:, i:i + 1], cache)
            mx.eval(out, [c.state for c in cache])
        return out

    def step(self, embed: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        return self.model(embed, cache)

"""What a code decoder on another runtime than MLX shares: numpy in and out of that runtime,
arrays handed back in the caller's kind, and opening a component from its converted folder.

The frame loops drive ``new_cache() / prefill(embeds, cache) / step(embed, cache) -> (logits,
hidden)`` (:class:`ttscli.lm.decoder.CodeDecoder`) with ``mx.array`` or numpy. A subclass runs
its runtime on float32 numpy (:meth:`_prefill`, :meth:`_step`); this class converts, so an
``mx.array`` in gives ``mx.array`` out and numpy gives numpy.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .manifest import ManifestFormat

CODE_DECODER = "code_decoder"


def to_numpy(x) -> np.ndarray:
    if type(x).__module__.startswith("mlx"):
        import mlx.core as mx

        x = x.astype(mx.float32)   # numpy has no bfloat16
    return np.asarray(x, dtype=np.float32)


def like(a: np.ndarray, ref):
    """``a`` as the kind of array ``ref`` is (``mx.array`` or numpy)."""
    if type(ref).__module__.startswith("mlx"):
        import mlx.core as mx

        return mx.array(a)
    return a


class ConvertedCodeDecoder:
    """Base of the code decoders over a converted LM. A subclass sets ``record`` (its backend's
    manifest format) and implements :meth:`from_entry`, :meth:`new_cache`, :meth:`_prefill`
    (float32 ``[1, L, H]`` -> the last position's ``(logits [1, V], hidden [1, H])``) and
    :meth:`_step` (one position, ``[1, 1, H]`` or ``[1, H]``)."""

    record: ManifestFormat

    @classmethod
    def open(cls, folder: Path, name: str = CODE_DECODER, manifest: dict | None = None, **kw):
        """Component ``name`` of the converted folder ``folder``; ``kw`` go to :meth:`from_entry`."""
        manifest = manifest or cls.record.read(folder)
        return cls.from_entry(folder, cls.record.component(manifest, name, folder), **kw)

    @classmethod
    def from_entry(cls, folder: Path, entry: dict, **kw):
        raise NotImplementedError

    def new_cache(self) -> Any:
        raise NotImplementedError

    def _prefill(self, x: np.ndarray, cache) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _step(self, x: np.ndarray, cache) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def prefill(self, embeds, cache):
        """``embeds [1, L, H]`` -> (logits ``[1, V]``, hidden ``[1, H]``) of the last position."""
        if embeds.shape[1] < 1:
            raise ValueError("prefill needs at least one position")
        logits, hidden = self._prefill(to_numpy(embeds), cache)
        return like(logits, embeds), like(hidden, embeds)

    def step(self, embed, cache):
        """One position ``[1, 1, H]`` or ``[1, H]`` -> (logits ``[1, V]``, hidden ``[1, H]``)."""
        logits, hidden = self._step(to_numpy(embed), cache)
        return like(logits, embed), like(hidden, embed)


class RowwiseDecoder:
    """A batch-of-one code decoder (a converted package) run once per row, each row with its
    own cache: classifier-free guidance's branches on a runtime whose program takes one row.

    The cache is the list of the rows' caches. :meth:`prefill` takes rows of one length;
    :meth:`prefill_rows` takes each row's own prompt (branches whose prompts differ in length).
    """

    def __init__(self, inner: Any):
        self.inner = inner

    def new_cache(self) -> list:
        return []

    @staticmethod
    def _stack(outs: list, ref):
        logits = np.concatenate([to_numpy(o[0]).reshape(1, -1) for o in outs])
        hidden = np.concatenate([to_numpy(o[1]).reshape(1, -1) for o in outs])
        return like(logits, ref), like(hidden, ref)

    def prefill_rows(self, rows: list, cache: list):
        """``rows``: one prompt ``[1, L_i, H]`` per row -> the last positions' (logits ``[B, V]``,
        hidden ``[B, H]``); ``cache`` (fresh) gets one inner cache per row."""
        if cache:
            raise ValueError("prefill needs a fresh cache (RowwiseDecoder.new_cache())")
        cache.extend(self.inner.new_cache() for _ in rows)
        return self._stack([self.inner.prefill(e, c) for e, c in zip(rows, cache)], rows[0])

    def prefill(self, embeds, cache: list):
        return self.prefill_rows([embeds[b:b + 1] for b in range(embeds.shape[0])], cache)

    def step(self, embed, cache: list):
        """``embed [B, 1, H]`` (or ``[B, H]``), row b to row b's cache."""
        return self._stack([self.inner.step(embed[b:b + 1], c) for b, c in enumerate(cache)], embed)

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

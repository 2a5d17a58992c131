"""A converted LM package as a code decoder: ``new_cache() / prefill(embeds, cache) /
step(embed, cache) -> (logits, hidden)``, the protocol the codec-LM frame loops drive; or, for a
package without a head, as a stack (:class:`CoreMLStack`) returning every position's hidden.

The package is a one-position program (see :mod:`.lm`), so prefill feeds one position per call.
Its KV cache has a fixed capacity: a request that would pass it is a GenerationError, raised
before any work where the length is known, never a silent clamp. Arrays come back as
``mx.array`` when the input was one, else numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttscli.backends.decoder import CODE_DECODER, ConvertedCodeDecoder
from ttscli.errors import CheckpointError, GenerationError

from .manifest import RECORD, for_checkpoint
from .runtime import CoreMLModel, require_coreml

__all__ = ["CODE_DECODER", "CoreMLCache", "CoreMLCodeDecoder", "CoreMLStack", "open_code_decoder"]


@dataclass
class CoreMLCache:
    """One request's Core ML state and how many positions it holds."""

    state: Any
    capacity: int
    offset: int = 0


def ensure_fits(cache: CoreMLCache, positions: int, name: str, what: str, instead: str) -> None:
    """A GenerationError, before any work, when ``positions`` more would pass the package's capacity."""
    if cache.offset + positions > cache.capacity:
        raise GenerationError(
            f"the Core ML {name} holds {cache.capacity} positions but the {what} need "
            f"{cache.offset + positions}; convert again with a larger --capacity (ttscli convert MODEL "
            f"--to coreml --capacity N) or use {instead}")


def predict_position(model, cache: CoreMLCache, row: np.ndarray) -> dict:
    """One position ``row [H]`` through the one-position package at the cache's next slot (the
    package's own state); the cache advances by one. Returns the package's outputs."""
    out = model.predict({"inputs_embeds": row.reshape(1, 1, -1), "position": np.array([cache.offset], np.int32)},
                        cache.state)
    cache.offset += 1
    return out


class CoreMLStack:
    """A converted stack without an output head, called as an MLX stack is in a family's loop:
    ``stack(input_embeddings=[1, T, H], cache=)`` -> every fed position's post-norm hidden
    ``[1, T, H]`` (MLX array), ``make_cache()``; one position per package call."""

    def __init__(self, model, entry: dict, name: str = "LM", instead: str = "the mlx backend"):
        if entry.get("kind") != "stateful_lm_step" or entry.get("vocab_size"):
            raise CheckpointError(f"{entry.get('path')}: not an LM step package without a head; convert again")
        self.model, self.name, self.instead = model, name.replace("_", " "), instead
        self.capacity = int(entry["capacity"])
        self.hidden_size = int(entry["hidden_size"])

    @classmethod
    def open(cls, folder: Path, name: str, manifest: dict, compute_units: str = "all", model=None,
             instead: str = "the mlx backend") -> "CoreMLStack":
        """Component ``name`` of the converted folder ``folder`` (loaded by Core ML unless ``model``);
        ``instead``: the option a capacity error suggests."""
        entry = RECORD.component(manifest, name, folder)
        return cls(model or CoreMLModel(folder, entry, compute_units), entry, name, instead)

    def make_cache(self) -> CoreMLCache:
        return CoreMLCache(self.model.new_state(), self.capacity)

    def __call__(self, input_embeddings, cache: CoreMLCache):
        import mlx.core as mx

        x = np.asarray(input_embeddings.astype(mx.float32)).reshape(-1, self.hidden_size)
        ensure_fits(cache, x.shape[0], self.name, "positions fed so far", self.instead)
        out = [np.asarray(predict_position(self.model, cache, row)["hidden"], np.float32).reshape(self.hidden_size)
               for row in x]
        return mx.array(np.stack(out)[None])


class CoreMLCodeDecoder(ConvertedCodeDecoder):
    record = RECORD

    def __init__(self, model, entry: dict):
        """``model``: a loaded package (:class:`CoreMLModel`) or anything with ``new_state()`` and
        ``predict(inputs, state)`` (tests run the package's MIL program with numpy);
        ``entry``: its manifest component entry."""
        if entry.get("kind") != "stateful_lm_step" or not entry.get("vocab_size"):
            raise CheckpointError(f"{entry.get('path')}: not an LM step package with an output head; convert again")
        self.model = model
        self.capacity = int(entry["capacity"])
        self.hidden_size = int(entry["hidden_size"])
        self.vocab_size = int(entry["vocab_size"])

    @classmethod
    def open(cls, folder: Path, name: str = CODE_DECODER, compute_units: str = "all",
             manifest: dict | None = None, model=None) -> "CoreMLCodeDecoder":
        """Component ``name`` of the converted folder ``folder`` (loaded by Core ML unless ``model``)."""
        return super().open(folder, name, manifest, compute_units=compute_units, model=model)

    @classmethod
    def from_entry(cls, folder: Path, entry: dict, compute_units: str = "all", model=None) -> "CoreMLCodeDecoder":
        return cls(model or CoreMLModel(folder, entry, compute_units), entry)

    def new_cache(self) -> CoreMLCache:
        return CoreMLCache(self.model.new_state(), self.capacity)

    def ensure_fits(self, cache: CoreMLCache, positions: int, what: str = "prompt + generated frames") -> None:
        ensure_fits(cache, positions, "code decoder", what, "--code-decoder-backend mlx")

    def _one(self, x: np.ndarray, cache: CoreMLCache) -> tuple[np.ndarray, np.ndarray]:
        self.ensure_fits(cache, 1)
        out = predict_position(self.model, cache, x.reshape(self.hidden_size))
        return out["logits"].reshape(1, -1), out["hidden"].reshape(1, -1)

    def _prefill(self, x: np.ndarray, cache: CoreMLCache) -> tuple[np.ndarray, np.ndarray]:
        e = x.reshape(-1, self.hidden_size)
        self.ensure_fits(cache, e.shape[0], "prompt")
        for row in e:
            logits, hidden = self._one(row, cache)
        return logits, hidden

    def _step(self, x: np.ndarray, cache: CoreMLCache) -> tuple[np.ndarray, np.ndarray]:
        return self._one(x.reshape(self.hidden_size), cache)


def open_code_decoder(checkpoint: Path, compute_units: str = "all", name: str = CODE_DECODER) -> CoreMLCodeDecoder:
    """The code decoder converted from ``checkpoint`` (found by its manifest's source hashes)."""
    require_coreml()
    folder, manifest = for_checkpoint(Path(checkpoint), name)
    return CoreMLCodeDecoder.open(folder, name, compute_units, manifest)

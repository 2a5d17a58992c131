"""Weight sources for the Core ML export, read with numpy (no torch, no MLX at build time).

A source has ``keys() / shape(key) / get(key) / in`` and a ``path`` naming it in errors:
:class:`SafeTensors` memory-maps a published .safetensors file (bf16 included),
:class:`ShardedSafeTensors` the shards a ``model.safetensors.index.json`` lists,
:class:`RandomWeights` stands in for a checkpoint at real dimensions, :class:`ArrayWeights`
wraps arrays already in memory (an MLX model's parameters). :func:`take` picks exactly the
tensors one program needs, strictly.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Mapping

import numpy as np

from ttscli.checkpoint import weight_problems
from ttscli.errors import CheckpointError

_NUMPY = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}


class SafeTensors:
    """Lazy numpy reader of one .safetensors file, memory-mapped; floats come back as float32."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise CheckpointError(f"{self.path} is missing; point at the checkpoint folder")
        try:
            with open(self.path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(n))
        except (ValueError, OSError) as e:
            raise CheckpointError(f"{self.path} is not a safetensors file ({e})") from None
        header.pop("__metadata__", None)
        self._header = header
        self._base = 8 + n
        self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")

    def keys(self):
        return self._header.keys()

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._header[key]["shape"])

    def __contains__(self, key: str) -> bool:
        return key in self._header

    def get(self, key: str) -> np.ndarray:
        info = self._header[key]
        start, end = info["data_offsets"]
        raw = self._mm[self._base + start:self._base + end]
        dt = info["dtype"]
        if dt == "BF16":     # numpy has no bfloat16: its bits are the top half of a float32
            arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dt in _NUMPY:
            arr = raw.view(_NUMPY[dt]).astype(np.float32 if dt.startswith("F") else _NUMPY[dt])
        else:
            raise CheckpointError(f"{self.path.name}: tensor {key} has unsupported dtype {dt}")
        return arr.reshape(info["shape"])


class ShardedSafeTensors:
    """The tensors of a sharded checkpoint, each read from the shard its index names (each
    shard memory-mapped on first use); ``files`` are the index and the shards, relative to
    the folder (a conversion's source record)."""

    def __init__(self, index: Path):
        self.path = Path(index)
        try:
            wmap = json.loads(self.path.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(wmap, dict):
                raise TypeError("weight_map is not an object")
        except FileNotFoundError:
            raise CheckpointError(f"{self.path} is missing; point at the checkpoint folder") from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{self.path} is not a safetensors index ({e})") from None
        self._where = {k: str(v) for k, v in wmap.items()}
        self._shards: dict[str, SafeTensors] = {}
        self.files = (self.path.name, *sorted(set(self._where.values())))
        for name in self.files[1:]:
            if not (self.path.parent / name).is_file():
                raise CheckpointError(f"{self.path.parent / name} is missing (listed in {self.path.name})")

    def _shard(self, key: str) -> SafeTensors:
        name = self._where[key]
        if name not in self._shards:
            self._shards[name] = SafeTensors(self.path.parent / name)
        shard = self._shards[name]
        if key not in shard:
            raise CheckpointError(f"{shard.path}: {key} is listed for this shard in {self.path.name} but absent")
        return shard

    def keys(self):
        return self._where.keys()

    def shape(self, key: str) -> tuple[int, ...]:
        return self._shard(key).shape(key)

    def __contains__(self, key: str) -> bool:
        return key in self._where

    def get(self, key: str) -> np.ndarray:
        return self._shard(key).get(key)


def as_float32(v) -> np.ndarray:
    """An array in memory as float32 numpy; an MLX array of another dtype (bfloat16, which numpy
    cannot read) is widened by MLX first, one tensor at a time."""
    if type(v).__module__.startswith("mlx"):
        import mlx.core as mx

        return np.asarray(v.astype(mx.float32))
    return np.asarray(v, np.float32)


class ArrayWeights:
    """A source over arrays in memory (numpy, MLX arrays of any float dtype, or anything
    ``np.asarray`` reads), each read as float32."""

    def __init__(self, arrays: Mapping[str, object], path: str = "arrays"):
        self._arrays = dict(arrays)
        self.path = Path(path)

    def keys(self):
        return self._arrays.keys()

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._arrays[key].shape)

    def __contains__(self, key: str) -> bool:
        return key in self._arrays

    def get(self, key: str) -> np.ndarray:
        return as_float32(self._arrays[key])


class RandomWeights:
    """The given names and shapes with random values: builds at real dimensions (build time,
    on-device speed) without downloading anything. Deterministic per (seed, name)."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], seed: int = 0, path: str = "random weights"):
        self._shapes = dict(shapes)
        self._seed = seed
        self.path = Path(path)

    def keys(self):
        return self._shapes.keys()

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._shapes[key])

    def __contains__(self, key: str) -> bool:
        return key in self._shapes

    def get(self, key: str) -> np.ndarray:
        shape = self._shapes[key]
        rng = np.random.default_rng([self._seed, int(hashlib.md5(key.encode()).hexdigest()[:8], 16)])
        if len(shape) == 1:      # norms near 1, biases near 0
            centre = 0.0 if key.endswith(".bias") else 1.0
            return (centre + 0.05 * rng.standard_normal(shape)).astype(np.float32)
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(fan_in)).astype(np.float32)


def take(source, prefix: str, expected: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Tensors ``prefix + name`` for every name in ``expected`` (returned without the prefix);
    a CheckpointError naming every missing or mis-shaped one. Other tensors are not read."""
    got = {k: source.shape(prefix + k) for k in expected if prefix + k in source}
    problems = weight_problems(expected, got, prefix=prefix)
    if problems:
        raise CheckpointError(f"{source.path.name}: " + "; ".join(problems))
    return {k: source.get(prefix + k) for k in expected}

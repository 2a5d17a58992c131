"""Tensors from PyTorch files (.pt / .pth / .bin) without PyTorch and without running pickled code.

A torch file is a pickle whose tensors point at raw storages kept beside it: in a zip archive
(torch >= 1.6: ``<name>/data.pkl`` + ``<name>/data/<key>``) or, in the legacy format, as a
stream of pickles followed by the storages' bytes. The pickle may name any importable callable,
so it is read with an unpickler that resolves only the handful of names torch itself writes for
tensors and plain containers; any other global ends the read before anything is called.
"""
from __future__ import annotations

import io
import os
import pickle
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from ttscli.errors import TTSError


class TorchFileError(TTSError):
    """A torch file that is unreadable or asks for something other than tensors."""


LEGACY_MAGIC = 0x1950A86A20F9469CFC6C

# torch's storage classes by the name the pickle gives them
_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": "bfloat16", "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
    "UntypedStorage": np.uint8,
}


@dataclass(frozen=True)
class _StorageType:
    dtype: Any

    @property
    def itemsize(self) -> int:
        return 2 if self.dtype == "bfloat16" else np.dtype(self.dtype).itemsize


class _Storage:
    """A storage whose bytes arrive later (legacy files put them after the pickle)."""

    def __init__(self, kind: _StorageType, numel: int):
        self.kind, self.numel = kind, numel
        self.data: np.ndarray | None = None
        self.base: tuple[_Storage, int] | None = None   # legacy views: (root, element offset)

    def array(self) -> np.ndarray:
        if self.base is not None:
            root, offset = self.base
            return root.array()[offset:offset + self.numel]
        if self.data is None:
            raise TorchFileError("a tensor refers to a storage the file does not contain")
        return self.data

    def check_claim(self, present: int, what: str) -> None:
        """Refuse a storage whose pickle claims more elements than the bytes present hold."""
        if self.numel * self.kind.itemsize > present:
            raise TorchFileError(f"{what} claims {self.numel:,} elements of {self.kind.itemsize} bytes; "
                                 f"the archive holds {present:,} bytes for it")

    def fill(self, raw: bytes) -> None:
        if self.kind.dtype == "bfloat16":
            # bfloat16 is the upper half of a float32: widening is exact
            half = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
            self.data = half.view(np.float32)
        else:
            self.data = np.frombuffer(raw, np.dtype(self.kind.dtype).newbyteorder("<"))
        if self.data.size < self.numel:
            raise TorchFileError(f"a storage holds {self.data.size} elements, the pickle says {self.numel}")


@dataclass
class _TensorRef:
    storage: _Storage
    offset: int
    size: tuple
    stride: tuple

    @property
    def numel(self) -> int:
        return prod(self.size)

    def resolve(self) -> np.ndarray:
        flat = self.storage.array()
        if any(n < 0 for n in self.size) or self.offset < 0 or any(s < 0 for s in self.stride):
            raise TorchFileError("a tensor has a negative size, stride or offset")
        if any(n == 0 for n in self.size):
            return np.zeros(self.size, flat.dtype)
        need = self.offset + 1 + sum((n - 1) * s for n, s in zip(self.size, self.stride))
        if need > flat.size:
            raise TorchFileError("a tensor's shape and strides reach past its storage")
        if not self.size:
            return np.array(flat[self.offset])
        view = np.lib.stride_tricks.as_strided(
            flat[self.offset:], shape=self.size, strides=tuple(s * flat.itemsize for s in self.stride))
        return np.ascontiguousarray(view)


def _rebuild_tensor(storage, storage_offset, size, stride, *_ignored):
    if not isinstance(storage, _Storage):
        raise TorchFileError("a tensor is built from something that is not a storage")
    return _TensorRef(storage, int(storage_offset), tuple(int(n) for n in size), tuple(int(s) for s in stride))


def _rebuild_parameter(data, *_ignored):
    return data


class _TensorClass:
    """torch.Tensor / nn.Parameter as named by _rebuild_from_type_v2: a marker, never instantiated."""


def _rebuild_from_type_v2(func, new_type, args, state):
    if not isinstance(new_type, _TensorClass) or func not in (_rebuild_tensor, _rebuild_parameter):
        raise TorchFileError("the file rebuilds a tensor subclass ttscli does not read")
    return func(*args)


_dtype_names = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")

# (module, name) -> what the unpickler hands back; nothing else resolves
_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch", "Tensor"): _TensorClass(),
    ("torch.nn.parameter", "Parameter"): _TensorClass(),
    ("torch", "Size"): tuple,
    **{("torch", name): _StorageType(dt) for name, dt in _STORAGE_DTYPES.items()},
    **{("torch", name): name for name in _dtype_names},   # dtype objects in tensor metadata
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, storages: dict[str, _Storage], zip_numel: bool):
        super().__init__(file)
        self._storages = storages
        self._zip = zip_numel

    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise TorchFileError(f"refused: the pickle names {module}.{name}, "
                                 "which is not a tensor or container") from None

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise TorchFileError(f"refused: unknown persistent id {str(pid)[:60]!r}")
        if self._zip:       # ('storage', type, key, location, numel)
            _, kind, key, _location, numel = pid
            view = None
        else:               # ('storage', type, root_key, location, numel, view_metadata)
            _, kind, key, _location, numel, view = pid
        if not isinstance(kind, _StorageType):
            raise TorchFileError("refused: a storage of an unknown type")
        key = str(key)
        root = self._storages.get(key)
        if root is None:
            root = self._storages[key] = _Storage(kind, int(numel))
        if view is not None:
            view_key, offset, view_numel = view
            sub = self._storages.get(str(view_key))
            if sub is None:
                sub = self._storages[str(view_key)] = _Storage(kind, int(view_numel))
                sub.base = (root, int(offset))
            return sub
        return root


# The arrays a file yields may take at most this many times the file's size. Every element is
# a copy of one the file stores, so only tensors that share storage yield more than the file
# holds: tied weights (each name gets its own array), overlapping views, bfloat16 widened to
# float32. A zero-stride or endlessly repeated view, which could ask for terabytes from a few
# hundred bytes, is refused before its memory is allocated.
MAX_YIELD_PER_FILE_BYTE = 4


class _Resolver:
    """Replaces tensor records by numpy arrays throughout the loaded structure, within a budget
    of bytes (:data:`MAX_YIELD_PER_FILE_BYTE`)."""

    def __init__(self, file_size: int):
        self.file_size = file_size
        self.left = MAX_YIELD_PER_FILE_BYTE * file_size

    def __call__(self, obj):
        if isinstance(obj, _TensorRef):
            self.spend(obj)
            return obj.resolve()
        if isinstance(obj, OrderedDict):
            return OrderedDict((k, self(v)) for k, v in obj.items())
        if isinstance(obj, dict):
            return {k: self(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self(v) for v in obj)
        return obj

    def spend(self, ref: _TensorRef) -> None:
        itemsize = 4 if ref.storage.kind.dtype == "bfloat16" else ref.storage.kind.itemsize
        need = ref.numel * itemsize
        if need > self.left:
            raise TorchFileError(
                f"a tensor of shape {tuple(ref.size)} would take {need:,} bytes: the file's tensors may take "
                f"at most {MAX_YIELD_PER_FILE_BYTE}x its {self.file_size:,} bytes (a zero stride, or a view "
                "repeated); refused")
        self.left -= need


def _entry(zf: zipfile.ZipFile, name: str, file_size: int, what: str) -> zipfile.ZipInfo:
    """An archive entry, refused before it is read when it claims more bytes than the whole
    file (only a compressed entry can: torch stores its entries uncompressed)."""
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise TorchFileError(f"{what} is missing from the archive") from None
    if info.file_size > file_size:
        raise TorchFileError(f"{what} claims {info.file_size:,} bytes, more than the file's {file_size:,}")
    return info


def _load_zip(zf: zipfile.ZipFile, file_size: int) -> Any:
    names = zf.namelist()
    pkl = next((n for n in names if n.endswith("/data.pkl") and n.count("/") == 1), None)
    if pkl is None:
        raise TorchFileError("a zip file without <name>/data.pkl is not a torch file")
    prefix = pkl[: -len("data.pkl")]
    storages: dict[str, _Storage] = {}
    raw = zf.read(_entry(zf, pkl, file_size, pkl))
    obj = _Unpickler(io.BytesIO(raw), storages, zip_numel=True).load()
    for key, storage in storages.items():
        info = _entry(zf, f"{prefix}data/{key}", file_size, f"storage {key}")
        storage.check_claim(info.file_size, f"storage {key}")
        storage.fill(zf.read(info))
    return obj


def _load_legacy(f, file_size: int) -> Any:
    def safe():
        return _Unpickler(f, {}, zip_numel=False).load()

    if safe() != LEGACY_MAGIC:
        raise TorchFileError("not a torch file (no zip archive, no legacy magic number)")
    safe()                                  # protocol version
    info = safe()
    if isinstance(info, dict) and not info.get("little_endian", True):
        raise TorchFileError("big-endian torch files are not supported")
    storages: dict[str, _Storage] = {}
    obj = _Unpickler(f, storages, zip_numel=False).load()
    keys = _Unpickler(f, {}, zip_numel=False).load()
    for key in keys:
        storage = storages.get(str(key))
        if storage is None:
            raise TorchFileError(f"storage {key} is listed but never used")
        header = f.read(8)
        if len(header) != 8:
            raise TorchFileError("the file ends inside its storages")
        numel = int.from_bytes(header, "little")
        nbytes = numel * storage.kind.itemsize
        if nbytes > file_size - f.tell():
            raise TorchFileError(f"storage {key} claims {nbytes:,} bytes; the file has "
                                 f"{file_size - f.tell():,} left (it ends inside its storages)")
        storage.fill(f.read(nbytes))
    return obj


def load(path: str | Path) -> Any:
    """The object saved by torch.save, with every tensor as a numpy array (bfloat16 widened to float32).

    Raises TorchFileError for anything but tensors, numbers, strings and containers.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            if zipfile.is_zipfile(f):
                with zipfile.ZipFile(f) as zf:
                    obj = _load_zip(zf, file_size)
            else:
                f.seek(0)
                obj = _load_legacy(f, file_size)
        return _Resolver(file_size)(obj)
    except TorchFileError as e:
        raise TorchFileError(f"{path}: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, zipfile.BadZipFile) as e:
        raise TorchFileError(f"{path}: not a readable torch file ({type(e).__name__}: {e})") from None
    except OSError as e:
        raise TorchFileError(f"cannot read {path}: {e.strerror or e}") from None


def state_dict(path: str | Path, key: str | None = None) -> dict[str, np.ndarray]:
    """The tensors of a saved state dict (optionally under `key`, e.g. 'model_state'), by name."""
    obj = load(path)
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            raise TorchFileError(f"{path}: no '{key}' entry")
        obj = obj[key]
    if not isinstance(obj, dict):
        raise TorchFileError(f"{path}: holds a {type(obj).__name__}, not a state dict")
    return {str(k): v for k, v in obj.items() if isinstance(v, np.ndarray)}

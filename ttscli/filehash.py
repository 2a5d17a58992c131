"""SHA-256 of a file, read in blocks: the one hashing of ttscli's records (a converted folder's
source hashes, a batch run's manifest of written files)."""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path


def file_sha256(path: Path | str) -> str:
    """Hex digest of the file's bytes as they are now."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 22):
            h.update(b)
    return h.hexdigest()


@functools.lru_cache(maxsize=32)
def _cached(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


def file_sha256_cached(path: Path | str) -> str:
    """:func:`file_sha256`, computed once per process for a file whose size and mtime are
    unchanged (a multi-GB checkpoint checked on every load)."""
    st = os.stat(path)
    return _cached(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)

"""A small file system to fill: tmpfs mounts for the full-disk tests (root only; skipped elsewhere)."""
from __future__ import annotations

import errno
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(path: Path, size: str):
    """A tmpfs of ``size`` mounted at path for the block (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    path.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if p.returncode != 0:
        pytest.skip(f"mount refused: {p.stderr.decode().strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def grow(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True, capture_output=True)


def fill(disk: Path) -> None:
    """Take every free block of the file system."""
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC

"""Handing freed heap memory back to the OS in a long-running process.

glibc gives each thread that allocates its own malloc arena, and freed blocks stay in the arena
that made them: a process whose MLX and worker threads build and free differently sized graphs
for every new input (a server, a batch run, a library caller voicing many texts) keeps its RSS at
the sum of every arena's high-water mark, and that sum creeps up as lengths vary. A soak of 60
varied Piper syntheses grew +9.4% from the 10th to the 60th with the default arenas and stayed
flat with MALLOC_ARENA_MAX=1; ``malloc_trim(0)`` returns the free pages of every arena without
limiting the arenas (which would serialise the threads' allocations). A trim walks every arena
(tens of ms on a loaded 2-core machine), so a caller after each request uses
``release_memory_if_grown``: one read of /proc/self/statm, and a trim only when RSS has grown
by ``grow_mib`` since the last one.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_memory() -> bool:
    """Return the heap pages freed so far to the OS (glibc's ``malloc_trim``, every thread's
    arena); False where the C library has no such call (macOS, musl)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


_last = {"rss": 0.0}
_lock = threading.Lock()


def rss_mib() -> float | None:
    """Resident set size of this process in MiB (None where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


def release_memory_if_grown(grow_mib: float = 8.0) -> bool:
    """``release_memory()`` when RSS is more than ``grow_mib`` above what it was after the last
    trim (so a steady process pays one statm read per call); True when it trimmed."""
    rss = rss_mib()
    if rss is None:
        return False
    with _lock:
        if _last["rss"] and rss <= _last["rss"] + grow_mib:
            return False
        trimmed = release_memory()
        after = rss_mib()
        _last["rss"] = after if after is not None else rss
        return trimmed

"""ttscli.memory: freed heap pages go back to the OS after a request (a server, batch run or
library loop otherwise sits at every thread arena's high-water mark)."""
from __future__ import annotations

import ctypes.util
import sys
import threading

import pytest

from ttscli import memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or memory._malloc_trim() is None,
                                reason="malloc_trim is glibc's (Linux); elsewhere release_memory is a no-op")


def _fragment(keep: list) -> None:
    # 8 KiB blocks (below the mmap threshold, so they live in this thread's arena); freeing every
    # other one leaves whole free pages between live blocks that only a trim hands back
    blocks = [bytearray(8192) for _ in range(20000)]
    keep.extend(blocks[::2])
    del blocks


def test_release_memory_returns_fragmented_free_pages():
    keep: list = []
    t = threading.Thread(target=_fragment, args=(keep,))
    t.start()
    t.join()
    before = memory.rss_mib()
    assert memory.release_memory()
    after = memory.rss_mib()
    # ~78 MiB of free 8 KiB blocks sat between the live ones, about half of it in whole pages
    # (each free chunk holds one or two full pages); ~40 MiB returns here
    assert before - after > 20, (before, after)
    assert len(keep) == 10000


def test_release_memory_if_grown_trims_only_after_growth(monkeypatch):
    # a baseline left by earlier work in this process (a higher RSS since freed) is not this test's
    monkeypatch.setitem(memory._last, "rss", 0)
    memory.release_memory_if_grown(grow_mib=8.0)       # sets the baseline
    assert not memory.release_memory_if_grown(grow_mib=8.0)
    keep: list = []
    t = threading.Thread(target=_fragment, args=(keep,))
    t.start()
    t.join()
    assert memory.release_memory_if_grown(grow_mib=8.0)
    assert not memory.release_memory_if_grown(grow_mib=8.0)


def test_libc_lookup_is_cached():
    assert ctypes.util.find_library("c")
    assert memory._malloc_trim() is memory._malloc_trim()

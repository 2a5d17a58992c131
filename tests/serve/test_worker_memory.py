"""The server's scheduler keeps nothing of a request once it is answered, and hands freed heap
memory back (the two things that made a long-running server's RSS grow): checked on the
ModelWorker itself with a stand-in pipeline, no model or HTTP needed."""
from __future__ import annotations

import asyncio
import gc
import sys
import time
import weakref

import numpy as np
import pytest

from ttscli.serve import worker as worker_mod
from ttscli.serve.worker import DONE, ModelWorker


def run(pipeline, request):
    if request == "fail":
        raise ValueError("bad row")
    for n in (request, request // 2):
        yield np.zeros(n, np.float32)


async def serve_all(w: ModelWorker, requests, cancel_every: int = 0):
    loop = asyncio.get_running_loop()
    refs = []
    for i, req in enumerate(requests):
        job = w.submit(req, loop)
        refs.append(weakref.ref(job))
        if cancel_every and i % cancel_every == 0:
            w.cancel(job)
            continue
        while (item := await job.out.get()) is not DONE and not isinstance(item, BaseException):
            pass
    return refs


def test_answered_requests_leave_nothing_behind(monkeypatch):
    trims = []
    monkeypatch.setattr(worker_mod, "release_memory", lambda: trims.append(1) or True)
    w = ModelWorker("m", lambda: object(), run, max_queue=4)
    w.start()
    try:
        reqs = [1000 + 17 * i for i in range(30)] + ["fail"]
        refs = asyncio.run(serve_all(w, reqs, cancel_every=7))
        # the thread drops its last request just after answering it: give it a moment to get there
        for _ in range(500):
            gc.collect()
            alive = [r() for r in refs if r() is not None]
            if not alive and not w.status()["active"] and len(trims) > 1:
                break
            time.sleep(0.01)
        assert alive == [], f"{len(alive)} answered requests still referenced"
        s = w.status()
        assert (s["queued"], s["active"], s["failed"]) == (0, 0, 1)
        assert s["served"] + s["cancelled"] + s["failed"] == len(reqs)
        # after loading, then whenever the queue ran dry (at most once per request; at least at the end)
        assert 2 <= len(trims) <= 1 + len(reqs)
    finally:
        w.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_release_memory_on_glibc():
    assert worker_mod.release_memory() is True

"""The server's scheduler with stand-in pipelines (no model, no HTTP): requests take turns a
chunk each where the pipeline allows it, a new one first; the request timeout and cancellation
stop a generation at a chunk boundary and free its place."""
from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from ttscli.serve import interleaves
from ttscli.serve.worker import DONE, ModelWorker, RequestTimeout

INDEPENDENT = SimpleNamespace(concurrent_safe=False, independent_generations=True)
SHARED_STATE = SimpleNamespace(concurrent_safe=False, independent_generations=False)
WAIT_S = 30.0   # bounds every wait below, so that a broken scheduler fails instead of hanging


class Script:
    """Requests ``(name, chunks)``: a generator yielding ``name0, name1, ...`` (forever for
    chunks None), logging each chunk as the worker makes it. ``pause_at`` (name, i): that chunk
    waits for ``go`` after setting ``reached``; ``sleep``: seconds before each chunk."""

    def __init__(self, pause_at=None, sleep=0.0, first_sleep=0.0):
        self.log: list[str] = []
        self.closed: list[str] = []
        self.pause_at, self.sleep, self.first_sleep = pause_at, sleep, first_sleep
        self.reached, self.go = threading.Event(), threading.Event()

    def run(self, pipeline, request):
        name, n = request
        i = 0
        try:
            while n is None or i < n:
                time.sleep(self.first_sleep if i == 0 and self.first_sleep else self.sleep)
                self.log.append(f"{name}{i}")
                if self.pause_at == (name, i):
                    self.reached.set()
                    assert self.go.wait(WAIT_S)
                yield f"{name}{i}"
                i += 1
        finally:
            self.closed.append(name)


async def read_all(job) -> list:
    items = []
    while True:
        item = await asyncio.wait_for(job.out.get(), WAIT_S)
        items.append(item)
        if item is DONE or isinstance(item, BaseException):
            return items


async def wait_for(cond, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def started(pipeline, script: Script, **kw) -> ModelWorker:
    w = ModelWorker("m", lambda: pipeline, script.run, max_queue=8, interleave=interleaves, **kw)
    w.start()
    return w


async def long_then_short(w: ModelWorker, script: Script):
    """A 12-chunk request; once its chunk 2 is being made, a 3-chunk one arrives."""
    loop = asyncio.get_running_loop()
    long_job = w.submit(("L", 12), loop)
    assert await loop.run_in_executor(None, script.reached.wait, WAIT_S)
    short_job = w.submit(("S", 3), loop)
    script.go.set()
    return await asyncio.gather(read_all(long_job), read_all(short_job))


def test_requests_take_turns_where_generations_are_independent():
    script = Script(pause_at=("L", 2))
    w = started(INDEPENDENT, script)
    try:
        long_out, short_out = asyncio.run(long_then_short(w, script))
    finally:
        w.stop()
    # the short request's first chunk comes right after the chunk in progress, then turns alternate
    assert script.log[:8] == ["L0", "L1", "L2", "S0", "L3", "S1", "L4", "S2"], script.log
    assert long_out == [f"L{i}" for i in range(12)] + [DONE]
    assert short_out == ["S0", "S1", "S2", DONE]
    assert w.status() | {"max_queue": 0} == {"queued": 0, "active": 0, "max_queue": 0, "served": 2, "failed": 0,
                                             "cancelled": 0, "timed_out": 0, "refused": 0}


def test_one_at_a_time_where_generations_share_state():
    script = Script(pause_at=("L", 2))
    w = started(SHARED_STATE, script)
    try:
        asyncio.run(long_then_short(w, script))
    finally:
        w.stop()
    assert script.log == [f"L{i}" for i in range(12)] + ["S0", "S1", "S2"]


def test_at_most_max_batch_take_turns_and_a_cancel_frees_a_place():
    script = Script(sleep=0.002)
    w = started(INDEPENDENT, script, max_batch=2)

    async def go():
        loop = asyncio.get_running_loop()
        a, b = w.submit(("A", None), loop), w.submit(("B", None), loop)
        c = w.submit(("C", 2), loop)
        await wait_for(lambda: sum(x.startswith("B") for x in script.log) >= 5, "B's chunks")
        assert not any(x.startswith("C") for x in script.log) and w.status()["queued"] == 1
        w.cancel(a)
        out_c = await read_all(c)
        await wait_for(lambda: "A" in script.closed, "A's generator to be closed")
        w.cancel(b)
        await wait_for(lambda: w.status()["active"] == 0, "B to stop")
        return out_c

    try:
        assert asyncio.run(go()) == ["C0", "C1", DONE]
    finally:
        w.stop()
    s = w.status()
    assert (s["served"], s["cancelled"], s["active"], s["queued"]) == (1, 2, 0, 0)
    assert sorted(script.closed) == ["A", "B", "C"]


@pytest.mark.parametrize("interleaved", [True, False])
def test_request_timeout_stops_at_a_chunk_and_frees_the_place(interleaved):
    script = Script(sleep=0.005)
    w = started(INDEPENDENT if interleaved else SHARED_STATE, script, request_timeout=0.3)

    async def go():
        loop = asyncio.get_running_loop()
        endless = await read_all(w.submit(("E", None), loop))
        after = await read_all(w.submit(("N", 2), loop))
        return endless, after

    try:
        endless, after = asyncio.run(go())
    finally:
        w.stop()
    # audio first (the stream had begun), then the timeout error instead of the end of audio
    assert len(endless) > 1 and endless[0] == "E0" and DONE not in endless
    assert isinstance(endless[-1], RequestTimeout) and "--request-timeout" in str(endless[-1])
    assert after == ["N0", "N1", DONE]
    s = w.status()
    assert (s["timed_out"], s["served"], s["active"]) == (1, 1, 0) and "E" in script.closed


def test_request_timeout_before_any_audio():
    """A first chunk that took longer than the limit is not sent: the error comes first (504)."""
    script = Script(first_sleep=0.5)
    w = started(INDEPENDENT, script, request_timeout=0.1)
    try:
        out = asyncio.run(first_request(w, ("F", 3)))
    finally:
        w.stop()
    assert len(out) == 1 and isinstance(out[0], RequestTimeout)
    assert w.status()["timed_out"] == 1


async def first_request(w: ModelWorker, request) -> list:
    return await read_all(w.submit(request, asyncio.get_running_loop()))


def fake_stream_many(pipeline, source, drop, max_batch, stats):
    """The batched-generation contract (``ttscli.batching.stream_many``) over stand-in rows:
    every step drops what ``drop`` says, takes new rows while there is room, and yields one
    chunk per row; a row ``(name, n)`` ends after n chunks (never for None)."""
    rows: dict = {}
    while True:
        for key in [k for k in rows if drop(k)]:
            del rows[key]
        if len(rows) < max_batch:
            new = source(max_batch - len(rows))
            if not new and not rows:
                return
            rows.update({key: [req, 0] for key, req in new})
        for key, row in list(rows.items()):
            (name, n), i = row
            if n is not None and i == n:
                del rows[key]
                yield key, DONE
                continue
            time.sleep(0.002)
            row[1] += 1
            yield key, np.full(4, i, np.float32)


def test_request_timeout_in_a_batch():
    w = ModelWorker("m", lambda: object(), None, max_queue=4, batched=lambda p: fake_stream_many,
                    request_timeout=0.3)
    w.start()

    async def go():
        loop = asyncio.get_running_loop()
        endless, short = w.submit(("E", None), loop), w.submit(("S", 3), loop)
        return await asyncio.gather(read_all(endless), read_all(short))

    try:
        endless, short = asyncio.run(go())
    finally:
        w.stop()
    assert len(endless) > 1 and isinstance(endless[-1], RequestTimeout)
    assert len(short) == 4 and short[-1] is DONE
    s = w.status()
    assert (s["timed_out"], s["served"], s["active"]) == (1, 1, 0)


def test_a_row_that_fails_in_a_batch_is_booked_failed_when_its_client_cancels_at_once(monkeypatch):
    """The HTTP side cancels a job in its clean-up as soon as it has the job's last item; that
    must not turn the row's outcome into "cancelled". Each job's client here reacts at once, on
    the worker's thread, the earliest a real one could."""
    from ttscli.serve.worker import Job

    def stream_many(pipeline, source, drop, max_batch, stats):   # "F" fails where it would end
        for key, x in fake_stream_many(pipeline, source, drop, max_batch, stats):
            yield key, ValueError("row F failed") if x is DONE and key.request[0] == "F" else x

    w = ModelWorker("m", lambda: object(), None, max_queue=4, batched=lambda p: stream_many)
    put = Job.put

    def put_then_cancel(job, item):
        put(job, item)
        if item is DONE or isinstance(item, BaseException):
            w.cancel(job)

    monkeypatch.setattr(Job, "put", put_then_cancel)
    w.start()

    async def go():
        loop = asyncio.get_running_loop()
        return await asyncio.gather(read_all(w.submit(("F", 2), loop)), read_all(w.submit(("S", 2), loop)))

    try:
        failed, served = asyncio.run(go())
    finally:
        w.stop()
    assert isinstance(failed[-1], ValueError) and served[-1] is DONE
    s = w.status()
    assert (s["failed"], s["served"], s["cancelled"], s["active"]) == (1, 1, 0, 0)

"""Shared checks of a family's rows (Pipeline.rows()) against the same requests run alone."""
from __future__ import annotations

import asyncio

import numpy as np

from ttscli.batching import BatchStats, stream_many, synthesize_many
from ttscli.generate import synthesize
from ttscli.serve import batched_stream
from ttscli.serve.worker import DONE, ModelWorker

WAIT_S = 120.0       # bounds every wait on the worker: a broken scheduler fails instead of hanging


def alone(pipe, r):
    """The request through the sequential engine path: (audio, None) or (None, error text)."""
    try:
        return np.concatenate(list(synthesize(pipe, r))), None
    except Exception as e:  # noqa: BLE001 - the error text is what the batched row must repeat
        return None, str(e)


def check_equal_alone(pipe, reqs, got: dict, errors: dict, atol: float = 0.0) -> None:
    assert set(got) | set(errors) == set(range(len(reqs))), (sorted(got), sorted(errors))
    for k, r in enumerate(reqs):
        want, err = alone(pipe, r)
        if err is not None:
            assert errors.get(k) == err, (k, errors.get(k), err)
            continue
        assert k not in errors, errors[k]
        assert got[k].shape == want.shape, (k, got[k].shape, want.shape)
        np.testing.assert_allclose(got[k], want, rtol=0, atol=atol, err_msg=f"request {k}")


def whole(pipe, reqs, max_batch: int) -> tuple[dict, dict]:
    """ttscli batch's path: (audio by index, error text by index)."""
    got, errors = {}, {}
    for k, x in synthesize_many(pipe, list(enumerate(reqs)), max_batch=max_batch):
        if isinstance(x, BaseException):
            errors[k] = str(x)
        else:
            got[k] = x
    return got, errors


def streamed(pipe, reqs, arrivals: dict[int, list[int]], max_batch: int) -> tuple[dict, dict, BatchStats]:
    """serve's path, requests arriving at the given source calls: (pieces by index, errors, stats)."""
    calls, waiting = {"n": 0}, []

    def source(n):
        calls["n"] += 1
        waiting.extend((k, reqs[k]) for k in arrivals.pop(calls["n"], []))
        take = waiting[:n]
        del waiting[:n]
        return take

    pieces, errors = {}, {}
    stats = BatchStats()
    for k, x in stream_many(pipe, source, lambda k: False, max_batch=max_batch, stats=stats):
        if isinstance(x, BaseException):
            errors[k] = str(x)
        elif isinstance(x, np.ndarray):
            pieces.setdefault(k, []).append(x)
    return pieces, errors, stats


def served_together(load, reqs) -> tuple[list[list], int]:
    """Submit the requests at once to the server's worker for the pipeline ``load()`` makes (on
    the worker's thread, as ``ttscli serve`` loads it: MLX arrays belong to the thread that made
    them): each request's answer (chunks then DONE or an exception) and the most rows the worker
    stepped together."""
    w = ModelWorker("m", load, None, max_queue=8, batched=batched_stream, max_batch=8)
    w.start()

    async def read(job):
        items = []
        while True:
            x = await asyncio.wait_for(job.out.get(), WAIT_S)
            items.append(x)
            if x is DONE or isinstance(x, BaseException):
                return items

    async def go():
        loop = asyncio.get_running_loop()
        with w._cond:  # both queued before the worker may take either: they arrive together
            jobs = [w.submit(r, loop) for r in reqs]
        return await asyncio.gather(*(read(j) for j in jobs))

    try:
        out = asyncio.run(go())
    finally:
        w.stop()
    return out, w.batch_stats.largest

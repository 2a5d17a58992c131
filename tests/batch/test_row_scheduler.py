"""The engine's row scheduler (ttscli.batching) over a toy family that implements the row
protocol (ttscli.models.base.RowGenerator): whatever path a request takes (whole requests as
rows, streamed rows arriving while others run, a request's chunks as rows for speak --workers,
the server's batched loop), its audio equals the same request run alone through
``Pipeline.generate`` and the sequential chunk scheduler, exactly (the toy's arithmetic is
integer, so a batched step rounds as a single one does)."""
from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from ttscli.batching import BatchStats, DONE, feed, run_rows, stream_many, synthesize_many
from ttscli.errors import GenerationError
from ttscli.generate import effective_workers, synthesize
from ttscli.models.base import Pipeline, Request, Row
from ttscli.serve import batched_stream
from ttscli.serve.worker import DONE as JOB_DONE
from ttscli.serve.worker import ModelWorker

A, C, M = 6364136223846793005 % 2**31, 1442695040888963407 % 2**31, 2**31
SAMPLES = 6            # samples per frame


def first_state(r: Request) -> int:
    return (sum(map(ord, r.text)) * 7919 + (r.seed or 0)) % M


def frame_audio(state: int) -> np.ndarray:
    return ((state >> np.arange(SAMPLES)) % 2001 - 1000).astype(np.float32) / 1000


def stops(r: Request, frames: int, state: int) -> bool:
    return frames >= 3 + len(r.text) // 4 and state % 5 == 0


class ToyPipeline(Pipeline):
    """A codec LM in miniature: a row's state advances one LCG step per frame (its "forward"),
    each frame is a few samples, and a row stops on its own condition or fails at max_frames."""

    sample_rate = 1000
    max_chunk_chars = 12

    def __init__(self):
        super().__init__()
        self.steps: list[int] = []          # rows per batched step

    def generate(self, request: Request):
        if "!" in request.text:
            raise ValueError(f"the toy cannot say {request.text!r}")
        state, frames, out = first_state(request), 0, []
        limit = request.max_frames or 40
        while True:
            state = (state * A + C) % M
            frames += 1
            out.append(frame_audio(state))
            if request.stream:
                yield out.pop()
            if stops(request, frames, state):
                break
            if frames >= limit:
                raise GenerationError(f"reached max frames ({limit}) on {request.text!r}")
        if out:
            yield np.concatenate(out)

    def rows(self):
        return ToyRows(self)


class ToyRows:
    """The row protocol over a vector of LCG states: one vectorised step for every live row."""

    def __init__(self, pipe: ToyPipeline):
        self.pipe = pipe

    def start(self, request: Request) -> Row:
        if "!" in request.text:
            raise ValueError(f"the toy cannot say {request.text!r}")
        return Row(request, {"state": first_state(request), "frames": 0, "audio": []})

    def step(self, rows: Sequence[Row]) -> None:
        self.pipe.steps.append(len(rows))
        states = np.array([r.state["state"] for r in rows], np.int64)
        states = (states * A + C) % M             # the batched "forward"
        for r, s in zip(rows, states.tolist()):
            st = r.state
            st["state"], st["frames"] = s, st["frames"] + 1
            st["audio"].append(frame_audio(s))
            limit = r.request.max_frames or 40
            if stops(r.request, st["frames"], s):
                r.done = True
            elif st["frames"] >= limit:
                r.done, r.error = True, GenerationError(f"reached max frames ({limit}) on {r.request.text!r}")

    def take(self, row: Row) -> np.ndarray | None:
        st = row.state
        if not st["audio"] or not (row.request.stream or row.done):
            return None
        out, st["audio"] = np.concatenate(st["audio"]), []
        return out

    def drop(self, row: Row) -> None:
        row.state["audio"] = []


REQUESTS = [Request("Hello there. How are you?", seed=1), Request("Hi.", seed=2),
            Request("A rather longer text, in several chunks of twelve.", seed=3),
            Request("Too long for its limit of frames.", seed=4, max_frames=4),
            Request("Streamed, a frame at a time.", seed=5, stream=True),
            Request("Bad! chunk here.", seed=6)]


def alone(pipe, r: Request):
    try:
        return np.concatenate(list(synthesize(pipe, r))), None
    except Exception as e:  # noqa: BLE001 - the error text is what the batched request must repeat
        return None, str(e)


def check(pipe, got: dict, errors: dict, reqs=REQUESTS) -> None:
    assert set(got) | set(errors) == set(range(len(reqs)))
    for k, r in enumerate(reqs):
        want, err = alone(pipe, r)
        if err is not None:
            assert errors.get(k) == err, (k, errors.get(k), err)
        else:
            assert k not in errors, errors[k]
            np.testing.assert_array_equal(got[k], want, err_msg=f"request {k}")


@pytest.mark.parametrize("max_batch", [2, 8])
def test_whole_requests_as_rows_equal_single_runs(max_batch):
    pipe = ToyPipeline()
    got, errors = {}, {}
    for k, x in synthesize_many(pipe, list(enumerate(REQUESTS)), max_batch=max_batch):
        if isinstance(x, BaseException):
            errors[k] = str(x)
        else:
            got[k] = x
    check(pipe, got, errors)
    assert max(pipe.steps) == max_batch             # the slots were full at some step


def test_streamed_rows_arriving_late_equal_single_runs_and_a_dropped_one_leaves():
    pipe = ToyPipeline()
    arrivals = {1: [0, 1], 3: [2, 3, 4, 5], 6: [6]}
    reqs = [*REQUESTS, Request("Dropped after its first audio, never finished.", seed=7, stream=True)]
    calls, waiting = {"n": 0}, []

    def source(n):
        calls["n"] += 1
        waiting.extend((k, reqs[k]) for k in arrivals.pop(calls["n"], []))
        take = waiting[:n]
        del waiting[:n]
        return take

    pieces, errors, done, gone = {}, {}, set(), set()
    stats = BatchStats()
    for k, x in stream_many(pipe, source, lambda k: k in gone, max_batch=3, stats=stats):
        assert k not in done and k not in errors and k not in gone
        if isinstance(x, BaseException):
            errors[k] = str(x)
        elif isinstance(x, np.ndarray):
            pieces.setdefault(k, []).append(x)
            if k == 6:
                gone.add(6)
        else:
            assert x == DONE
            done.add(k)
    assert 6 in gone and 6 not in done and len(pieces[6]) == 1
    assert stats.largest == 3 and stats.steps == len(pipe.steps)
    assert len(pieces[4]) > 3                        # streamed frame by frame (after the crossfade)
    check(pipe, {k: np.concatenate(v) for k, v in pieces.items() if k != 6}, errors)


def test_speak_workers_runs_a_requests_chunks_as_rows():
    pipe = ToyPipeline()
    r = REQUESTS[2]
    assert effective_workers(pipe, 4) == (4, None)   # rows need no thread safety
    seen = []
    many = np.concatenate(list(synthesize(pipe, r, workers=4, on_chunk=lambda d, t: seen.append((d, t)))))
    assert max(pipe.steps) == 4
    np.testing.assert_array_equal(many, alone(pipe, r)[0])
    assert [d for d, _ in seen] == [1, 2, 3, 4, 5] and {t for _, t in seen} == {5}


def test_a_failing_chunk_fails_its_request_alone():
    pipe = ToyPipeline()
    events = list(run_rows(pipe, pipe.rows(), feed([("bad", REQUESTS[5]), ("ok", REQUESTS[1])]),
                           max_batch=4, parallel=True))
    bad = [x for k, x in events if k == "bad"]
    assert len(bad) == 1 and isinstance(bad[0], ValueError)   # no audio of a failed request goes out
    assert [x for k, x in events if k == "ok"][-1] == DONE


def test_serve_runs_two_concurrent_requests_as_rows_of_one_batch():
    """The server's worker with a row-generating pipeline: both requests are rows of one step."""
    pipe = ToyPipeline()
    w = ModelWorker("toy", lambda: pipe, None, max_queue=4, batched=batched_stream, max_batch=4)
    w.start()

    async def go():
        loop = asyncio.get_running_loop()
        with w._cond:  # both queued before the worker may take either: they arrive together
            jobs = [w.submit(REQUESTS[0], loop), w.submit(REQUESTS[2], loop)]
        out = []
        for job in jobs:
            items = []
            while True:
                x = await asyncio.wait_for(job.out.get(), 30)
                items.append(x)
                if x is JOB_DONE or isinstance(x, BaseException):
                    break
            out.append(items)
        return out

    try:
        a, b = asyncio.run(go())
    finally:
        w.stop()
    assert a[-1] is JOB_DONE and b[-1] is JOB_DONE
    np.testing.assert_array_equal(np.concatenate(a[:-1]), alone(pipe, REQUESTS[0])[0])
    np.testing.assert_array_equal(np.concatenate(b[:-1]), alone(pipe, REQUESTS[2])[0])
    assert w.batch_stats.largest == 2

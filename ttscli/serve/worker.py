"""One model, one thread: the server's scheduler.

MLX must not evaluate one decoder from two threads, so each served model gets a single thread
that loads it and then runs its requests, taken from a bounded queue. Up to ``max_batch``
requests are in progress at once: for a pipeline that generates rows (``Pipeline.rows()``:
Qwen3-TTS, Chatterbox and Breeze on MLX) as rows of one continuous batch (ttscli.batching) that
requests join as they arrive and leave when they end or their client goes away; for the others
as generations that take turns on the thread, one chunk of audio each (a sentence, or a stream
chunk of frames), a newly admitted request first. A short request that arrives while a long one
runs therefore gets its first audio after at most the chunk in progress, instead of after the
whole long request. Turns are taken only where the
pipeline says its generations are independent (``Pipeline.independent_generations``: each
keeps its caches and stream state in its own generator); elsewhere requests run one at a time.

The HTTP side only submits jobs and reads their audio: a job's chunks travel to the event loop
through ``call_soon_threadsafe``, and a client that goes away cancels its job, which frees its
place in the queue at once (or stops its generation at its next chunk if it was running). A
request that generates for longer than ``request_timeout`` seconds (counted from when it leaves
the queue) is stopped at its next chunk and answered with :class:`RequestTimeout`.

When it runs out of work the thread hands freed heap pages back to the OS: glibc keeps what a
request freed in its arenas, so without that an idle server's RSS stays at the high-water mark
of the longest request it has served (docs/benchmarks.md#serve-load). Not after every
request: a trim costs tens of milliseconds, and the pages come back on the next request anyway.
"""
from __future__ import annotations

import asyncio
import collections
import gc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ttscli import memory
from ttscli.batching import BatchStats
from ttscli.errors import TTSError
from ttscli.serve.observe import note_job

DONE = object()          # end of a job's audio


def release_memory() -> bool:
    """The idle server's trim (ttscli/memory.py): cyclic garbage first (a request's tracebacks,
    the loader's graphs), or its pages wait for a later trim."""
    gc.collect()
    return memory.release_memory()


class QueueFull(TTSError):
    """The model's queue is full: the client should retry after ``retry_after`` seconds."""

    def __init__(self, msg: str, retry_after: int):
        super().__init__(msg)
        self.retry_after = retry_after


class RequestTimeout(TTSError):
    """The request generated for longer than the server allows (``ttscli serve --request-timeout``)."""


@dataclass(eq=False)
class Job:
    """One request in flight: its audio arrives on ``out`` (chunks, then DONE or an exception)."""

    request: Any
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.monotonic)

    def put(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.out.put_nowait, item)
        except RuntimeError:  # the event loop is gone (shutdown): nobody is listening
            self.cancelled.set()


@dataclass(eq=False)
class Turn:
    """A job the thread is generating: its audio iterator (made on its first turn) and when it
    left the queue."""

    job: Job
    started: float = field(default_factory=time.monotonic)
    chunks: Any = None


class ModelWorker:
    """Loads one model on its own thread and serves its jobs, up to ``max_batch`` at once.

    ``interleave(pipeline)``: whether generations of the loaded pipeline may take turns (None:
    never; one job at a time). ``request_timeout``: seconds a job may generate (0: no limit).
    """

    def __init__(self, model_id: str, load: Callable[[], Any], run: Callable[[Any, Any], Any], max_queue: int,
                 batched: Callable[[Any], Any] | None = None, max_batch: int = 16,
                 interleave: Callable[[Any], bool] | None = None, request_timeout: float = 0.0):
        self.model_id = model_id
        self._load = load
        self._run = run          # (pipeline, request) -> iterator of float32 chunks
        self._batched = batched  # pipeline -> the engine's stream_many, or None
        self._interleave = interleave
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.request_timeout = request_timeout
        self.pipeline = None
        self._pending: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self._ready = threading.Event()
        self._load_error: BaseException | None = None
        self.active: set[Job] = set()
        self.counts = {"served": 0, "failed": 0, "cancelled": 0, "timed_out": 0, "refused": 0}
        self.batch_stats = BatchStats()   # rows per step of the batched loop (how full it ran)
        self._job_s = 1.0        # moving average of a job's time, for Retry-After
        self._thread = threading.Thread(target=self._main, name=f"ttscli-serve-{model_id}", daemon=True)

    # ---- lifecycle
    def start(self) -> None:
        """Start the thread and wait until the model is loaded (its load error is raised here)."""
        self._thread.start()
        self._ready.wait()
        if self._load_error is not None:
            raise self._load_error

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stop = True
            for job in self._pending:
                job.cancelled.set()
            self._pending.clear()
            for job in self.active:
                job.cancelled.set()
            self._cond.notify_all()
        self._thread.join(timeout)

    # ---- the HTTP side
    def submit(self, request, loop: asyncio.AbstractEventLoop) -> Job:
        with self._cond:
            if len(self._pending) >= self.max_queue:
                self.counts["refused"] += 1
                wait = max(1, round(self._job_s * (len(self._pending) + 1)))
                raise QueueFull(f"{self.model_id} has {len(self._pending)} requests waiting (the limit); "
                                f"retry in {wait} s", wait)
            job = Job(request, loop)
            self._pending.append(job)
            self._cond.notify()
        # for the request's access-log line (the server's requests have .text; a test's may not)
        note_job(self.model_id, len(getattr(request, "text", "") or ""))
        return job

    def cancel(self, job: Job) -> None:
        """The client went away: drop the job from the queue, or stop it at its next chunk."""
        with self._cond:
            if job.cancelled.is_set():
                return
            job.cancelled.set()
            try:
                self._pending.remove(job)
                self.counts["cancelled"] += 1
            except ValueError:
                pass  # running (counted when it stops) or finished

    def status(self) -> dict:
        with self._cond:
            return {"queued": len(self._pending), "active": len(self.active),
                    "max_queue": self.max_queue, **self.counts}

    # ---- the model's thread
    def _main(self) -> None:
        try:
            self.pipeline = self._load()
        except BaseException as e:  # noqa: BLE001 - handed to start(), which raises it; the thread ends
            self._load_error = e
            self._ready.set()
            return
        release_memory()  # what loading freed (a converted graph's protobuf copies)
        self._ready.set()
        many = self._batched(self.pipeline) if self._batched else None
        if many is not None:
            self._main_batched(many)
            return
        together = self.max_batch if self._interleave is not None and self._interleave(self.pipeline) else 1
        self._main_turns(max(1, together))

    def _finish(self, job: Job, outcome: str, t0: float) -> None:
        with self._cond:
            if job in self.active:
                self.active.discard(job)
                self.counts[outcome] += 1
                self._job_s = 0.8 * self._job_s + 0.2 * (time.monotonic() - t0)

    def _expired(self, started: float) -> bool:
        return self.request_timeout > 0 and time.monotonic() - started > self.request_timeout

    def _time_out(self, job: Job) -> str:
        job.put(RequestTimeout(f"the request generated for more than {self.request_timeout:g} s, this server's "
                               "limit (ttscli serve --request-timeout); send shorter text"))
        return "timed_out"

    # ---- jobs taking turns, one chunk each
    def _main_turns(self, together: int) -> None:
        """Round robin over up to ``together`` jobs: a newly admitted job takes the next turn,
        then joins the back of the line; a job leaves when it ends, fails, times out or is
        cancelled. With ``together`` 1 this is one job after another."""
        turns: collections.deque[Turn] = collections.deque()
        while self._admit(turns, together):
            turn = turns.popleft()
            outcome = self._take_turn(turn)
            if outcome is None:
                turns.append(turn)
            else:
                self._end(turn, outcome)
            del turn  # nothing of an answered request outlives it (the idle wait would hold it)
            if outcome is not None and not turns and not self._pending:
                release_memory()
        while turns:
            self._end(turns.popleft(), "cancelled")

    def _admit(self, turns: collections.deque, together: int) -> bool:
        """Wait for work; move queued jobs to the front of ``turns`` while there is room. False: stop."""
        with self._cond:
            while not self._pending and not turns and not self._stop:
                self._cond.wait()
            if self._stop:
                return False
            new = []
            while self._pending and len(turns) + len(new) < together:
                job = self._pending.popleft()
                self.active.add(job)
                new.append(Turn(job))
        turns.extendleft(reversed(new))
        return True

    def _take_turn(self, turn: Turn) -> str | None:
        """One chunk of ``turn``'s audio to its client; its outcome when it ended, else None."""
        job = turn.job
        if job.cancelled.is_set():
            return "cancelled"
        if self._expired(turn.started):
            return self._time_out(job)
        try:
            if turn.chunks is None:
                turn.chunks = iter(self._run(self.pipeline, job.request))
            chunk = next(turn.chunks)
        except StopIteration:
            if job.cancelled.is_set():
                return "cancelled"
            job.put(DONE)
            return "served"
        except BaseException as e:  # noqa: BLE001 - handed to the client as an error response / event
            job.put(e)
            return "failed"
        if job.cancelled.is_set():
            return "cancelled"
        if self._expired(turn.started):
            return self._time_out(job)
        job.put(chunk)
        return None

    def _end(self, turn: Turn, outcome: str) -> None:
        chunks, turn.chunks = turn.chunks, None
        if chunks is not None and hasattr(chunks, "close"):
            try:
                chunks.close()  # run the pipeline's own clean-up for an abandoned generation
            except Exception:  # noqa: BLE001 - cleanup of an abandoned generation
                pass
        self._finish(turn.job, outcome, turn.started)

    # ---- jobs as rows of one batch
    def _main_batched(self, many) -> None:
        """Jobs as rows of one batch: taken whenever a row is free, dropped when cancelled or
        past the request timeout."""
        started: dict[Job, float] = {}

        def source(n: int):
            with self._cond:
                while not self._pending and not self.active and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return []
                take = []
                while self._pending and len(take) < n:
                    job = self._pending.popleft()
                    self.active.add(job)
                    started[job] = time.monotonic()
                    take.append(job)
            return [(job, job.request) for job in take]

        def drop(job: Job) -> bool:
            if job.cancelled.is_set():
                self._finish(job, "cancelled", started.pop(job, time.monotonic()))
                return True
            if job in started and self._expired(started[job]):
                self._finish(job, self._time_out(job), started.pop(job))
                job.cancelled.set()  # what the batch still yields for it goes nowhere
                return True
            return False

        while not self._stop:  # the generator ends when idle and told nothing more comes
            try:
                self._batched_pass(many, source, drop, started)
                left = None
            except Exception as e:  # noqa: BLE001 - a failed batch fails its rows, never the worker
                left = e
            with self._cond:
                stale = list(self.active)
            for job in stale:  # the batch is empty here: nothing will answer these
                job.put(left or RuntimeError("internal error: the batch ended without this request"))
                self._finish(job, "failed", started.pop(job, time.monotonic()))

    def _batched_pass(self, many, source, drop, started) -> None:
        import numpy as np

        for job, x in many(self.pipeline, source, drop, self.max_batch, self.batch_stats):
            if isinstance(x, np.ndarray):
                if not job.cancelled.is_set():
                    job.put(x)
                continue
            # the outcome before the answer: once the client has its last item it cancels the job
            # (its clean-up does, whatever the answer), which must not turn this row into "cancelled"
            failed = isinstance(x, BaseException)
            outcome = "cancelled" if job.cancelled.is_set() else "failed" if failed else "served"
            job.put(x if failed else DONE)
            self._finish(job, outcome, started.pop(job, time.monotonic()))
            del job, x  # the generator may now wait for work: hold nothing of an answered request
            if not self.active and not self._pending:
                release_memory()

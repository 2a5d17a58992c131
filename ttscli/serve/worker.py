"""One model, one thread: the server's scheduler.

MLX must not evaluate one decoder from two threads, so each served model gets a single thread
that loads it and then runs its requests, taken from a bounded queue: one after another, or,
for a family with batched generation (Qwen3-TTS on MLX), as rows of one continuous batch that
requests join as they arrive and leave when they end or their client goes away. The
HTTP side only submits jobs and reads their audio: a job's chunks travel to the event loop
through ``call_soon_threadsafe``, and a client that goes away cancels its job, which frees its
place in the queue at once (or stops its generation at the next chunk if it was running).

When it runs out of work the thread hands freed heap pages back to the OS: glibc keeps what a
request freed in its arenas, so without that an idle server's RSS stays at the high-water mark
of the longest request it has served (README "Serve" has the measurements). Not after every
request: a trim costs 50-130 ms here, and the pages come back on the next request anyway.
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
from ttscli.errors import TTSError

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


class ModelWorker:
    """Loads one model on its own thread and serves its jobs in order, one at a time."""

    def __init__(self, model_id: str, load: Callable[[], Any], run: Callable[[Any, Any], Any], max_queue: int,
                 batched: Callable[[Any], Any] | None = None, max_batch: int = 16):
        self.model_id = model_id
        self._load = load
        self._run = run          # (pipeline, request) -> iterator of float32 chunks
        self._batched = batched  # pipeline -> the family's stream_many, or None
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.pipeline = None
        self._pending: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._stop = False
        self._ready = threading.Event()
        self._load_error: BaseException | None = None
        self.active: set[Job] = set()
        self.counts = {"served": 0, "failed": 0, "cancelled": 0, "refused": 0}
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
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                job = self._pending.popleft()
                self.active.add(job)
            t0 = time.monotonic()
            outcome = self._serve(job)
            self._finish(job, outcome, t0)
            del job  # nothing of an answered request outlives it (the idle wait would hold it)
            if not self._pending:
                release_memory()

    def _finish(self, job: Job, outcome: str, t0: float) -> None:
        with self._cond:
            if job in self.active:
                self.active.discard(job)
                self.counts[outcome] += 1
                self._job_s = 0.8 * self._job_s + 0.2 * (time.monotonic() - t0)

    def _main_batched(self, many) -> None:
        """Jobs as rows of one batch: taken whenever a row is free, dropped when cancelled."""
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

        for job, x in many(self.pipeline, source, drop, self.max_batch):
            if isinstance(x, np.ndarray):
                if not job.cancelled.is_set():
                    job.put(x)
                continue
            if isinstance(x, BaseException):
                job.put(x)
                outcome = "failed"
            else:
                job.put(DONE)
                outcome = "served"
            self._finish(job, "cancelled" if job.cancelled.is_set() else outcome, started.pop(job, time.monotonic()))
            del job, x  # the generator may now wait for work: hold nothing of an answered request
            if not self.active and not self._pending:
                release_memory()

    def _serve(self, job: Job) -> str:
        gen = None
        try:
            gen = self._run(self.pipeline, job.request)
            for chunk in gen:
                if job.cancelled.is_set():
                    return "cancelled"
                job.put(chunk)
            if job.cancelled.is_set():
                return "cancelled"
            job.put(DONE)
            return "served"
        except BaseException as e:  # noqa: BLE001 - handed to the client as an error response / event
            job.put(e)
            return "failed"
        finally:
            if gen is not None and hasattr(gen, "close"):
                try:
                    gen.close()  # run the pipeline's own clean-up for an abandoned generation
                except Exception:  # noqa: BLE001 - cleanup of an abandoned generation
                    pass

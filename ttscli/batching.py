"""The row scheduler: requests generated as rows of one batch (continuous batching).

A pipeline whose ``rows()`` gives a :class:`~ttscli.models.base.RowGenerator` advances every
row by one frame per forward; everything around that is here, the same for ``speak --workers``
(the chunks of one request as rows), ``ttscli batch`` (whole requests, local and Ray) and
``serve`` (requests streamed as they arrive and leave):

- a request is split into sentence chunks exactly as :func:`ttscli.generate.synthesize` splits
  it (:func:`~ttscli.models.base.chunk_requests`: same texts, same seeds);
- rows are admitted while fewer than ``max_batch`` run: first the next chunks of requests
  already running, then new requests from ``source``;
- a request's chunks run one after another (``parallel=False``: its audio streams in order with
  no buffering) or all at once (``parallel=True``: later chunks' audio is held until the chunks
  before them end), and are joined with the crossfade of the sequential path
  (:class:`ttscli.dsp.Crossfade`), so a request's samples do not depend on the path it took;
- a request whose client is gone (``drop``) leaves between two steps; a failing chunk fails its
  request alone, never the batch.
"""
from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ttscli.dsp import CROSSFADE_S, Crossfade
from ttscli.models.base import Request, Row, RowGenerator, chunk_requests

DONE = "done"            # the event that ends a request's audio


@dataclass
class BatchStats:
    """How full the batch ran: steps taken, rows stepped in all, the most rows in one step, and
    how many steps stepped each number of rows (the server's /metrics histogram)."""

    steps: int = 0
    rows_stepped: int = 0
    largest: int = 0
    by_rows: collections.Counter = field(default_factory=collections.Counter)

    def record(self, rows: int) -> None:
        self.steps += 1
        self.rows_stepped += rows
        self.largest = max(self.largest, rows)
        self.by_rows[rows] += 1


@dataclass(eq=False)
class _Job:
    """One request in the scheduler: its chunk requests and where each of them stands."""

    key: Any
    chunks: list[Request]
    join: Crossfade
    started: int = 0                         # chunks started as rows so far
    current: int = 0                         # the chunk whose audio goes out as it comes
    rows: dict[int, Row] = field(default_factory=dict)                 # live rows by chunk index
    held: dict[int, list[np.ndarray]] = field(default_factory=dict)    # later chunks' audio
    ended: set[int] = field(default_factory=set)


def run_rows(pipeline, gen: RowGenerator, source: Callable[[int], list[tuple[Any, Request]]], *,
             max_batch: int, parallel: bool = False, drop: Callable[[Any], bool] | None = None,
             stats: BatchStats | None = None, on_chunk: Callable[[Any, int, int], None] | None = None,
             crossfade_s: float = CROSSFADE_S) -> Iterator[tuple[Any, Any]]:
    """Yield ``(key, samples)`` as each request's audio is final, ``(key, DONE)`` at its end and
    ``(key, exception)`` when it fails (nothing more follows for that key).

    ``source(n)`` hands over up to ``n`` new ``(key, request)`` (it may block while nothing
    runs); the generator ends once no row is left and ``source`` gave nothing. ``drop(key)``
    true: the request leaves before the next step without an event. ``on_chunk(key, done,
    total)`` reports each chunk that ended."""
    from ttscli.generate import check_request, plain_request
    from ttscli.models import family_of
    from ttscli.text import chunk_text

    n_fade = int(round(crossfade_s * pipeline.sample_rate))
    jobs: list[_Job] = []
    events: list[tuple[Any, Any]] = []

    def fail(job: _Job, e: BaseException) -> None:
        for row in job.rows.values():
            gen.drop(row)
        job.rows.clear()
        jobs.remove(job)
        events.append((job.key, e))

    def start_next(job: _Job) -> None:
        i = job.started
        job.started += 1
        try:
            job.rows[i] = gen.start(job.chunks[i])
        except Exception as e:  # noqa: BLE001 - a request's failure is handed to its caller, never stops the batch
            fail(job, e)

    def admit(free: int) -> bool:
        """Start rows in free slots; True when a new request arrived."""
        for job in list(jobs):
            while free > 0 and job in jobs and job.started < len(job.chunks) and (parallel or not job.rows):
                start_next(job)
                free -= 1
        if free <= 0:
            return False
        arrived = source(free)
        for key, req in arrived:
            try:
                if pipeline.spec is not None:
                    req = check_request(pipeline.spec, family_of(pipeline.spec), req)
                req = plain_request(pipeline.spec, req)
                job = _Job(key, chunk_requests(req, chunk_text(req.text, pipeline.max_chunk_chars)),
                           Crossfade(n_fade))
            except Exception as e:  # noqa: BLE001 - a request's failure is handed to its caller, never stops the batch
                events.append((key, e))
                continue
            jobs.append(job)
            if not job.chunks:
                end_chunks(job)
            while free > 0 and job in jobs and job.started < len(job.chunks) and (parallel or not job.rows):
                start_next(job)
                free -= 1
        return bool(arrived)

    def deliver(job: _Job, i: int, audio: np.ndarray) -> None:
        if i == job.current:
            events.extend((job.key, x) for x in job.join.push(i, audio))
        else:
            job.held.setdefault(i, []).append(audio)

    def end_chunks(job: _Job) -> None:
        """Move ``current`` past every ended chunk; the request is DONE after its last."""
        while job.current in job.ended:
            job.current += 1
            for audio in job.held.pop(job.current, []):
                deliver(job, job.current, audio)
        if job.current >= len(job.chunks):
            events.extend((job.key, x) for x in job.join.finish())
            events.append((job.key, DONE))
            jobs.remove(job)

    while True:
        arrived = admit(max_batch - sum(len(j.rows) for j in jobs))
        if drop is not None:
            for job in [j for j in jobs if drop(j.key)]:
                for row in job.rows.values():
                    gen.drop(row)
                jobs.remove(job)
        live = [(job, i, row) for job in jobs for i, row in job.rows.items()]
        if not live:
            yield from _drain(events)
            if arrived or jobs:
                continue
            return
        gen.step([row for _, _, row in live])
        if stats is not None:
            stats.record(len(live))
        for job, i, row in live:
            if job not in jobs:
                continue
            try:
                audio = gen.take(row)
                if audio is not None and len(audio):
                    deliver(job, i, audio)
            except Exception as e:  # noqa: BLE001 - a request's failure is handed to its caller, never stops the batch
                fail(job, e)
                continue
            if not row.done:
                continue
            gen.drop(row)
            del job.rows[i]
            if row.error is not None:
                fail(job, row.error)
                continue
            job.ended.add(i)
            if on_chunk is not None:
                on_chunk(job.key, len(job.ended), len(job.chunks))
            end_chunks(job)
        yield from _drain(events)


def _drain(events: list) -> Iterator:
    while events:
        yield events.pop(0)


def feed(requests: Iterable[tuple[Any, Request]]) -> Callable[[int], list[tuple[Any, Request]]]:
    """A ``source`` for :func:`run_rows` that reads an iterable as rows are free."""
    it = iter(requests)

    def source(n: int) -> list[tuple[Any, Request]]:
        out = []
        for _ in range(n):
            nxt = next(it, None)
            if nxt is None:
                break
            out.append(nxt)
        return out

    return source


def synthesize_many(pipeline, requests: Iterable[tuple[Any, Request]], max_batch: int = 16
                    ) -> Iterator[tuple[Any, np.ndarray | BaseException]]:
    """Whole requests through one batch (``ttscli batch``): every chunk of every request is a
    row; each request's audio is yielded whole when its last chunk ends, or its exception."""
    gen = pipeline.rows()
    parts: dict[Any, list[np.ndarray]] = {}
    for key, x in run_rows(pipeline, gen, feed(requests), max_batch=max_batch, parallel=True):
        if isinstance(x, np.ndarray):
            parts.setdefault(key, []).append(x)
        elif isinstance(x, BaseException):
            parts.pop(key, None)
            yield key, x
        else:
            got = parts.pop(key, [])
            yield key, np.concatenate(got) if got else np.zeros(0, np.float32)


def stream_many(pipeline, source: Callable[[int], list[tuple[Any, Request]]], drop: Callable[[Any], bool],
                max_batch: int = 16, stats: BatchStats | None = None) -> Iterator[tuple[Any, Any]]:
    """Requests streamed through one batch as they arrive (``serve``): a request's chunks run
    one after another, so its audio goes out as soon as it is decoded."""
    yield from run_rows(pipeline, pipeline.rows(), source, max_batch=max_batch, drop=drop, stats=stats)


def synthesize_rows(pipeline, gen: RowGenerator, request: Request, workers: int,
                    on_chunk: Callable[[int, int], None] | None = None,
                    crossfade_s: float = CROSSFADE_S) -> Iterator[np.ndarray]:
    """One request's chunks as up to ``workers`` rows at once (``speak --workers``), its audio in order."""
    report = (lambda _key, done, total: on_chunk(done, total)) if on_chunk else None
    for _, x in run_rows(pipeline, gen, feed([(0, request)]), max_batch=workers, parallel=True,
                         on_chunk=report, crossfade_s=crossfade_s):
        if isinstance(x, BaseException):
            raise x
        if isinstance(x, np.ndarray):
            yield x


def bench_rows(pipeline, sizes: list[int], frames: int, text: str, seed: int = 0, warmup: int = 1,
               frame_seconds: float | None = None) -> dict[str, dict]:
    """``ttscli bench MODEL --batch`` for a family without figures of its own: ``B`` requests of
    ``frames`` frames each at once through ``pipeline.rows()``, per size (request ``i`` seeded
    ``seed + i``; random weights never stop, so each runs with ignore_eos). A step is whatever the
    rows do in one call (the batched forward, and a row's decoding when its frames end); the
    step median, the frames and the audio rate cover every step, prefills and decoding included.
    The audio is what the rows hand over, or, with ``frame_seconds``, that much per row-step."""
    from ttscli.errors import UsageError

    if pipeline.rows() is None:
        raise UsageError("--batch needs batched rows, which this load does not run: its LM is on a backend that "
                         "takes one request at a time (`ttscli models MODEL` lists the backends)")
    out = {}
    for B in sizes:
        for _ in range(warmup + 1):
            gen = pipeline.rows()
            t0 = time.perf_counter()
            rows = [gen.start(Request(text=text, seed=seed + i, max_frames=frames, ignore_eos=True)) for i in range(B)]
            steps, n, samples = [], 0, 0
            while live := [r for r in rows if not r.done]:
                ts = time.perf_counter()
                gen.step(live)
                steps.append(time.perf_counter() - ts)
                n += len(live)
                for r in live:
                    piece = gen.take(r)
                    samples += 0 if piece is None else len(piece)
            wall = time.perf_counter() - t0
            failed = next((r.error for r in rows if r.error is not None), None)
            for r in rows:
                gen.drop(r)
            if failed is not None:
                raise failed
        step_ms = float(np.median(steps) * 1e3)
        audio_s = n * frame_seconds if frame_seconds is not None else samples / pipeline.sample_rate
        out[f"batch {B}"] = {"step_ms_p50": step_ms, "frame_ms_per_row": step_ms / B, "frames_per_s": n / wall,
                             "audio_s_per_s": audio_s / wall, "total_s": wall}
    base = out[f"batch {sizes[0]}"]["audio_s_per_s"]
    for v in out.values():
        v["speedup_vs_first"] = v["audio_s_per_s"] / base
    return out

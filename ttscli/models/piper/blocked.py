"""Time-blocked evaluation over two threads: ``fn`` on overlapping time blocks of its input,
one half of the blocks on a worker thread with its own MLX stream.

MLX's CPU elementwise kernels run on the evaluating thread only and ``mx.eval`` releases the
GIL, so two threads each evaluating half of the blocks use both cores; small blocks keep each
block's intermediates in cache. A block carries a halo as wide as ``fn``'s receptive field, so
the result equals ``fn`` on the whole input.
"""
from __future__ import annotations

import os
import queue
import threading

import mlx.core as mx


class _Worker:
    """A long-lived thread with its own MLX CPU stream, to evaluate a second graph alongside
    the caller's. MLX's CPU elementwise kernels run on the evaluating thread only and
    ``mx.eval`` releases the GIL, so two threads each evaluating half of a stage use both
    cores. Streams are thread-local in MLX, hence one stream made inside the thread; the
    thread lives as long as the process (daemon) so no stream dies with work in flight.
    """

    _instance = None
    _lock = threading.Lock()
    # graphs are built under this lock and only evaluated concurrently: mx.compile's trace
    # cache is process-wide, so two threads must not trace at once. (A segfault seen here came
    # from a lazy array shared by both graphs: everything both halves read is evaluated first.)
    build_lock = threading.Lock()

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, daemon=True, name="ttscli-piper-mlx").start()

    @classmethod
    def get(cls) -> "_Worker":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _loop(self) -> None:
        stream = mx.new_stream(mx.cpu)
        while True:
            fn, box, done = self._jobs.get()
            try:
                with mx.stream(stream):
                    out = fn()          # takes build_lock while it builds each graph
                    mx.eval(out)
                box.append(out)
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
                box.append(err)
            done.set()

    def submit(self, fn):
        """Start ``fn()`` (returning arrays) on the worker; the result's getter waits for it."""
        box: list = []
        done = threading.Event()
        self._jobs.put((fn, box, done))

        def result():
            done.wait()
            if isinstance(box[0], BaseException):
                raise box[0]
            return box[0]
        return result


class _BlasThreads:
    """The BLAS (OpenBLAS or MKL, see ttscli/_blas.py) single-threaded inside a block
    (process-wide while it lasts): while our two threads each run GEMMs, its pool only added
    threads competing for the same two cores (the decoder was faster with the BLAS on one
    thread than on its two)."""

    def __init__(self, n: int):
        self.n, self.prev = n, None

    def __enter__(self):
        if os.environ.get("TTSCLI_PIPER_BLAS1", "1") == "1":
            from ttscli import _blas
            self.prev = _blas.set_num_threads(self.n)

    def __exit__(self, *exc):
        if self.prev is not None:
            from ttscli import _blas
            _blas.set_num_threads(self.prev)


def _parallel() -> bool:
    """Split blocked work over two threads (TTSCLI_PIPER_THREADS=1 turns it off)."""
    return os.environ.get("TTSCLI_PIPER_THREADS", "2") != "1" and (os.cpu_count() or 1) > 1


def _block(fn, read, t: int, halo: int, s: int, e: int, scale: int) -> mx.array:
    """``fn``'s output for the input frames ``s:e`` of a ``t``-frame input, from
    ``read(lo, hi)`` = input frames ``s - halo : e + halo`` (clipped to ``0:t``), evaluated now.
    ``fn(v, interior)`` returns (output, index of its first sample); ``interior``: ``v`` has the
    full halo on both sides."""
    lo, hi = max(0, s - halo), min(t, e + halo)
    v = read(lo, hi)
    with _Worker.build_lock:
        out, first = fn(v, s - lo == halo and hi - e == halo)
        a = (s - lo) * scale - first
        out = out[:, a: a + (e - s) * scale]
    mx.eval(out)
    return out


def _bounds(start: int, stop: int, block: int, even: bool = False) -> list[int]:
    """``start:stop`` cut into equal blocks of at most ``block`` frames (an even number of
    them if ``even``)."""
    n = max(1, -(-(stop - start) // block))
    if even:
        n += n % 2
    return [start + (stop - start) * j // n for j in range(n + 1)]


class _Queue:
    """Block indices handed out one at a time to whichever thread asks first: the two threads
    stay busy to the end even when one is slowed (another process on its core)."""

    def __init__(self, n: int):
        self.n, self.next, self.lock = n, 0, threading.Lock()

    def take(self) -> int | None:
        with self.lock:
            j, self.next = self.next, self.next + 1
        return j if j < self.n else None

    def stop(self) -> None:
        """Hand out no more indices."""
        with self.lock:
            self.next = self.n


def _on_both_threads(work, jobs: _Queue) -> None:
    """Run ``work`` here and on ``_Worker`` at once, BLAS single-threaded meanwhile. An error
    here (e.g. KeyboardInterrupt) stops the queue and wins over the worker's, which may only
    be the same error again, read from a piece."""
    with _BlasThreads(1):
        other = _Worker.get().submit(work)
        try:
            work()
        except BaseException:
            jobs.stop()
            try:
                other()
            except BaseException:  # noqa: BLE001
                pass
            raise
        other()


def blocked(fn, x: mx.array, halo: int, block: int, scale: int = 1, min_split: int | None = None,
            ) -> mx.array:
    """``fn`` over overlapping time blocks (axis 1 of ``x``); exact when ``halo`` covers fn's
    receptive field. Blocks are evaluated one by one: one lazy graph of all blocks ran
    breadth-first (MLX's eval order) with every block's temporaries alive at once, and was
    slower.

    With two cores and at least ``min_split`` frames (default ``8 * halo``) this thread and
    ``_Worker`` take blocks from one queue; each block's arithmetic is unchanged.
    """
    t = x.shape[1]
    parallel = _parallel() and t >= (8 * halo if min_split is None else min_split)
    if not parallel and t <= 2 * block:
        return fn(x, False)[0]
    bounds = _bounds(0, t, block, even=parallel)
    outs: list = [None] * (len(bounds) - 1)
    read = lambda lo, hi: x[:, lo:hi]  # noqa: E731
    if not parallel:
        for j in range(len(outs)):
            outs[j] = _block(fn, read, t, halo, bounds[j], bounds[j + 1], scale)
        return mx.concatenate(outs, axis=1)
    mx.eval(x)                      # the worker's graph must not depend on pending work here
    jobs = _Queue(len(outs))

    def work():
        while (j := jobs.take()) is not None:
            outs[j] = _block(fn, read, t, halo, bounds[j], bounds[j + 1], scale)
        return []

    _on_both_threads(work, jobs)
    return mx.concatenate(outs, axis=1)


def blocked_chain(stages: list[tuple], x: mx.array) -> mx.array:
    """``blocked`` over a chain of stages ``(fn, halo, block, scale)``, each reading the one
    before, as ONE queue of blocks for both threads: a block of stage i+1 starts as soon as
    the blocks of stage i that it reads are done, so at a stage's end neither thread idles
    while the other finishes its last block, and stage outputs stay in pieces (only the last
    stage's are concatenated). Each block's arithmetic is ``blocked``'s, so the result is too.
    A few percent faster for the decoder than stage-by-stage queues, with which the cores
    idled during the first two stages (docs/benchmarks.md#code-comment-figures).
    """
    ts = [x.shape[1]]
    for _, _, _, scale in stages:
        ts.append(ts[-1] * scale)
    if not _parallel() or any(t < 8 * st[1] for t, st in zip(ts, stages)):
        for fn, halo, block, scale in stages:
            x = blocked(fn, x, halo, block, scale)
        return x
    mx.eval(x)
    bounds = [_bounds(0, t, st[2], even=True) for t, st in zip(ts, stages)]
    tasks = [(i, j) for i, b in enumerate(bounds) for j in range(len(b) - 1)]
    outs = [[None] * (len(b) - 1) for b in bounds]
    done = [[threading.Event() for _ in range(len(b) - 1)] for b in bounds]
    jobs = _Queue(len(tasks))

    def piece(i: int, j: int) -> mx.array:
        done[i][j].wait()
        if isinstance(outs[i][j], BaseException):
            raise outs[i][j]
        return outs[i][j]

    def source(i: int, lo: int, hi: int) -> mx.array:
        """Frames ``lo:hi`` of stage ``i``'s input, waiting for the pieces that hold them."""
        if i == 0:
            return x[:, lo:hi]
        scale = stages[i - 1][3]
        edges = [b * scale for b in bounds[i - 1]]
        parts = []
        for k in range(len(edges) - 1):
            if edges[k + 1] > lo and edges[k] < hi:
                p = piece(i - 1, k)
                parts.append(p[:, max(lo, edges[k]) - edges[k]: min(hi, edges[k + 1]) - edges[k]])
        return parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=1)

    def run(i: int, j: int) -> None:
        fn, halo, _, scale = stages[i]
        try:
            outs[i][j] = _block(fn, lambda lo, hi: source(i, lo, hi), ts[i], halo,
                                bounds[i][j], bounds[i][j + 1], scale)
        except BaseException as err:
            outs[i][j] = err
            jobs.stop()
            raise
        finally:
            done[i][j].set()

    def work():
        while (n := jobs.take()) is not None:
            run(*tasks[n])
        return []

    _on_both_threads(work, jobs)
    return mx.concatenate([piece(len(stages) - 1, j) for j in range(len(outs[-1]))], axis=1)

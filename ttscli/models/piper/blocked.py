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
    threads competing for the same two cores (OpenBLAS: decoder measured 507 ms vs 552 ms with
    its 2 threads, 557 ms unsplit)."""

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


def _span(fn, x: mx.array, halo: int, bounds: list[int], scale: int) -> list[mx.array]:
    """``fn(x)`` for the input frames ``bounds[j]:bounds[j+1]`` (``scale`` output samples per
    input frame), each from an overlapping block of ``x``, evaluated one by one: one lazy
    graph of all blocks ran breadth-first (MLX's eval order) with every block's temporaries
    alive at once: measured ~1.5x slower. ``fn(v, interior)`` returns (output, index of
    its first sample); ``interior``: ``v`` has the full halo on both sides."""
    t = x.shape[1]
    outs = []
    for s, e in zip(bounds[:-1], bounds[1:]):
        lo, hi = max(0, s - halo), min(t, e + halo)
        with _Worker.build_lock:
            out, first = fn(x[:, lo:hi], s - lo == halo and hi - e == halo)
            a = (s - lo) * scale - first
            out = out[:, a: a + (e - s) * scale]
        mx.eval(out)
        outs.append(out)
    return outs


def _bounds(start: int, stop: int, block: int) -> list[int]:
    """``start:stop`` cut into equal blocks of at most ``block`` frames."""
    n = max(1, -(-(stop - start) // block))
    return [start + (stop - start) * j // n for j in range(n + 1)]


def blocked(fn, x: mx.array, halo: int, block: int, scale: int = 1, min_split: int | None = None,
            ) -> mx.array:
    """``fn`` over overlapping time blocks (axis 1 of ``x``); exact when ``halo`` covers fn's
    receptive field.

    With two cores and at least ``min_split`` frames (default ``8 * halo``) the frames split
    into two halves of equal blocks, the second evaluated by ``_Worker`` while this thread
    does the first; each block's arithmetic is unchanged.
    """
    t = x.shape[1]
    parallel = _parallel() and t >= (8 * halo if min_split is None else min_split)
    if not parallel and t <= 2 * block:
        return fn(x, False)[0]
    if not parallel:
        return mx.concatenate(_span(fn, x, halo, _bounds(0, t, block), scale), axis=1)
    mx.eval(x)                      # the worker's graph must not depend on pending work here
    mid = t // 2
    with _BlasThreads(1):
        second = _Worker.get().submit(lambda: _span(fn, x, halo, _bounds(mid, t, block), scale))
        first = _span(fn, x, halo, _bounds(0, mid, block), scale)
        second = second()
    return mx.concatenate(first + second, axis=1)

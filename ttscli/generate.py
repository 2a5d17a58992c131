"""Requests, the chunk scheduler, workers, crossfade and streaming.

The CLI builds a :class:`Request`; :func:`synthesize` splits its text into sentence chunks,
runs them through a :class:`~ttscli.models.base.Pipeline` and yields float32 audio in order.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np


@dataclass
class Request:
    text: str
    voice: str | None = None                 # preset speaker name, or a saved voice file (.safetensors)
    instruct: str | None = None              # style instruction / voice description
    language: str | None = None              # "auto" when None
    ref_audio: np.ndarray | None = None      # clone: mono float32 reference, already at ref_sample_rate
    ref_sample_rate: int | None = None
    ref_text: str | None = None              # clone: transcript of the reference (in-context mode)
    x_vector_only: bool = False              # clone: speaker embedding only, no reference codes
    save_voice: Path | None = None           # clone: store the voice prompt here
    seed: int | None = None
    speed: float = 1.0
    max_frames: int | None = None            # None: the model's default
    stream: bool = False
    first_chunk_frames: int = 3
    chunk_frames: int = 25
    sampling: dict[str, Any] = field(default_factory=dict)   # overrides of the model's defaults
    extra: dict[str, Any] = field(default_factory=dict)      # family-specific knobs

    def for_chunk(self, text: str) -> "Request":
        return replace(self, text=text)


@dataclass
class Stats:
    """Timings a pipeline records while generating (bench reads them). Seconds unless noted."""

    prefill_tokens: int = 0
    prefill_s: float = 0.0
    step_s: list[float] = field(default_factory=list)        # talker step per frame
    frame_s: list[float] = field(default_factory=list)       # full frame (talker + helpers)
    decoder_s: float = 0.0
    decoder_frames: int = 0
    frames: int = 0
    first_audio_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# ---- the chunk scheduler -------------------------------------------------------------------

CROSSFADE_S = 0.02


def crossfade_join(pieces: Iterator[tuple[int, np.ndarray]], n_fade: int) -> Iterator[np.ndarray]:
    """Join audio of consecutive text chunks with an equal-power crossfade of n_fade samples.

    `pieces` yields (chunk_index, samples) in order; within a chunk, samples pass straight through
    except the last n_fade, which are held back to blend with the start of the next chunk.
    """
    held = np.zeros(0, np.float32)       # tail of the previous chunk, not yet emitted
    current = -1
    head_needed = 0                      # samples of the new chunk still to blend into `held`
    fade_in = np.sin(np.linspace(0, np.pi / 2, n_fade, dtype=np.float32)) ** 2 if n_fade else None
    for idx, x in pieces:
        x = np.asarray(x, np.float32).reshape(-1)
        if idx != current:
            current = idx
            head_needed = len(held)
        if head_needed:
            k = min(head_needed, len(x))
            start = len(held) - head_needed
            w = fade_in[start:start + k] if len(held) == n_fade else np.linspace(0, 1, len(held), dtype=np.float32)[start:start + k]
            held[start:start + k] = held[start:start + k] * (1 - w) + x[:k] * w
            head_needed -= k
            x = x[k:]
            if head_needed:
                continue
            yield held
            held = np.zeros(0, np.float32)
        buf = np.concatenate([held, x]) if len(held) else x
        keep = min(n_fade, len(buf))
        if len(buf) > keep:
            yield buf[: len(buf) - keep]
        held = buf[len(buf) - keep:].copy()
    if len(held):
        yield held


def chunk_requests(request: Request, chunks: list[str]) -> list[Request]:
    """One request per text chunk; seeds derive from the base seed so workers cannot change the audio."""
    out = []
    for i, text in enumerate(chunks):
        r = request.for_chunk(text)
        if request.seed is not None:
            r.seed = request.seed + i
        if i > 0:
            r.save_voice = None  # the voice prompt is stored once
        out.append(r)
    return out


def _run_sequential(generate: Callable[[Request], Iterator[np.ndarray]], reqs: list[Request]):
    for i, r in enumerate(reqs):
        for x in generate(r):
            yield i, x


def _run_workers(generate: Callable[[Request], Iterator[np.ndarray]], reqs: list[Request], workers: int):
    """N threads, each taking the next chunk; output strictly in chunk order, streamed per chunk."""
    queues = [queue.Queue() for _ in reqs]
    next_job = iter(range(len(reqs)))
    lock = threading.Lock()
    stop = threading.Event()
    DONE = object()

    def work():
        while not stop.is_set():
            with lock:
                i = next(next_job, None)
            if i is None:
                return
            try:
                for x in generate(reqs[i]):
                    if stop.is_set():
                        return
                    queues[i].put(x)
                queues[i].put(DONE)
            except BaseException as e:  # handed to the consumer, raised in order
                queues[i].put(e)
                return

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(workers, len(reqs)))]
    for t in threads:
        t.start()
    try:
        for i, q in enumerate(queues):
            while True:
                item = q.get()
                if item is DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield i, item
    finally:
        stop.set()


def synthesize(
    pipeline,
    request: Request,
    workers: int = 1,
    crossfade_s: float = CROSSFADE_S,
    on_chunk: Callable[[int, int], None] | None = None,
) -> Iterator[np.ndarray]:
    """Split request.text into the pipeline's sentence chunks and yield audio in order.

    `workers` > 1 runs chunks concurrently; callers must pass 1 for pipelines that share decoder
    state (MLX), see `effective_workers`. `on_chunk(done, total)` reports progress.
    """
    from ttscli.text import chunk_text

    chunks = chunk_text(request.text, pipeline.max_chunk_chars)
    reqs = chunk_requests(request, chunks)

    def gen(r: Request) -> Iterator[np.ndarray]:
        yield from pipeline.generate(r)
        if on_chunk:
            on_chunk(next(k for k, q in enumerate(reqs) if q is r) + 1, len(reqs))
        clear = getattr(pipeline, "clear_cache", None)
        if clear:
            clear()

    pieces = _run_sequential(gen, reqs) if workers <= 1 else _run_workers(gen, reqs, workers)
    yield from crossfade_join(pieces, int(round(crossfade_s * pipeline.sample_rate)))


def effective_workers(pipeline, requested: int) -> tuple[int, str | None]:
    """Workers actually used, and a note when the request was reduced."""
    if requested <= 1:
        return 1, None
    if not getattr(pipeline, "concurrent_safe", False):
        why = ("concurrent chunks must not share an MLX decoder's KV cache"
               if getattr(pipeline, "code_decoder_backend", "mlx") == "mlx"
               else "its MLX components (code predictor, speech decoder) cannot run concurrently")
        return 1, f"--workers {requested}: running chunks one at a time, because {why}"
    return requested, None


def render(pipeline, request: Request, sink, workers: int = 1, on_chunk=None) -> int:
    """Synthesize into a Sink; commits only when everything succeeded. Returns samples written."""
    n = 0
    try:
        for x in synthesize(pipeline, request, workers=workers, on_chunk=on_chunk):
            sink.write(x)
            n += len(x)
    except BaseException:
        sink.abort()
        raise
    if n == 0:
        sink.abort()
        from ttscli.errors import UsageError

        raise UsageError("the text has nothing the voice can speak (only punctuation or symbols?)")
    sink.close()
    return n

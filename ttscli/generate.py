"""Request checks, the chunk scheduler, workers, crossfade and streaming.

The CLI builds a :class:`Request`; :func:`synthesize` splits its text into sentence chunks,
runs them through a :class:`~ttscli.models.base.Pipeline` and yields float32 audio in order.
``Request`` and ``Stats`` are the family contract's (models/base.py), the crossfade is
ttscli.dsp's; both are re-exported here, where the engine's callers have always found them.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import replace
from typing import Callable, Iterator

import numpy as np

from ttscli.dsp import CROSSFADE_S, crossfade_join
from ttscli.models.base import CLI_NAMING, Naming, Request, Stats, chunk_requests  # noqa: F401  (Stats: the engine imports it from here)
from ttscli.voicefile import is_voice_file


# The common fields a family may or may not honour, and how to tell that a request uses one.
HONOURABLE = {
    "voice": lambda r: r.voice is not None,
    "instruct": lambda r: r.instruct is not None,
    "language": lambda r: r.language is not None,
    "speed": lambda r: r.speed != 1.0,
    "ref_audio": lambda r: r.ref_audio is not None,
    "save_voice": lambda r: r.save_voice is not None,
    "max_frames": lambda r: r.max_frames is not None,
    "stream": lambda r: r.stream,
}


def honoured(spec, family) -> list[str]:
    """The common request fields this model honours: its family's, less what the registry says
    this model cannot do (e.g. --instruct on a model without instructions). ``stream`` is the
    registry's word alone, so that `ttscli models` and --stream agree: the engine passes each
    piece of audio on as the pipeline yields it, and every pipeline yields at least once a chunk."""
    out = []
    for name in family.honours | {"stream"}:
        if name == "instruct" and not (spec.can("instruct") or spec.can("voice_design")):
            continue
        if name in ("ref_audio", "save_voice") and not spec.can("clone"):
            continue
        if name == "stream" and not spec.can("streaming"):
            continue
        if name == "voice" and not (spec.voices or spec.can("clone")):
            continue
        out.append(name)
    return sorted(out)


def needs_ref_text(family, knobs: dict) -> bool:
    """Whether a clone of this family must come with the reference's transcript: unless the
    family clones from audio alone, or the request asks for an x-vector-only clone."""
    return not family.ref_text_optional and not knobs.get("x_vector_only")


def check_request(spec, family, request: Request, naming: Naming = CLI_NAMING) -> Request:
    """Refuse what this model cannot honour, and a request without a field the model's registry
    entry ``requires`` (one line naming the model and what it takes, spelt as ``naming`` says:
    the CLI's flags or the HTTP API's fields); return the request with its knobs parsed to their
    declared types. Nothing here needs the model's weights."""
    from ttscli.errors import UsageError

    ok = honoured(spec, family)
    for name, used in HONOURABLE.items():
        if used(request) and name not in ok:
            raise UsageError(f"{spec.id} cannot honour {naming.field(name)}; drop it (see {naming.where(spec.id)})")
    for name, why in spec.requires.items():
        if name not in HONOURABLE:
            raise UsageError(f"registry {spec.origin}: {spec.id} requires {name!r}, which is not a request field "
                             f"({', '.join(HONOURABLE)})")
        if not HONOURABLE[name](request):
            raise UsageError(f"{spec.id} needs {naming.field(name)} ({why})")
    if request.language is not None and spec.languages:
        known = [x.lower() for x in spec.languages]
        if request.language.lower() not in known:
            raise UsageError(f"{spec.id} does not speak {naming.field('language')} {request.language!r} "
                             f"(it takes {', '.join(spec.languages)})")
    if request.voice is not None and "voice" in family.honours and not is_voice_file(request.voice):
        voices = family.voices(spec, None) if family.voices else spec.voices
        # a blend "a:0.7,b:0.3" (families that mix style vectors) names only known voices too
        wanted = [part.partition(":")[0].strip().lower() for part in request.voice.split(",")]
        # a multi-speaker model also takes a speaker's number (capabilities.speakers: how many)
        numbered = [str(i) for i in range(int(spec.capabilities.get("speakers", 0)))] if len(wanted) == 1 else []
        if voices and any(w not in (v.lower() for v in voices) and w not in numbered for w in wanted):
            raise UsageError(f"{spec.id} has no voice {request.voice!r} (it has {', '.join(voices)})")
    if request.seed is not None and not 0 <= request.seed < 2**63:
        raise UsageError(f"{naming.field('seed')} must be in [0, 2^63), got {request.seed}")
    first = request.first_chunk_frames if request.first_chunk_frames is not None else family.first_chunk_frames
    return replace(request, knobs=family.check_knobs(request.knobs, spec.id, naming), first_chunk_frames=first)


# ---- the chunk scheduler -------------------------------------------------------------------

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
            except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised in order
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

    `workers` > 1 runs chunks concurrently: as rows of one batch where the pipeline generates
    rows (``Pipeline.rows()``, see ttscli.batching), else on threads; callers must pass 1 for
    other pipelines that share decoder state (MLX), see `effective_workers`. `on_chunk(done,
    total)` reports progress.
    """
    from ttscli.memory import release_memory_if_grown
    from ttscli.models import family_of
    from ttscli.text import chunk_text

    spec = pipeline.spec
    if spec is not None:
        request = check_request(spec, family_of(spec), request)
    rows = pipeline.rows() if workers > 1 else None
    if rows is not None:  # chunks as rows of one batch: one forward per frame for all of them
        from ttscli.batching import synthesize_rows

        try:
            yield from synthesize_rows(pipeline, rows, request, workers, on_chunk, crossfade_s)
        finally:
            release_memory_if_grown()
        return
    chunks = chunk_text(request.text, pipeline.max_chunk_chars)
    reqs = chunk_requests(request, chunks)

    def gen(r: Request) -> Iterator[np.ndarray]:
        yield from pipeline.generate(r)
        if on_chunk:
            on_chunk(next(k for k, q in enumerate(reqs) if q is r) + 1, len(reqs))
        pipeline.clear_cache()

    pieces = _run_sequential(gen, reqs) if workers <= 1 else _run_workers(gen, reqs, workers)
    try:
        yield from crossfade_join(pieces, int(round(crossfade_s * pipeline.sample_rate)))
    finally:
        # a long-running caller (server, batch, library loop) otherwise keeps every thread's
        # malloc arena at its high-water mark: see ttscli/memory.py
        release_memory_if_grown()


def effective_workers(pipeline, requested: int) -> tuple[int, str | None]:
    """Workers actually used, and a note when the request was reduced."""
    if requested <= 1:
        return 1, None
    if not pipeline.concurrent_safe and pipeline.rows() is None:
        why = ("concurrent chunks must not share an MLX decoder's KV cache"
               if pipeline.backends.get("code_decoder", "mlx") == "mlx"
               else "its MLX components cannot run concurrently")
        return 1, f"--workers {requested}: running chunks one at a time, because {why}"
    return requested, None


def write_all(chunks: Iterator[np.ndarray], sink) -> int:
    """Write audio chunks into a Sink; commits only when everything succeeded (and something was
    spoken), else aborts it. Returns samples written."""
    from ttscli import signals

    n = 0
    try:
        for x in chunks:
            signals.check()   # a stop whose exception was lost on the way must still stop the run
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


def render(pipeline, request: Request, sink, workers: int = 1, on_chunk=None) -> int:
    """Synthesize into a Sink; commits only when everything succeeded. Returns samples written."""
    return write_all(synthesize(pipeline, request, workers=workers, on_chunk=on_chunk), sink)

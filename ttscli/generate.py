"""Request checks, the chunk scheduler, workers, crossfade and streaming.

The CLI builds a :class:`Request`; :func:`synthesize` splits its text into sentence chunks,
runs them through a :class:`~ttscli.models.base.Pipeline` and yields float32 audio in order.
``Request`` and ``Stats`` are the family contract's (models/base.py), the crossfade is
ttscli.dsp's; both are re-exported here, where the engine's callers have always found them.
"""
from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np

from ttscli.dsp import CROSSFADE_S, Crossfade, crossfade_join
from ttscli.models.base import CLI_NAMING, Naming, Request, Stats, chunk_requests  # noqa: F401  (Stats: the engine imports it from here)
from ttscli.ssml import MAX_PAUSE_S, Pause, Speech
from ttscli.voicefile import is_voice_file

if TYPE_CHECKING:
    from ttscli.words import Aligner, Word


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
    if not 0.0 <= request.sentence_silence <= MAX_PAUSE_S:
        raise UsageError(f"{naming.field('sentence_silence')} must be within 0 and {MAX_PAUSE_S:g} seconds, "
                         f"got {request.sentence_silence:g}")
    plan(spec, request, "speed" in ok)      # SSML and pause errors before any audio
    first = request.first_chunk_frames if request.first_chunk_frames is not None else family.first_chunk_frames
    return replace(request, knobs=family.check_knobs(request.knobs, spec.id, naming), first_chunk_frames=first)


# ---- the text plan: SSML, pauses, sentence silence, normalization --------------------------

def plan(spec, request: Request, honours_speed: bool = True) -> list[Speech | Pause]:
    """What to say and when to be silent: ``request.text`` as SSML (``request.ssml``) or with
    ``[pause:S]`` markers, each sentence followed by ``request.sentence_silence``, the words
    normalized for the text's language (ttscli.textnorm) unless ``request.normalize_text`` is off.
    A ``<prosody rate>`` is refused for a model that does not honour speed."""
    from ttscli.errors import UsageError
    from ttscli.ssml import merge, parse_ssml, split_pauses
    from ttscli.text import split_sentences
    from ttscli.textnorm import normalize, say_as, text_language

    lang = text_language(request.language, spec.languages if spec is not None else (), request.text)
    if request.ssml:
        pieces = parse_ssml(request.text, lambda kind, text, fmt: say_as(kind, text, fmt, lang))
    else:
        pieces = split_pauses(request.text)
    out: list[Speech | Pause] = []
    for p in pieces:
        if isinstance(p, Pause):
            out.append(p)
            continue
        if p.rate != 1.0:
            if not honours_speed:
                raise UsageError(f"{spec.id} cannot honour SSML <prosody rate> (it has no speed control); drop it")
            if not 0.25 <= request.speed * p.rate <= 4.0:
                raise UsageError(f"SSML <prosody rate> times the speed is {request.speed * p.rate:g}; "
                                 "keep it within 0.25 and 4")
        text = normalize(p.text, lang).text if request.normalize_text else p.text
        if request.sentence_silence > 0:
            for sentence in split_sentences(text):
                out += [Speech(sentence, p.rate), Pause(request.sentence_silence)]
        else:
            out.append(Speech(text, p.rate))
    if not any(isinstance(p, Speech) for p in out):
        raise UsageError("the text has no words to speak, only pauses")
    return merge(out)


def plain_request(spec, request: Request) -> Request:
    """The request as one piece of speech, normalized, for the row scheduler (ttscli.batching),
    which joins a request's chunks with crossfades only: a plan with a pause or a rate change
    is refused there, naming what to drop."""
    from ttscli.errors import UsageError

    pieces = plan(spec, request)
    if len(pieces) != 1 or not isinstance(pieces[0], Speech) or pieces[0].rate != 1.0:
        name = spec.id if spec is not None else "this model"
        raise UsageError(f"{name} runs requests as rows of one batch here, which cannot hold pauses "
                         "(SSML <break>, <p>, [pause:S], sentence silence) or <prosody rate>; drop them")
    return replace(request, text=pieces[0].text, normalize_text=False, ssml=False, sentence_silence=0.0)


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
    """Plan request.text (:func:`plan`: SSML, pauses, normalization), split each piece of speech
    into the pipeline's sentence chunks and yield audio in order, silence for each pause.

    `workers` > 1 runs chunks concurrently: as rows of one batch where the pipeline generates
    rows (``Pipeline.rows()``, see ttscli.batching), else on threads; callers must pass 1 for
    other pipelines that share decoder state (MLX), see `effective_workers`. `on_chunk(done,
    total)` reports progress (counted within each piece of speech).
    """
    for said in _planned(pipeline, request):
        if isinstance(said, np.ndarray):
            yield said
        else:
            yield from _speak(pipeline, said, workers, crossfade_s, on_chunk)


def _planned(pipeline, request: Request) -> Iterator[Request | np.ndarray]:
    """The request checked and planned (:func:`plan`): each piece of speech as a plain request
    (already normalized, no SSML, no pauses), each pause as its silence at the pipeline's rate."""
    from ttscli.models import family_of

    spec = pipeline.spec
    honours_speed = True
    if spec is not None:
        request = check_request(spec, family_of(spec), request)
        honours_speed = "speed" in honoured(spec, family_of(spec))
    for piece in plan(spec, request, honours_speed):
        if isinstance(piece, Pause):
            yield np.zeros(int(round(piece.seconds * pipeline.sample_rate)), np.float32)
        else:
            yield replace(request, text=piece.text, speed=request.speed * piece.rate, normalize_text=False,
                          ssml=False, sentence_silence=0.0)


def _speak(pipeline, request: Request, workers: int, crossfade_s: float,
           on_chunk: Callable[[int, int], None] | None) -> Iterator[np.ndarray]:
    """One piece of plain speech: its sentence chunks through the pipeline, crossfaded."""
    from ttscli.memory import release_memory_if_grown
    from ttscli.text import chunk_text

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


@dataclass
class Chunk:
    """A piece of the output as :func:`synthesize_words` yields it: its samples, and the words
    whose spans are known once it is (:class:`ttscli.words.Word`, ``(start, end, word)`` in
    seconds from the start of the whole output; a word may end in audio a later chunk carries)."""

    audio: np.ndarray
    words: list[Word] = field(default_factory=list)


def synthesize_words(
    pipeline,
    request: Request,
    workers: int = 1,
    crossfade_s: float = CROSSFADE_S,
    on_chunk: Callable[[int, int], None] | None = None,
    aligner: Aligner | None = None,
) -> Iterator[Chunk]:
    """:func:`synthesize` with word timestamps: the same audio, in :class:`Chunk` s.

    The text is planned as :func:`synthesize` plans it (SSML, pauses, normalization: the words
    are the ones spoken, "$12.50" as "twelve dollars and fifty cents"); a pause is a chunk of
    silence with no words. A pipeline with ``word_durations`` gives each piece's words from its
    duration predictor as the piece is made; any other pipeline's text chunk is made whole, then
    ``aligner`` (None: :func:`ttscli.words.default_aligner`, pocketsphinx for English) finds its
    words in its audio. Each chunk's times are shifted by where its audio starts in the output, crossfades and
    pauses included. Chunks run one at a time, or on ``workers`` threads where the pipeline is
    ``concurrent_safe``.
    """
    pieces = _planned(pipeline, request)   # checked and planned before the aligner loads
    first = next(pieces)
    if not pipeline.word_durations and aligner is None:
        from ttscli.words import default_aligner

        aligner = default_aligner()
    offset = 0          # samples already yielded, earlier pieces and pauses
    for said in itertools.chain([first], pieces):
        if isinstance(said, np.ndarray):
            offset += len(said)
            yield Chunk(said)
            continue
        start = offset / pipeline.sample_rate   # the piece's words are timed from its own start
        for chunk in _speak_words(pipeline, said, workers, crossfade_s, on_chunk, aligner):
            yield Chunk(chunk.audio, [w.shifted(start) for w in chunk.words])
            offset += len(chunk.audio)


def _speak_words(pipeline, request: Request, workers: int, crossfade_s: float,
                 on_chunk: Callable[[int, int], None] | None, aligner: Aligner | None) -> Iterator[Chunk]:
    """One piece of plain speech with its words, times from the piece's start."""
    from ttscli.memory import release_memory_if_grown
    from ttscli.text import chunk_text

    reqs = chunk_requests(request, chunk_text(request.text, pipeline.max_chunk_chars))

    def gen(r: Request) -> Iterator[tuple[np.ndarray, list]]:
        if pipeline.word_durations:
            yield from pipeline.generate_words(r)
        else:
            audio = _joined([np.asarray(x, np.float32) for x in pipeline.generate(r)])
            yield audio, aligner(audio, pipeline.sample_rate, r.text, r.language)
        if on_chunk:
            on_chunk(next(k for k, q in enumerate(reqs) if q is r) + 1, len(reqs))
        pipeline.clear_cache()

    concurrent = workers > 1 and pipeline.concurrent_safe
    pieces = _run_workers(gen, reqs, workers) if concurrent else _run_sequential(gen, reqs)
    try:
        yield from _join_timed(pieces, int(round(crossfade_s * pipeline.sample_rate)), pipeline.sample_rate)
    finally:
        release_memory_if_grown()


def _join_timed(pieces, n_fade: int, sample_rate: int) -> Iterator[Chunk]:
    """:func:`ttscli.dsp.crossfade_join` of (chunk index, (audio, words)), the words moved to
    where their piece lands: a text chunk's first piece starts where the previous chunk's held
    tail does (they blend), a later piece after what its chunk already pushed."""
    join = Crossfade(n_fade)
    emitted, current = 0, -1
    for idx, (audio, words) in pieces:
        start = emitted if idx != current else emitted + len(join.held)
        current = idx
        out = join.push(idx, audio)
        emitted += sum(len(x) for x in out)
        yield Chunk(_joined(out), [w.shifted(start / sample_rate) for w in words])
    tail = join.finish()
    if tail:
        yield Chunk(_joined(tail))


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


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


def write_all(chunks: Iterator[np.ndarray], sink, before_close: Callable[[], None] | None = None) -> int:
    """Write audio chunks into a Sink; commits only when everything succeeded (and something was
    spoken), else aborts it. ``before_close`` (files that go with the audio) runs last before
    the commit; its failure aborts the audio too. Returns samples written."""
    from ttscli import signals

    n = 0
    try:
        for x in chunks:
            signals.check()   # a stop whose exception was lost on the way must still stop the run
            sink.write(x)
            n += len(x)
        if n and before_close is not None:
            before_close()
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


def render_words(pipeline, request: Request, sink, save: Callable[[list[Word]], None], workers: int = 1,
                 on_chunk=None) -> int:
    """:func:`render` with word timestamps: ``save(words)`` writes them (all of them, once the
    audio is complete) before the audio commits, so that both files are written or neither."""
    words: list[Word] = []

    def audio() -> Iterator[np.ndarray]:
        for chunk in synthesize_words(pipeline, request, workers=workers, on_chunk=on_chunk):
            words.extend(chunk.words)
            if len(chunk.audio):
                yield chunk.audio

    return write_all(audio(), sink, before_close=lambda: save(words))

"""Streaming text input: text deltas in (an LLM's tokens), audio out while later text still arrives.

:class:`SentenceBuffer` turns deltas into the sentences :func:`ttscli.text.split_sentences` would
find in the whole text, each as soon as it is certain to be complete; :func:`synthesize_stream`
speaks each one through the engine (:func:`ttscli.generate.synthesize`: pauses, normalization,
chunks) and joins them with the same crossfade the engine puts between text chunks, so the audio
is continuous across the joins.

    import ttscli
    pipe = ttscli.load("piper-joe")
    for audio in ttscli.synthesize_stream(pipe, llm_tokens(), ttscli.Request("")):
        ...  # float32 mono at pipe.sample_rate, the first sentence's while the LLM writes the next
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np

from ttscli.dsp import CROSSFADE_S, Crossfade
from ttscli.errors import InputTooLongError, UsageError
from ttscli.generate import Chunk, Request, synthesize, synthesize_words
from ttscli.text import MAX_TEXT_BYTES, check_text, split_sentences

if TYPE_CHECKING:
    from ttscli.words import Aligner

# clause punctuation followed by whitespace and more text: where a first clause may end
_CLAUSE_END = re.compile(r"[,;:，；：、]\s+(?=\S)")
_NEXT_LINE = "A"          # stands in for the next line's first word when testing a line end
EMPTY_STREAM = "the streamed text is empty; give some words to speak"
# the text a stream's other settings are checked with before its own text arrives
PROBE_TEXT = "Text."


@dataclass(frozen=True)
class StreamLimits:
    """Bounds on streamed text. ``max_sentence_bytes``: text not yet ending a sentence (a stream
    that never ends one must not fill memory); ``max_total_bytes``: the whole stream.
    ``first_clause_chars``: before any audio, a clause at least this long is spoken on its own,
    which brings the first audio forward by the rest of a long first sentence while keeping
    short clauses, which sound clipped alone, with their sentence."""

    max_sentence_bytes: int = MAX_TEXT_BYTES
    max_total_bytes: int = 1 << 20
    first_clause_chars: int = 30


class SentenceBuffer:
    """Text deltas in, complete sentences out, in order.

    A sentence is complete once non-space text or a line end follows its end: whether "3." ends
    a sentence depends on the next character ("3.14"), and whether '"Really?"' does on the next
    word ('she asked'), so deciding earlier could split where the whole text would not. Waiting
    for that lookahead costs one token; in exchange the sentences are the ones
    :func:`ttscli.text.split_sentences` finds in the whole text (a long first clause aside,
    :class:`StreamLimits`, and a line that ends after '"Really?"')."""

    def __init__(self, limits: StreamLimits = StreamLimits()):
        self.limits = limits
        self.pending = ""
        self.total = 0
        self.emitted = False

    def push(self, delta: str) -> list[str]:
        """Add a delta; return the sentences it completed."""
        self.total += len(delta.encode("utf-8", errors="surrogatepass"))
        if self.total > self.limits.max_total_bytes:
            raise InputTooLongError(f"the streamed text is over {self.limits.max_total_bytes:,} UTF-8 bytes, "
                                    "the limit for one stream")
        self.pending += delta
        out = self._complete()
        size = len(self.pending.encode("utf-8", errors="surrogatepass"))
        if size > self.limits.max_sentence_bytes:
            raise InputTooLongError(f"the streamed text has {size:,} UTF-8 bytes without a sentence end; "
                                    f"the limit is {self.limits.max_sentence_bytes:,} bytes")
        return out

    def flush(self) -> list[str]:
        """The end of the text (or a flush): what is pending, complete or not."""
        rest, self.pending = self.pending.strip(), ""
        self.emitted = self.emitted or bool(rest)
        return [rest] if rest else []

    def _complete(self) -> list[str]:
        line_end = self.pending.rstrip(" \t").endswith("\n")
        # a line end after a sentence end completes it, whatever the next line starts with: a
        # writer that ends lines (echo, a chat UI) has said that sentence in full
        sentences = split_sentences(self.pending + _NEXT_LINE if line_end else self.pending)
        if not sentences:
            return []
        done, last = sentences[:-1], sentences[-1]
        if line_end:
            last = last.removesuffix(_NEXT_LINE).rstrip()
        self.pending = self.pending[self.pending.rfind(last):] if last else ""
        if not done and not self.emitted:
            done = self._first_clause()
        self.emitted = self.emitted or bool(done)
        return done

    def _first_clause(self) -> list[str]:
        for m in _CLAUSE_END.finditer(self.pending):
            clause = self.pending[:m.end()].strip()
            if len(clause) >= self.limits.first_clause_chars:
                self.pending = self.pending[m.end():]
                return [clause]
        return []


def sentences(texts: Iterable[str], limits: StreamLimits = StreamLimits()) -> Iterator[str]:
    """The complete sentences of a stream of deltas (:class:`SentenceBuffer`), the rest at its end."""
    buffer = SentenceBuffer(limits)
    for delta in texts:
        yield from buffer.push(delta)
    yield from buffer.flush()


def synthesize_stream(pipeline, texts: Iterable[str], request: Request, crossfade_s: float = CROSSFADE_S,
                      limits: StreamLimits = StreamLimits()) -> Iterator[np.ndarray]:
    """Speak text that arrives in deltas: each sentence as soon as it is complete, float32 mono.

    ``request`` gives everything but the text (its ``text`` is not read); each sentence is
    spoken as :func:`ttscli.generate.synthesize` speaks a request of that text, and sentences
    are joined with the crossfade the engine puts between text chunks. ``texts`` is read only
    between sentences: a caller whose text must keep arriving meanwhile (a socket) buffers it."""
    for chunk in _stream(pipeline, texts, request, crossfade_s, limits, _speak_audio):
        if len(chunk.audio):
            yield chunk.audio


def synthesize_stream_words(pipeline, texts: Iterable[str], request: Request, crossfade_s: float = CROSSFADE_S,
                            limits: StreamLimits = StreamLimits(), aligner: Aligner | None = None) -> Iterator[Chunk]:
    """:func:`synthesize_stream` with word timestamps (:func:`ttscli.generate.synthesize_words`):
    the same audio in :class:`~ttscli.generate.Chunk` s, words timed from the start of the stream."""
    if not pipeline.word_durations and aligner is None:
        from ttscli.words import default_aligner

        aligner = default_aligner()   # once: each sentence's own default would load the recognizer again

    def speak(pipe, said: Request, fade: float) -> Iterator[Chunk]:
        return synthesize_words(pipe, said, crossfade_s=fade, aligner=aligner)

    yield from _stream(pipeline, texts, request, crossfade_s, limits, speak)


def _speak_audio(pipeline, said: Request, crossfade_s: float) -> Iterator[Chunk]:
    for audio in synthesize(pipeline, said, crossfade_s=crossfade_s):
        yield Chunk(audio)


class SentenceJoin:
    """Sentences' audio as one stream: a sentence's audio starts where the previous one's held
    tail does (they blend with the crossfade the engine puts between text chunks), and its words
    move there with it. Shared by :func:`synthesize_stream` and the server's WebSocket route, so
    both join sentences with the same arithmetic."""

    def __init__(self, sample_rate: int, crossfade_s: float = CROSSFADE_S):
        self.sample_rate = sample_rate
        self.fade = Crossfade(int(round(crossfade_s * sample_rate)))
        self.index = -1
        self.emitted = 0          # samples given out so far
        self.start = 0.0          # seconds into the stream where the current sentence starts

    def next_sentence(self) -> None:
        self.index += 1
        self.start = self.emitted / self.sample_rate

    def place(self, words: list) -> list:
        """Words timed from the current sentence's start, timed from the stream's start."""
        return [w.shifted(self.start) for w in words]

    def push(self, chunk: Chunk) -> Chunk:
        """The part of the current sentence's chunk that is final now, its words placed."""
        out = self.fade.push(self.index, chunk.audio)
        self.emitted += sum(len(x) for x in out)
        return Chunk(_joined(out), self.place(chunk.words))

    def finish(self) -> Chunk:
        """The held tail of the last sentence; the next sentence, if any, starts after it unblended."""
        tail = _joined(self.fade.finish())
        self.emitted += len(tail)
        self.fade = Crossfade(self.fade.n_fade)
        return Chunk(tail)


def sentence_request(request: Request, sentence: str, limits: StreamLimits = StreamLimits()) -> Request:
    """The request that speaks one streamed sentence: ``request`` with the sentence as its text."""
    return replace(request, text=check_text(sentence, "a streamed sentence", limits.max_sentence_bytes))


def _stream(pipeline, texts: Iterable[str], request: Request, crossfade_s: float, limits: StreamLimits,
            speak: Callable[..., Iterator[Chunk]]) -> Iterator[Chunk]:
    """Each sentence through ``speak``, joined (:class:`SentenceJoin`)."""
    if request.ssml:
        raise UsageError("streamed text cannot be SSML (a tag may span sentences); use [pause:S] markers")
    join = SentenceJoin(pipeline.sample_rate, crossfade_s)
    spoken = False
    for sentence in sentences(texts, limits):
        said = sentence_request(request, sentence, limits)
        join.next_sentence()
        for chunk in speak(pipeline, said, crossfade_s):
            yield join.push(chunk)
        spoken = True
    if not spoken:
        raise UsageError(EMPTY_STREAM)
    tail = join.finish()
    if len(tail.audio):
        yield tail


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def read_deltas(fd: int, what: str = "the streamed text", read_size: int = 65_536) -> Iterator[str]:
    """Text from a file descriptor as it arrives (a pipe gives what its writer wrote so far):
    each read's bytes decoded as UTF-8, a character split across reads kept for the next."""
    import codecs
    import os

    decoder = codecs.getincrementaldecoder("utf-8")()
    total = 0
    while True:
        data = os.read(fd, read_size)
        held = len(decoder.getstate()[0])          # bytes of a character the last read split
        try:
            text = decoder.decode(data, final=not data)
        except UnicodeDecodeError as e:
            raise UsageError(f"{what} is not valid UTF-8 (byte {total - held + e.start}); "
                             "convert it to UTF-8 first") from None
        total += len(data)
        if text:
            yield text
        if not data:
            return


def render_stream(pipeline, texts: Iterable[str], request: Request, sink,
                  save: Callable[[list], None] | None = None) -> int:
    """:func:`synthesize_stream` into a Sink, committed only when everything succeeded
    (:func:`ttscli.generate.write_all`); with ``save``, the words too (``save(words)`` runs before
    the audio commits). Returns samples written."""
    from ttscli.generate import write_all

    if save is None:
        return write_all(synthesize_stream(pipeline, texts, request), sink)
    words: list = []

    def audio() -> Iterator[np.ndarray]:
        for chunk in synthesize_stream_words(pipeline, texts, request):
            words.extend(chunk.words)
            if len(chunk.audio):
                yield chunk.audio

    return write_all(audio(), sink, before_close=lambda: save(words))

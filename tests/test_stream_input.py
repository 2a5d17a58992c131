"""Streaming text input (ttscli.stream_input): sentences out of deltas as soon as they are
complete, audio before the text ends, the same audio as speaking the sentences one by one, and
`ttscli speak --stream-input -` speaking while stdin is still open."""
from __future__ import annotations

import numpy as np
import pytest

from ttscli.dsp import crossfade_join
from ttscli.generate import Request, synthesize
from ttscli.models.base import Pipeline

TEXT = "Hello there, my friend. The price is 3.14 dollars today! Is that right? Yes."


class FakePipeline(Pipeline):
    """Deterministic audio per text (a function of its length), several pieces per chunk."""
    sample_rate = 1000
    max_chunk_chars = 40

    def generate(self, r: Request):
        rng = np.random.default_rng([len(r.text), r.seed or 0])
        for _ in range(3):
            yield rng.standard_normal(37).astype(np.float32)


def word_deltas(text: str) -> list[str]:
    """An LLM's tokens: each word with its leading space, punctuation as its own token."""
    import re

    return re.findall(r"\s*[\w']+|\s*[^\w\s]", text)


def test_sentences_are_the_whole_texts_and_each_waits_for_its_lookahead():
    from ttscli.stream_input import SentenceBuffer, StreamLimits, sentences
    from ttscli.text import split_sentences

    assert list(sentences(word_deltas(TEXT))) == split_sentences(TEXT)
    buf = SentenceBuffer(StreamLimits(first_clause_chars=1000))
    assert buf.push("It costs 3.") == []          # "3." may still become "3.14"
    assert buf.push("14 now.") == []
    assert buf.push(" Next") == ["It costs 3.14 now."]
    assert buf.flush() == ["Next"]


def test_a_long_first_clause_is_spoken_alone_and_later_ones_wait():
    from ttscli.stream_input import sentences

    text = "Well, after thinking about it for a while, I agree, mostly. Then, we go."
    assert list(sentences(word_deltas(text))) == [
        "Well, after thinking about it for a while,", "I agree, mostly.", "Then, we go."]


def test_limits_are_errors():
    from ttscli.errors import InputTooLongError
    from ttscli.stream_input import StreamLimits, sentences

    with pytest.raises(InputTooLongError, match="without a sentence end"):
        list(sentences(["word "] * 100, StreamLimits(max_sentence_bytes=200)))
    with pytest.raises(InputTooLongError, match="limit for one stream"):
        list(sentences(["Short one. "] * 100, StreamLimits(max_total_bytes=500)))


def test_first_audio_comes_before_the_text_ends_and_matches_sentence_by_sentence():
    import threading

    from ttscli.stream_input import synthesize_stream
    from ttscli.text import split_sentences

    pipe = FakePipeline()
    first_audio = threading.Event()
    seen_before_rest = []

    def slow_llm():
        first, rest = "Hello there, my friend.", TEXT[len("Hello there, my friend."):]
        yield from word_deltas(first)
        yield " The"                                # completes the first sentence
        seen_before_rest.append(first_audio.is_set())
        yield from word_deltas(rest.removeprefix(" The"))

    audio = []
    for x in synthesize_stream(pipe, slow_llm(), Request("", seed=3)):
        first_audio.set()
        audio.append(x)
    assert seen_before_rest == [True]
    n_fade = int(round(0.02 * pipe.sample_rate))
    expected = crossfade_join(((i, x) for i, s in enumerate(split_sentences(TEXT))
                               for x in synthesize(pipe, Request(s, seed=3))), n_fade)
    assert np.array_equal(np.concatenate(audio), np.concatenate(list(expected)))


def test_ssml_and_empty_streams_are_refused():
    from ttscli.errors import UsageError
    from ttscli.stream_input import synthesize_stream

    with pytest.raises(UsageError, match="cannot be SSML"):
        list(synthesize_stream(FakePipeline(), iter(["<speak>Hi.</speak>"]), Request("", ssml=True)))
    with pytest.raises(UsageError, match="empty"):
        list(synthesize_stream(FakePipeline(), iter(["  ", "\n"]), Request("")))

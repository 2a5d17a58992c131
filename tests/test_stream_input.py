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
    assert buf.push("A line that ends.\n") == ["A line that ends."]     # a line end is lookahead enough


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


def test_read_deltas_keeps_a_split_character_and_names_a_bad_byte():
    import os

    from ttscli.errors import UsageError
    from ttscli.stream_input import read_deltas

    r, w = os.pipe()
    os.write(w, b"caf\xc3")
    deltas = read_deltas(r)
    assert next(deltas) == "caf"
    os.write(w, b"\xa9 ok ")
    assert next(deltas) == "é ok "
    os.write(w, b"\xff")
    os.close(w)
    with pytest.raises(UsageError, match=r"not valid UTF-8 \(byte 9\)"):
        next(deltas)
    os.close(r)


def test_ssml_and_empty_streams_are_refused():
    from ttscli.errors import UsageError
    from ttscli.stream_input import synthesize_stream

    with pytest.raises(UsageError, match="cannot be SSML"):
        list(synthesize_stream(FakePipeline(), iter(["<speak>Hi.</speak>"]), Request("", ssml=True)))
    with pytest.raises(UsageError, match="empty"):
        list(synthesize_stream(FakePipeline(), iter(["  ", "\n"]), Request("")))


def test_stream_words_are_the_words_spoken_timed_from_the_stream_start():
    from ttscli import api
    from ttscli.generate import synthesize_words
    from ttscli.stream_input import synthesize_stream_words
    from ttscli.words import input_words

    pipe = api.load("piper-joe")
    first, second = "Hello there, my friend.", "It costs 12 dollars."
    chunks = list(synthesize_stream_words(pipe, word_deltas(f"{first} {second}"), Request("", seed=1)))
    words = [w for c in chunks for w in c.words]
    assert [w.word for w in words] == input_words(first) + ["It", "costs", "twelve", "dollars."]
    alone = [c for c in synthesize_words(pipe, Request(first, seed=1))]
    first_len = sum(len(c.audio) for c in alone) / pipe.sample_rate
    later = [w for w in words if w.word == "It"][0]
    # the second sentence starts where the first one's crossfaded tail does
    second_alone = [w for c in synthesize_words(pipe, Request(second, seed=1)) for w in c.words][0]
    assert later.start == pytest.approx(first_len - 0.02 + second_alone.start, abs=1e-6)


def test_cli_speaks_the_first_sentence_while_stdin_is_still_open(tmp_path):
    import subprocess
    import threading

    from clitools import ttscli_exe

    proc = subprocess.Popen(ttscli_exe() + ["speak", "--stream-input", "-", "-o", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    out = bytearray()
    audio_or_end = threading.Event()

    def read():
        for block in iter(lambda: proc.stdout.read1(65536), b""):
            out.extend(block)
            if len(out) > 44:
                audio_or_end.set()
        audio_or_end.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.stdin.write(b"Hello there, this is the first sentence.\n")
        proc.stdin.flush()
        audio_or_end.wait(timeout=120)
        assert len(out) > 44, f"no audio while stdin was still open: {proc.stderr.read1(4096) if proc.poll() else ''}"
        assert proc.poll() is None
        first = len(out)
        proc.stdin.write(b"And here is the second one, which comes later.\n")
        proc.stdin.close()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    reader.join(timeout=10)
    assert proc.returncode == 0, proc.stderr.read()
    assert out[:4] == b"RIFF" and len(out) > 2 * first

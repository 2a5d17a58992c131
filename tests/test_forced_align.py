"""pocketsphinx's forced alignment for the word timestamps of models without durations
(ttscli.forced_align): the spoken words it is told to find, the pronunciations it is given, and
where it places the words of real speech."""
from __future__ import annotations

import numpy as np
import pytest

from ttscli.forced_align import arpabet, is_english, spoken_words

TEXT = "The quick brown fox jumps over the lazy dog. Please call me tomorrow at 3:30."


def test_espeak_ipa_maps_onto_the_dictionary_phones():
    assert arpabet("həlˈoʊ") == "HH AH L OW"
    assert arpabet("bˈʌɾɚ") == "B AH T ER"                 # the flap is a T in the dictionary
    assert arpabet("tʃˈɜːtʃ") == "CH ER CH"
    assert arpabet("kˈɑːɹ") == "K AA R"
    assert arpabet("ˈˌː-") == ""


def test_spoken_words_trace_back_to_the_input_words():
    words = spoken_words("Pay $12.50 on 5/6/2024, well-known Dr. Smith.")
    assert words == [(0, "pay"), (1, "twelve"), (1, "dollars"), (1, "and"), (1, "fifty"), (1, "cents"),
                     (2, "on"), (3, "may"), (3, "sixth"), (3, "twenty"), (3, "twenty"), (3, "four"),
                     (4, "well"), (4, "known"), (5, "doctor"), (6, "smith")]


def test_english_by_language_or_by_script():
    assert is_english("hello", "en-us") and is_english("hello", None) and is_english("hello", "auto")
    assert not is_english("hello", "fr") and not is_english("こんにちは", None)


ps = pytest.importorskip("pocketsphinx")


@pytest.fixture(scope="module")
def piper_words():
    from ttscli import api
    from ttscli.generate import Request, synthesize_words

    pipe = api.load("piper-joe")
    chunks = list(synthesize_words(pipe, Request(text=TEXT, seed=1)))
    return np.concatenate([c.audio for c in chunks]), pipe.sample_rate, [w for c in chunks for w in c.words]


def test_the_aligner_places_real_speech_where_the_model_said_it(piper_words):
    """The embedded voice's own durations are the reference: every word found, in order, each
    edge within a few frames of the model's. The engine hands the aligner the words spoken
    ("3:30" already "three thirty"), as it does here."""
    from ttscli.forced_align import SphinxAligner

    audio, rate, ours = piper_words
    theirs = SphinxAligner()(audio, rate, " ".join(w.word for w in ours), None)
    assert [w.word for w in theirs] == [w.word for w in ours]
    assert all(w.source == "aligner" for w in theirs)
    assert all(0 <= w.start < w.end <= len(audio) / rate + 1e-6 for w in theirs)
    assert [w.start for w in theirs] == sorted(w.start for w in theirs)
    edges = np.array([abs(a.start - b.start) for a, b in zip(ours, theirs)] +
                     [abs(a.end - b.end) for a, b in zip(ours, theirs)])
    assert np.median(edges) <= 0.05


def test_a_word_outside_the_dictionary_is_read_by_espeak(piper_words):
    from ttscli.forced_align import SphinxAligner

    aligner = SphinxAligner()
    d = aligner.decoder()
    assert d.lookup_word("zyxwort") is None
    assert aligner.pronounce(d, "zyxwort") and d.lookup_word("zyxwort") == "Z IH K S W AO R T"


def test_other_languages_and_unfit_audio_go_to_the_fallback():
    from ttscli.forced_align import SphinxAligner

    calls = []

    def fallback(audio, rate, text, language):
        calls.append(language)
        return []

    aligner = SphinxAligner(fallback=fallback)
    assert aligner(np.zeros(16000, np.float32), 16000, "bonjour le monde", "fr") == [] and calls == ["fr"]
    # 50 ms cannot hold fifteen words' phones: the fallback gets it, or without one the words are spread
    short = np.zeros(800, np.float32)
    assert aligner(short, 16000, TEXT, "en") == [] and calls == ["fr", "en"]
    spread = SphinxAligner()(short, 16000, TEXT, "en")
    assert len(spread) == 15 and {w.source for w in spread} == {"interpolated"}


def test_the_default_aligner_is_pocketsphinx_for_english():
    from ttscli.forced_align import SphinxAligner
    from ttscli.words import default_aligner

    assert isinstance(default_aligner(), SphinxAligner)

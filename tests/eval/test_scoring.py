"""WER/CER after Whisper's normaliser, with jiwer's edit counts."""
import pytest

pytest.importorskip("jiwer")
pytest.importorskip("whisper_normalizer")

from ttscli.eval.scoring import Errors, errors, normalize


def test_english_normaliser_spells_as_whisper_does():
    assert normalize("Dr. Smith paid $20 on Monday!", "en") == "doctor smith paid $20 on monday"
    # the rules that make "3" and "three" the same word, and "colour" / "color"
    assert normalize("three books", "en") == normalize("3 books", "en")
    assert normalize("The colour grey.", "en") == normalize("the color gray", "en")


def test_counts_and_rates():
    e = errors("The quick brown fox jumps over the lazy dog.", "the quick brown fox jumped over a lazy dog", "en")
    assert (e.word_errors, e.words) == (2, 9)
    assert e.wer == pytest.approx(2 / 9)
    assert 0 < e.cer < e.wer


def test_empty_transcript_is_all_deletions_and_totals_add_counts():
    e = errors("hello there", "", "en")
    assert e.wer == 1.0 and e.cer == 1.0
    total = e + errors("good morning to you", "good morning to you", "en")
    assert total == Errors(2, 6, e.char_errors, e.chars + len("good morning to you"))
    assert total.wer == pytest.approx(2 / 6)


def test_other_languages_use_the_basic_normaliser():
    assert normalize("¿Qué tal, amigo?", "es") == "qué tal amigo"
    # the basic rules turn punctuation into spaces: "geht's" is two words, "gehts" one
    e = errors("Guten Tag, wie geht's?", "guten tag wie gehts", "de")
    assert (e.word_errors, e.words, e.char_errors) == (2, 5, 1)

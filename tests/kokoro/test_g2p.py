"""The text front end: misaki 0.9.4's lexicon readings without its spaCy tagger (the readings of
../shared/research/kokoro.md §8), with the function words read by what follows them as misaki's
``Lexicon.get_special_case`` reads them (misaki/en.py)."""
import pytest

from ttscli.errors import UsageError
from ttscli.models.kokoro import g2p
from ttscli.models.kokoro.pipeline import split_phonemes, tokens_of

pytest.importorskip("misaki", reason="pip install 'ttscli[kokoro]'")


@pytest.mark.parametrize("text, want", [
    ("The quick brown fox jumps over the lazy dog.", "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˈOvəɹ ðə lˈAzi dˈɔɡ."),
    ("Hello, my name is Sarah, and I will read the news today.",
     "həlˈO, mI nˈAm ɪz sˈɛɹə, ænd ˌI wɪl ɹˈid ðə nˈuz tədˈA."),
])
def test_english_matches_misaki(text, want):
    assert g2p.english(text) == want


@pytest.mark.parametrize("text, want", [
    # "the": ði only before a vowel sound; ðə before a consonant and before a pause mark
    ("The apple and the pear.", "ði ˈæpᵊl ænd ðə pˈɛɹ."),
    ("Take the.", "tˈAk ðə."),
    # "to": tʊ before a vowel, tə before a consonant, the lexicon's reading before a pause
    ("I want to eat, to go.", "ˌI wˈɑnt tʊ ˈit, tə ɡˌO."),
    # "a" and "an" as determiners; "in" stressed only before a pause
    ("A cat in an inn, come in.", "ɐ kˈæt ɪn ɐn ˈɪn, kˈʌm ˈɪn."),
    # a quote mark does not end the context, a dash does
    ('The "egg" and the — egg.', 'ði " ˈɛɡ " ænd ðə — ˈɛɡ.'),
])
def test_function_words_read_by_what_follows(text, want):
    assert g2p.english(text) == want


def test_english_numbers_suffixes_and_espeak_fallback():
    ps = g2p.english("Zorblax owns 3 dogs.")
    words = ps.rstrip(".").split(" ")
    assert words[1] == "ˈOnz" and words[2] == "θɹˈi" and words[3] == "dˈɔɡz"
    assert words[0] and all(c not in words[0] for c in "^ːɚ")        # espeak's IPA mapped to misaki letters


def test_japanese():
    pytest.importorskip("pyopenjtalk", reason="pip install 'ttscli[ja]'")
    assert g2p.japanese("こんにちは、今日はいい天気ですね。") == "koɲɲiʨiβa, kʲoː βa ii teŋkʲi desɨ ne."


def test_language_names():
    assert g2p.language_of(None) == "en" and g2p.language_of("en-us") == "en" and g2p.language_of("JA") == "ja"
    with pytest.raises(UsageError, match="speaks en, ja"):
        g2p.language_of("fr")


def test_split_phonemes_cuts_at_marks_within_the_limit():
    ps = ("ab cd. " * 40 + "ef, gh " * 40).strip()
    pieces = split_phonemes(ps, 100)
    assert all(len(p) <= 100 for p in pieces)
    assert "".join(pieces).replace(" ", "") == ps.replace(" ", "")
    assert pieces[0].endswith(".")
    assert split_phonemes("x" * 250, 100) == ["x" * 100, "x" * 100, "x" * 50]


def test_tokens_drop_unknown_symbols():
    vocab = {"a": 43, "b": 44, " ": 16}
    assert tokens_of("a b#", vocab) == [0, 43, 16, 44, 0]

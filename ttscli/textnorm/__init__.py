"""Text normalization before G2P: written forms (numbers, money, dates, ...) to the words a
reader says, per language, with a map from every rewritten span back to the input.

A language's normalizer is a function ``text -> Normalized``; :data:`NORMALIZERS` holds them by
base language code ("en"), and :func:`normalize` picks one from a request's language name
("en-us", "english", ...). A language without a normalizer passes text through unchanged, so a
family never has to know which languages are covered. The map (:meth:`Normalized.to_source`)
lets word timings made on the spoken words be reported against the words the user wrote.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping


@dataclass(frozen=True)
class Edit:
    """One rewrite: input characters [source_start, source_end) became output [target_start, target_end)."""

    source_start: int
    source_end: int
    target_start: int
    target_end: int


@dataclass(frozen=True)
class Normalized:
    """Normalized text, the input it came from and the rewrites between them (in text order)."""

    source: str
    text: str
    edits: tuple[Edit, ...] = ()

    def to_source(self, start: int, end: int) -> tuple[int, int]:
        """The input span an output span [start, end) was made from: text outside every rewrite
        maps one to one, a span touching a rewrite widens to all of that rewrite's input (the
        words of "twelve dollars and fifty cents" all map to "$12.50")."""
        return self._map(start, is_end=False), self._map(end, is_end=True)

    def _map(self, pos: int, is_end: bool) -> int:
        shift = 0
        for e in self.edits:
            if pos < e.target_start or (is_end and pos == e.target_start):
                break
            if pos < e.target_end or (is_end and pos == e.target_end):
                return e.source_end if is_end else e.source_start
            shift = e.target_end - e.source_end
        return pos - shift


Rule = Callable[["re.Match[str]"], str]


def rewrite(text: str, pattern: re.Pattern[str], rules: Mapping[str, Rule]) -> Normalized:
    """Replace every match of ``pattern`` by the rule named after the group that matched
    (``match.lastgroup``: one named group per alternative, the earlier alternative winning),
    recording each replacement that changed the text."""
    out: list[str] = []
    edits: list[Edit] = []
    pos = size = 0
    for m in pattern.finditer(text):
        new = rules[m.lastgroup](m)
        if new == m.group(0):
            continue
        plain = text[pos:m.start()]
        out.append(plain)
        size += len(plain)
        out.append(new)
        edits.append(Edit(m.start(), m.end(), size, size + len(new)))
        size += len(new)
        pos = m.end()
    out.append(text[pos:])
    return Normalized(text, "".join(out), tuple(edits))


def identity(text: str) -> Normalized:
    return Normalized(text, text)


def _english(text: str) -> Normalized:
    from ttscli.textnorm.english import normalize as english

    return english(text)


def _english_say_as(kind: str, text: str, detail: str | None) -> str:
    from ttscli.textnorm.english import say_as

    return say_as(kind, text, detail)


# base language code -> normalizer; a language not here is spoken as written
NORMALIZERS: dict[str, Callable[[str], Normalized]] = {"en": _english}
# base language code -> SSML <say-as> reader (interpret-as, text, format) -> words
SAY_AS: dict[str, Callable[[str, str, str | None], str]] = {"en": _english_say_as}

_NAMES = {"english": "en", "american english": "en", "british english": "en", "japanese": "ja",
          "chinese": "zh", "mandarin": "zh", "german": "de", "french": "fr", "spanish": "es", "italian": "it",
          "portuguese": "pt", "korean": "ko", "russian": "ru"}


def base_language(name: str | None) -> str | None:
    """ "en-US", "en_gb", "English" -> "en"; None or "auto" -> None (not known)."""
    if name is None:
        return None
    key = name.strip().lower().replace("_", "-")
    if key in ("", "auto"):
        return None
    return _NAMES.get(key, key.split("-")[0])


def text_language(language: str | None, model_languages: Iterable[str], text: str) -> str | None:
    """The language to normalize ``text`` as: the request's, else the model's only language,
    else English when the model speaks English and the text is plain ASCII (a text in another
    language with digits is left alone rather than read with English number words)."""
    asked = base_language(language)
    if asked is not None:
        return asked
    known = {b for b in (base_language(x) for x in model_languages) if b is not None}
    if len(known) == 1:
        return known.pop()
    if (not known or "en" in known) and text.isascii():
        return "en"
    return None


def normalize(text: str, language: str | None) -> Normalized:
    """``text`` normalized for ``language`` (a base code or any name :func:`base_language` reads)."""
    return NORMALIZERS.get(base_language(language) or "", identity)(text)


def say_as(kind: str, text: str, detail: str | None, language: str | None) -> str:
    """SSML ``<say-as interpret-as=kind format=detail>text</say-as>`` as words in ``language``."""
    from ttscli.errors import UsageError

    reader = SAY_AS.get(base_language(language) or "")
    if reader is None:
        raise UsageError(f"SSML <say-as> reads English only (the text's language is {language or 'unknown'}); "
                         "give --language en, or write the words out")
    return reader(kind, text, detail)

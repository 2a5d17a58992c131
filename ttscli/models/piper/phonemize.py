"""Text -> Piper phoneme ids, the way piper-tts 1.8 does it, on espeak-ng from ``espeakng-loader``.

piper-tts runs espeak-ng clause by clause and needs each clause's terminator (``.`` ``,`` ``?``
``!`` ``:`` ``;``) and whether it ends a sentence. Its bundled espeak-ng has an extra entry
point for that (``espeak_TextToPhonemesWithTerminator``); the stock 1.52 library in
``espeakng-loader`` only has ``espeak_TextToPhonemes``. That one does tell us where each clause
ended (it advances the text pointer), so the terminator is recovered from the clause's own
text with espeak's ReadClause rules (punctuation classes, "..." -> ellipsis, runs of ``?!``,
blank lines as paragraphs, end of text).

Then, as piper: language-switch flags like ``(fr)`` are dropped, the terminator is appended
(plus a space after ``,`` ``:`` ``;``), the string is split into NFD code points, and each
sentence becomes ``^ _ p1 _ p2 _ ... _ $`` through the voice's phoneme_id_map, phonemes
missing from the map skipped. ``[[ raw phonemes ]]`` blocks are passed through as piper does.
"""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Mapping, Sequence

from ttscli.espeak import PHONEMES_IPA, Espeak, separator_mode

_SEP = "\x01"
_SEP_MODE = separator_mode(_SEP)

PAD, BOS, EOS = "_", "^", "$"

# espeak clause classes of the punctuation English text meets (ucd-tools' ESPEAKNG_PROPERTY_*).
# value: (piper terminator or "", ends sentence); None marks ellipsis.
_PERIOD, _QUESTION, _EXCLAIM = (".", True), ("?", True), ("!", True)
_COMMA, _COLON, _SEMI = (",", False), (":", False), (";", False)
_PUNCT: dict[str, tuple[str, bool] | None] = {
    ".": _PERIOD, "?": _QUESTION, "!": _EXCLAIM, ",": _COMMA, ":": _COLON, ";": _SEMI,
    "\u2013": _SEMI, "\u2014": _SEMI, "\u2e3a": _SEMI, "\u2e3b": _SEMI,         # dashes
    "\u037e": _QUESTION, "\u0387": _SEMI, "\u061f": _QUESTION, "\u06d4": _PERIOD,
    "\u060c": _COMMA, "\u061b": _SEMI, "\u203c": _EXCLAIM, "\u2047": _QUESTION, "\u204f": _SEMI,
    "\ufe50": _COMMA, "\ufe51": _COMMA, "\ufe52": _PERIOD, "\ufe54": _SEMI, "\ufe55": _COLON,
    "\ufe56": _QUESTION, "\ufe57": _EXCLAIM, "\uff61": _PERIOD, "\uff64": _COMMA,
    "\ufe10": _COMMA, "\ufe11": _COMMA, "\ufe12": _PERIOD, "\ufe13": _COLON, "\ufe14": _SEMI,
    "\ufe15": _EXCLAIM, "\ufe16": _QUESTION,
    "\u2026": None, "\ufe19": None,                                                # ellipsis
}
# "optional space after" marks: the flag survives piper's mask, so no terminator text
_OPTIONAL_SPACE: dict[str, bool] = {
    "\u3002": True, "\uff0e": True, "\uff01": True, "\uff1f": True, "\u0589": True, "\u0964": True,
    "\u3001": False, "\uff0c": False, "\uff1a": False, "\uff1b": False, "\u00a1": False, "\u00bf": False,
}
_BRACKETS = set("()[]{}<>\"'`\u00ab\u00bb\u2329\u232a") | {chr(c) for c in range(0x2018, 0x2020)}
_LANG_FLAG = re.compile(r"\([^)]+\)")
_RAW_BLOCK = re.compile(r"(\[\[.*?\]\])")


def _is_punct(ch: str) -> bool:
    return ch in _PUNCT or ch in _OPTIONAL_SPACE


def classify_clause(text: str, at_eof: bool) -> tuple[str, bool]:
    """(terminator, end_of_sentence) of a clause espeak ended right after ``text``."""
    body = text.rstrip()
    newlines = text[len(body):].count("\n")
    if at_eof:
        body = body.rstrip("".join(_BRACKETS) + " \t\r\n")
    has_alnum = any(ch.isalnum() for ch in body)
    if newlines >= 2:
        return "", True                      # blank line: paragraph (also after punctuation)
    end = len(body)
    start = end
    while start > 0 and (_is_punct(body[start - 1])):
        start -= 1
    run = body[start:end]
    if not run or not has_alnum:
        return ("", True) if at_eof or newlines >= 2 else ("", False)
    if run.endswith("..."):
        ch = "\u2026"
    elif run[0] in "?!\u203c\u2047\uff01\uff1f\ufe56\ufe57" and _PUNCT.get(run[0], 1) is not None:
        ch = run[0]                          # "?!", "!!?" ...: the first one decides
    else:
        ch = run[-1]
    if ch in _OPTIONAL_SPACE:
        return "", _OPTIONAL_SPACE[ch]
    kind = _PUNCT[ch]
    if kind is None:
        return "", False                     # ellipsis: semicolon-like, flagged
    return kind


def espeak_clauses(text: str, voice: str) -> list[tuple[str, str, bool]]:
    """(phonemes, terminator, end_of_sentence) per clause, like piper's espeakbridge."""
    ipa, names = Espeak.get().passes(text, voice, (PHONEMES_IPA | _SEP_MODE, _SEP_MODE))
    out = []
    for (ph, clause_text, at_eof), (nm, _, _) in zip(ipa, names):
        term, eos = classify_clause(clause_text, at_eof)
        out.append((_as_piper_espeak(ph, nm), term, eos))
    return out


def _as_piper_espeak(ipa: str, names: str) -> str:
    """Join one clause's IPA slots, reproducing piper-tts 1.8's bundled espeak-ng.

    That build (1.52.0.1, a 2025 master) skips every ``prevPh`` condition when it writes IPA
    text (espeak-ng #2082, fixed upstream in #2457). Two base-table phonemes print differently
    because of it: the linking-j ``;`` (hidden after an i-vowel by ``IF prevPh(#i) THEN ipa
    NULL``) prints ``ʲ``, and the flap ``*`` after ``@-`` prints ``ɾ`` instead of ``r``. Both
    passes ran with a phoneme separator, so IPA slots line up with espeak phoneme names.
    """
    words = []
    for w_ipa, w_names in zip(ipa.split(" "), names.split(" ")):
        slots, slot_names = w_ipa.split(_SEP), w_names.split(_SEP)
        if len(slots) != len(slot_names):           # never seen; keep espeak's text as is
            words.append(w_ipa.replace(_SEP, ""))
            continue
        for i, name in enumerate(slot_names):
            if name == ";" and slots[i] == "":
                slots[i] = "\u02b2"
            elif name.endswith("*") and slots[i].endswith("r") and i > 0 and slot_names[i - 1].endswith("@-"):
                slots[i] = slots[i][:-1] + "\u027e"
        words.append("".join(slots))
    return " ".join(words)


def check_espeak_voice(espeak_voice: str, voice_name: str) -> None:
    """Refuse, before any text, a voice whose language espeak-ng here cannot phonemize (rather
    than reading its text with another language's rules)."""
    from ttscli.errors import UsageError

    try:
        Espeak.get().passes("", espeak_voice, ())
    except UsageError:
        raise UsageError(f"{voice_name}: cannot phonemize its language here: espeak-ng has no voice "
                         f"{espeak_voice!r}") from None


def phonemize(text: str, voice: str = "en-us") -> list[list[str]]:
    """Text -> phonemes (NFD code points, punctuation kept) grouped by sentence."""
    sentences: list[list[str]] = []
    prev_raw = False
    parts = _RAW_BLOCK.split(text)
    for i, part in enumerate(parts):
        if part.startswith("[["):
            prev_raw = True
            if not sentences:
                sentences.append([])
            if i > 0 and parts[i - 1].endswith(" "):
                sentences[-1].append(" ")
            sentences[-1].extend(part[2:-2].strip())
            if i < len(parts) - 1 and parts[i + 1].startswith(" "):
                sentences[-1].append(" ")
            continue
        part_sentences: list[list[str]] = []
        current: list[str] = []
        for phonemes, term, eos in espeak_clauses(part, voice):
            phonemes = _LANG_FLAG.sub("", phonemes) + term
            if term in (",", ":", ";"):
                phonemes += " "
            current.extend(unicodedata.normalize("NFD", phonemes))
            if eos:
                part_sentences.append(current)
                current = []
        if current:
            part_sentences.append(current)
        if prev_raw and part_sentences:
            sentences[-1].extend(part_sentences[0])
            part_sentences = part_sentences[1:]
        sentences.extend(part_sentences)
        prev_raw = False
    if sentences and not sentences[-1]:
        sentences.pop()
    return sentences


def phoneme_ids(phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]]) -> list[int]:
    """``^ _ p1 _ p2 _ ... _ $``; phonemes the voice does not know are skipped (as piper)."""
    ids = list(id_map[BOS]) + list(id_map[PAD])
    for p in phonemes:
        if p in id_map:
            ids.extend(id_map[p])
            ids.extend(id_map[PAD])
    ids.extend(id_map[EOS])
    return ids


def text_to_ids(text: str, id_map: Mapping[str, Sequence[int]], voice: str = "en-us") -> list[list[int]]:
    """One id list per sentence, empty sentences dropped (piper skips them too)."""
    return [phoneme_ids(s, id_map) for s in phonemize(text, voice) if s]


def default_id_map(voice_json: Path) -> dict[str, list[int]]:
    import json
    return json.loads(Path(voice_json).read_text(encoding="utf-8"))["phoneme_id_map"]

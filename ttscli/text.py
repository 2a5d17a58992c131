"""Input text: reading, limits, normalisation and sentence chunking."""
from __future__ import annotations

import re
import unicodedata
from typing import BinaryIO, Mapping

from ttscli.errors import InputTooLongError, UsageError

MAX_TEXT_BYTES = 32_768

# Lower-case abbreviations after which a full stop does not end a sentence.
ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt vs etc e.g i.e a.m p.m no nos fig figs approx dept est inc ltd co corp
    jan feb mar apr jun jul aug sep sept oct nov dec u.s u.k ph.d gen col lt sgt capt rev hon""".split()
)
_CLOSERS = "\"'”’»)]」』）】"
_CJK_END = "。！？｡"
_SENT_END = re.compile(r"([.!?…]+|[。！？｡]+)")


def decode_text(data: bytes, what: str = "text") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} is not valid UTF-8 (byte {e.start}); convert it to UTF-8 first") from None


def read_bounded(stream: BinaryIO, what: str = "text", max_bytes: int = MAX_TEXT_BYTES,
                 size: int | None = None) -> bytes:
    """At most `max_bytes` from a binary stream: `yes |` or /dev/zero must not fill memory.

    Reads one byte past the limit to tell "at the limit" from "over it"; `size` (a regular
    file's st_size) makes the message exact where it is known."""
    data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        n = f"{size:,}" if size is not None and size > max_bytes else f"at least {max_bytes + 1:,}"
        raise InputTooLongError(f"{what} is {n} UTF-8 bytes; the limit is {max_bytes:,} bytes")
    return data


# C0/C1 control characters other than the whitespace ones (tab, line ends, form feed, ...):
# espeak-ng reads C strings, so text after a NUL would be dropped in silence.
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


def check_text(text: str, what: str = "text", max_bytes: int = MAX_TEXT_BYTES) -> str:
    """Validate user text; returns it normalised (NFC, unified line ends)."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise InputTooLongError(f"{what} is {size:,} UTF-8 bytes; the limit is {max_bytes:,} bytes")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} is not valid UTF-8 (lone surrogate); convert it to UTF-8 first") from None
    bad = _CONTROL.search(text)
    if bad:
        raise UsageError(
            f"{what} contains the control character U+{ord(bad.group()):04X} at character {bad.start() + 1:,}; "
            "remove it (only printable text and whitespace can be spoken)"
        )
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    if not text.strip():
        raise UsageError(f"{what} is empty; give some words to speak")
    return text


def _ends_sentence(text: str, mark_end: int, end: int, mark: str) -> bool:
    """Whether the punctuation run `mark` (ending at mark_end, closers up to end) closes a sentence."""
    if mark[0] in _CJK_END:
        return True
    nxt = text[end:end + 1]
    if nxt and not nxt.isspace():
        return False  # 3.14, e.g., example.com
    following = text[end:].lstrip()[:1]
    if following and following.islower():
        return False  # '"Really?" she asked.'
    if mark == ".":
        m = re.search(r"([\w.]+)\.$", text[:mark_end])
        word = m.group(1) if m else ""
        if word.lower() in ABBREVIATIONS:
            return False
        if len(word) == 1 and word.isupper() and end == mark_end:  # initials: J. R. R. Tolkien
            return False
    return True


def split_sentences(text: str) -> list[str]:
    """Split text into sentences, keeping closing quotes with their sentence."""
    out, start, i = [], 0, 0
    for m in _SENT_END.finditer(text):
        if m.start() < i:
            continue
        end = m.end()
        while end < len(text) and text[end] in _CLOSERS:
            end += 1
        if _ends_sentence(text, m.end(), end, m.group(1)):
            piece = text[start:end].strip()
            if piece:
                out.append(piece)
            start = end
        i = end
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    # paragraphs always break
    return [p.strip() for s in out for p in re.split(r"\n\s*\n", s) if p.strip()]


def _split_long(sentence: str, budget: int) -> list[str]:
    """A sentence over budget: break at clause punctuation, then at spaces, then hard."""
    parts: list[str] = []
    for clause in re.split(r"(?<=[,;:，；：、])\s*", sentence):
        while len(clause) > budget:
            cut = clause.rfind(" ", 0, budget)
            cut = cut if cut > budget // 2 else budget
            parts.append(clause[:cut].strip())
            clause = clause[cut:].strip()
        if clause:
            parts.append(clause)
    return _pack(parts, budget, sep=" ")


def _pack(pieces: list[str], budget: int, sep: str = " ") -> list[str]:
    chunks: list[str] = []
    for p in pieces:
        if chunks and len(chunks[-1]) + len(sep) + len(p) <= budget:
            chunks[-1] = chunks[-1] + sep + p
        else:
            chunks.append(p)
    return chunks


def chunk_text(text: str, budget: int) -> list[str]:
    """Sentence chunks of at most `budget` characters (sentences packed together while they fit)."""
    if budget <= 0:
        raise ValueError("budget must be positive")
    pieces: list[str] = []
    for s in split_sentences(text):
        pieces.extend([s] if len(s) <= budget else _split_long(s, budget))
    return _pack(pieces, budget)


class ByteTokenizer:
    """Stand-in text tokenizer for random weights, which ship no tokenizer file: the named
    special tokens (and role words) whole, all other text as its UTF-8 bytes, each plus
    ``byte_offset``, after the ``bos`` ids. Bytes give a prompt the length a real tokenizer's
    would have within a small factor, which is what timing needs."""

    def __init__(self, specials: Mapping[str, int], bos: tuple[int, ...] = (), byte_offset: int = 0):
        self.specials = dict(specials)
        self.bos = tuple(bos)
        self.byte_offset = byte_offset
        names = sorted(self.specials, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, names)) + ")") if names else None

    def encode(self, text: str) -> list[int]:
        out = list(self.bos)
        for part in self._split.split(text) if self._split else [text]:
            if part in self.specials:
                out.append(self.specials[part])
            else:
                out.extend(self.byte_offset + b for b in part.encode())
        return out

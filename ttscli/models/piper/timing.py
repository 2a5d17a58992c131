"""Word timestamps of a Piper chunk from the VITS duration predictor (both backends).

A sentence is spoken as ``^ _ p1 _ p2 _ ... _ $`` (:func:`.phonemize.phoneme_ids`) and the
predictor gives frames per id; a phoneme lasts from its first id to its last, the pads between
phonemes are the transitions. The input words are found in the sentences' phonemes by
:func:`ttscli.words.timed_segments`, each word phonemized alone by the same espeak-ng front end.
Light (numpy only): the onnxruntime backend uses it without MLX.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from ttscli.words import frame_spans, input_words, timed_segments

from .phonemize import BOS, PAD, phonemize


def phoneme_spans(phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]], frames: Sequence[int],
                  seconds_per_frame: float) -> list[tuple[float, float] | None]:
    """(start, end) in seconds of each phoneme of a sentence, from the frames of its ids
    (None: a phoneme the voice has no id for, which piper skips)."""
    spans = frame_spans(frames, seconds_per_frame)
    k = len(id_map[BOS]) + len(id_map[PAD])
    out: list[tuple[float, float] | None] = []
    for p in phonemes:
        if p not in id_map:
            out.append(None)
            continue
        n = len(id_map[p])
        out.append((spans[k][0], spans[k + n - 1][1]))
        k += n + len(id_map[PAD])
    return out


class SentenceWords:
    """The words of one text chunk, sentence by sentence: ``place(k, frames, seconds)`` gives
    sentence k's words from its ids' frames and its audio's length (times from its start)."""

    def __init__(self, text: str, sentences: list[list[str]], id_map: Mapping[str, Sequence[int]], voice: str):
        self.sentences, self.id_map = sentences, id_map
        words = input_words(text)
        alone = ["".join("".join(s) for s in phonemize(w, voice)) for w in words]
        bounds, a = [], 0
        for s in sentences:
            bounds.append((a, a + len(s)))
            a += len(s)
        self._place = timed_segments(words, alone, "".join("".join(s) for s in sentences), bounds)

    def place(self, k: int, frames: Sequence[int], seconds: float):
        """The decoder makes the same samples for every frame (its hop), read here from the audio."""
        total = sum(int(f) for f in frames)
        spans = phoneme_spans(self.sentences[k], self.id_map, frames, seconds / total if total else 0.0)
        return self._place(k, spans, seconds)

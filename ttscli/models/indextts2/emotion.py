"""IndexTTS2's emotion controls that are not a reference clip: the eight-weight emotion vector
and its blend with the speaker's own emotion embedding (upstream ``infer_generator``).

``feat2.pt`` holds 73 emotion embeddings (the GPT's width) recorded from several speakers, and
``feat1.pt`` those speakers' CAMPPlus styles, grouped by emotion (``emo_num`` rows each, in the
order of :data:`EMOTIONS`). For each emotion the row whose speaker sounds most like the reference
(cosine of the styles) is taken, so an emotion is borrowed from the closest voice; the vector then
mixes ``Σ w_i row_i + (1 - Σ w_i) emovec_speaker``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttscli.errors import CheckpointError, UsageError
from ttscli.models.indextts2.config import EMOTIONS

MAX_WEIGHT = 1.2        # upstream clamps the text classifier's scores to [0, 1.2]


def parse_vector(text: str) -> list[float]:
    """``happy=0.8,calm=0.2`` (names from :data:`EMOTIONS`, the rest 0) or eight numbers in that
    order; each weight in [0, 1.2]. A bad entry is one UsageError naming it."""
    text = text.strip()
    if not text:
        raise UsageError("--emotion is empty: give NAME=WEIGHT pairs (" + ", ".join(EMOTIONS) + ") or 8 numbers")
    parts = [p.strip() for p in re.split(r"[,;]", text) if p.strip()]
    weights = [0.0] * len(EMOTIONS)
    if all("=" not in p and ":" not in p for p in parts):
        if len(parts) != len(EMOTIONS):
            raise UsageError(f"--emotion: {len(parts)} numbers given, 8 expected ({', '.join(EMOTIONS)}), "
                             "or NAME=WEIGHT pairs")
        pairs = list(zip(EMOTIONS, parts))
    else:
        pairs = []
        for p in parts:
            name, sep, value = p.replace(":", "=").partition("=")
            if not sep:
                raise UsageError(f"--emotion: {p!r} is not NAME=WEIGHT")
            pairs.append((name.strip().lower(), value))
    for name, value in pairs:
        if name not in EMOTIONS:
            raise UsageError(f"--emotion: unknown emotion {name!r} (one of {', '.join(EMOTIONS)})")
        try:
            w = float(value)
        except ValueError:
            raise UsageError(f"--emotion: {name}={value.strip()!r} is not a number") from None
        if not (math.isfinite(w) and 0.0 <= w <= MAX_WEIGHT):
            raise UsageError(f"--emotion: {name}={w:g} is outside [0, {MAX_WEIGHT:g}]")
        weights[EMOTIONS.index(name)] = w
    return weights


def scale_vector(weights: list[float], alpha: float) -> list[float]:
    """Upstream's ``emo_alpha`` on a vector: clamped to [0, 1]; below 1 every weight is scaled and
    truncated to 4 decimals."""
    a = max(0.0, min(1.0, alpha))
    if a == 1.0:
        return list(weights)
    return [int(w * a * 10000) / 10000 for w in weights]


@dataclass
class EmotionMatrices:
    """``feat2.pt`` (emotion rows) and ``feat1.pt`` (their speakers' styles), split per emotion."""
    emo: list[np.ndarray]       # per emotion [n_i, width]
    spk: list[np.ndarray]       # per emotion [n_i, 192]

    @classmethod
    def load(cls, folder: Path, emo_file: str, spk_file: str, emo_num: tuple[int, ...]) -> "EmotionMatrices":
        from ttscli import torchfile

        mats = []
        for name in (emo_file, spk_file):
            path = Path(folder) / name
            if not path.is_file():
                raise CheckpointError(f"{folder}: no {name} (IndexTTS2's emotion matrices feat1.pt / feat2.pt)")
            m = torchfile.load(path)
            if not isinstance(m, np.ndarray) or m.ndim != 2:
                raise CheckpointError(f"{path}: expected one 2-D tensor")
            if m.shape[0] != sum(emo_num):
                raise CheckpointError(f"{path}: {m.shape[0]} rows, config.yaml's emo_num adds up to {sum(emo_num)}")
            mats.append(m.astype(np.float32))
        return cls.split(mats[0], mats[1], emo_num)

    @classmethod
    def split(cls, emo: np.ndarray, spk: np.ndarray, emo_num: tuple[int, ...]) -> "EmotionMatrices":
        cuts = np.cumsum(emo_num)[:-1]
        return cls(np.split(emo, cuts), np.split(spk, cuts))

    def rows(self, style: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """One row per emotion ``[8, width]``: the speaker whose style is closest (cosine) to
        ``style``, or a random one with ``rng`` (upstream ``use_random``)."""
        out = []
        s = np.asarray(style, np.float32).reshape(-1)
        for emo, spk in zip(self.emo, self.spk):
            if rng is not None:
                i = int(rng.integers(0, len(emo)))
            else:
                den = np.maximum(np.linalg.norm(spk, axis=1) * np.linalg.norm(s), 1e-8)
                i = int(np.argmax(spk @ s / den))
            out.append(emo[i])
        return np.stack(out)


def blend(emovec: np.ndarray, weights: list[float], rows: np.ndarray) -> np.ndarray:
    """``Σ w_i row_i + (1 - Σ w_i) emovec`` (the speaker's own emotion embedding)."""
    w = np.asarray(weights, np.float32)
    return (w[:, None] * rows).sum(axis=0) + (1.0 - w.sum()) * np.asarray(emovec, np.float32)

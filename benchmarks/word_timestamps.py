"""How well a model's own word timestamps (Piper's and Kokoro's duration predictors) agree with
the forced aligners' on the same audio: the absolute difference of every word's start and end,
median and p90, per model and aligner.

Each text is spoken through the library (``ttscli.synthesize_words``); each aligner is handed the
words the engine spoke (normalized text, as the engine hands it to an aligner for a model
without durations) and the audio. Only words the model placed and the aligner found count.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/word_timestamps.py --models piper-joe,kokoro-82m

Texts: the four-sentence paragraph of tests/test_words_aligner.py by default, ``--textnorm``
for the 113 lines of tests/fixtures/textnorm/sentences.tsv (numbers, money, dates, ...).
Needs the eval extra (pocketsphinx, faster-whisper) and, for Kokoro, the kokoro extra.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import ttscli  # loads the BLAS before mlx

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PARAGRAPH = ("The quick brown fox jumps over the lazy dog. She sells seashells by the seashore, "
             "and the shells she sells are surely seashells. A journey of a thousand miles begins with a single "
             "step. Please call me tomorrow morning before the meeting starts.")


def texts(textnorm: bool) -> list[str]:
    if not textnorm:
        return [PARAGRAPH]
    lines = (ROOT / "tests" / "fixtures" / "textnorm" / "sentences.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[1] for line in lines if line.strip() and not line.startswith("#")]


def edges(ours, theirs) -> list[float]:
    """|model - aligner| of the start and end of each word both placed, in the same order."""
    pairs = [(m, a) for m, a in zip(ours, theirs) if m.source == "model" and a.source == "aligner"]
    return [abs(m.start - a.start) for m, a in pairs] + [abs(m.end - a.end) for m, a in pairs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="piper-joe,kokoro-82m")
    ap.add_argument("--textnorm", action="store_true", help="the 113 lines of the normalization set")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()

    from ttscli.forced_align import SphinxAligner
    from ttscli.generate import Request, synthesize_words
    from ttscli.words import WhisperAligner

    aligners = {"pocketsphinx": SphinxAligner(), "whisper-base": WhisperAligner()}
    report = {}
    for model in args.models.split(","):
        pipe = ttscli.load(model)
        found = {name: [] for name in aligners}
        words = 0
        language = "en" if "kokoro" in model else None
        for text in texts(args.textnorm):
            chunks = list(synthesize_words(pipe, Request(text=text, seed=1, language=language)))
            audio = np.concatenate([c.audio for c in chunks])
            ours = [w for c in chunks for w in c.words]
            spoken = " ".join(w.word for w in ours)
            words += len(ours)
            for name, align in aligners.items():
                found[name] += edges(ours, align(audio, pipe.sample_rate, spoken, "en"))
        for name, e in found.items():
            e = np.asarray(e)
            row = {"words": words, "edges": int(e.size), "median_ms": round(1000 * float(np.median(e)), 1),
                   "p90_ms": round(1000 * float(np.percentile(e, 90)), 1)}
            report[f"{model}/{name}"] = row
            print(f"{model:12s} {name:13s} {row['edges'] // 2:4d} of {words} words  median {row['median_ms']:6.1f} ms"
                  f"  p90 {row['p90_ms']:6.1f} ms", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""WER of written forms (numbers, money, dates, times, phones, units, abbreviations) read aloud,
with the engine's text normalization off ("before") and on ("after"), per category and model.

Each line of tests/fixtures/textnorm/sentences.tsv is spoken by each model through the library
(``ttscli.synthesize``), transcribed by ``ttscli eval``'s ASR (faster-whisper, Whisper base) and
scored against the line's reference reading with ``ttscli eval``'s Whisper text normalisation.
After that normalisation both sides get one more symmetric step: a number's inner "." or ":" and
an ordinal's suffix drop ("3.30" = "330", "6th" = "6"), adjacent digit groups join ("555 1234" =
"5551234") and adjacent single letters join ("p m" = "pm"), so that a transcript is not charged
for how Whisper happened to write a correct time, date, phone number or "p.m.".

    PYTHONPATH=$PWD .venv/bin/python benchmarks/textnorm_wer.py --models piper-joe,kokoro-82m \\
        --json textnorm_wer.json

``--per-category N`` runs the first N lines of each category (a quicker subset). Needs the eval
extra (faster-whisper, whisper-normalizer, jiwer) and, for Kokoro, the kokoro extra.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import ttscli  # loads the BLAS before mlx

import numpy as np

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "textnorm" / "sentences.tsv"
ASR_RATE = 16_000


def read_fixture(path: Path, per_category: int | None) -> list[tuple[str, str, str]]:
    """(category, text, reference) lines; '#' starts a comment line."""
    rows, seen = [], defaultdict(int)
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        category, text, reference = line.split("\t")
        if per_category is None or seen[category] < per_category:
            rows.append((category, text, reference))
            seen[category] += 1
    return rows


def canonical(text: str) -> list[str]:
    """Whisper's English normalisation, then adjacent digit groups and single letters joined."""
    from ttscli.eval.scoring import normalize

    out: list[str] = []
    letters = False                     # the last word is single letters joined
    for w in normalize(text, "en").split():
        if re.fullmatch(r"\d+(?:[.:]\d+)*(?:st|nd|rd|th)?", w):
            w = re.sub(r"\D", "", w)      # "3.30" = "3:30" = "330", "6th" = "6"
        single = len(w) == 1 and w.isalpha()
        if out and ((w.isdigit() and out[-1].isdigit()) or (single and letters)):
            out[-1] += w
        else:
            out.append(w)
            letters = single
    return out


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    import jiwer

    ref, hyp = " ".join(canonical(reference)), " ".join(canonical(hypothesis))
    if not hyp:
        return len(ref.split()), len(ref.split())
    w = jiwer.process_words(ref, hyp)
    return w.substitutions + w.deletions + w.insertions, len(ref.split())


def speak(pipe, text: str, normalize_text: bool, voice: str | None = None) -> np.ndarray:
    from ttscli.audio import resample

    # language: the model's own
    request = ttscli.Request(text=text, seed=0, normalize_text=normalize_text, voice=voice)
    audio = np.concatenate([np.asarray(x, np.float32).reshape(-1) for x in ttscli.synthesize(pipe, request)])
    return resample(audio, pipe.sample_rate, ASR_RATE)


def run(models: list[str], rows: list[tuple[str, str, str]], voice: str | None = None,
        modes: tuple[str, ...] = ("before", "after")) -> dict:
    from ttscli.eval.asr import ASR

    asr = ASR()
    report: dict = {"lines": [], "wer": {}}
    for model in models:
        pipe = ttscli.load(model)
        totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        for category, text, reference in rows:
            for mode in modes:
                heard = asr.transcribe(speak(pipe, text, mode == "after", voice), "en")
                errs, words = word_errors(reference, heard)
                for key in ((category, mode), ("all", mode)):
                    totals[key][0] += errs
                    totals[key][1] += words
                report["lines"].append({"model": model, "category": category, "mode": mode, "text": text,
                                        "reference": reference, "heard": heard, "errors": errs, "words": words})
            errors = "/".join(str(line["errors"]) for line in report["lines"][-len(modes):])
            print(f"{model} {category:13s} {text[:50]:50s} {'/'.join(modes)} errors {errors}", file=sys.stderr)
        report["wer"][model] = {f"{c}/{m}": round(e / max(1, n), 4) for (c, m), (e, n) in sorted(totals.items())}
    return report


def table(report: dict) -> str:
    models = list(report["wer"])
    cats = sorted({k.split("/")[0] for m in models for k in report["wer"][m]}, key=lambda c: (c == "all", c))
    head = "| category | " + " | ".join(f"{m} before | {m} after" for m in models) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(models))]
    for c in cats:
        cells = [f"{100 * report['wer'][m][f'{c}/{mode}']:.1f}%" if f"{c}/{mode}" in report["wer"][m] else "-"
                 for m in models for mode in ("before", "after")]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="piper-joe,kokoro-82m", help="Comma-separated model ids.")
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    ap.add_argument("--per-category", type=int, default=None, help="Only the first N lines of each category.")
    ap.add_argument("--json", type=Path, default=None, help="Write every line's transcript and the figures here.")
    ap.add_argument("--voice", default=None, help="The voice every model speaks with (default: each model's own).")
    ap.add_argument("--after-only", action="store_true", help="Only with normalization on.")
    args = ap.parse_args()
    rows = read_fixture(args.fixture, args.per_category)
    t0 = time.perf_counter()
    modes = ("after",) if args.after_only else ("before", "after")
    report = run([m.strip() for m in args.models.split(",") if m.strip()], rows, args.voice, modes)
    report["sentences"] = len(rows)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    print(table(report))
    print(f"{len(rows)} sentences, {report['seconds']} s")


if __name__ == "__main__":
    main()

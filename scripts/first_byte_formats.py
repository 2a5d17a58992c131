#!/usr/bin/env python
"""Time to first byte of each response format from `ttscli serve` (bounded; it stops by itself).

Starts a server on 127.0.0.1 with the given model (default: the embedded voice), warms it up,
then sends the same --chars-long text (2,000 characters) once per format per round, for --repeats
rounds, one request at a time, the formats' order rotating each round so that none always goes
first. WAV is asked for as a stream (``"stream": true``: its first byte is the open-ended header
and the first chunk), the baseline the compressed formats are compared with. Reports per format
the median time to the first body byte and to the last, the ratio of the first byte to WAV's, and
the machine's load average (the figures depend on what else runs).

    .venv/bin/python scripts/first_byte_formats.py --repeats 5
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from clitools import ttscli_exe

READY = re.compile(r"serving .* on (http://127\.0\.0\.1:\d+)")
SENTENCES = ("The quick brown fox jumps over the lazy dog.", "A server sends audio while it is still speaking.",
             "Compressed formats should start as soon as the first sentence is ready.",
             "Nobody likes to wait for the end of a long paragraph before hearing anything.",
             "Each chunk of speech is encoded and sent the moment the model makes it.")
FORMATS = ("wav", "mp3", "opus", "aac")
TIMEOUT_S = 600.0


def text_of(chars: int) -> str:
    """``chars`` characters of sentences, ending with a full stop."""
    words, i = [], 0
    while len(" ".join(words)) < chars:
        words.append(SENTENCES[i % len(SENTENCES)])
        i += 1
    return " ".join(words)[:chars - 1].rstrip() + "."


def start_server(model: str | None) -> tuple[subprocess.Popen, str]:
    args = ttscli_exe() + ["serve", "--port", "0"] + (["-m", model] if model else [])
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    found, ready = [], threading.Event()

    def read():
        for line in proc.stderr:
            m = READY.search(line)
            if m and not found:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(300) or not found:
        proc.kill()
        raise SystemExit("the server did not start")
    return proc, found[0]


def timed(client: httpx.Client, url: str, text: str, fmt: str) -> tuple[float, float, int]:
    """(seconds to the first body byte, to the last, body bytes) of one request."""
    body = {"input": text, "response_format": fmt, "seed": 1, **({"stream": True} if fmt == "wav" else {})}
    t0 = time.perf_counter()
    first, size = None, 0
    with client.stream("POST", url + "/v1/audio/speech", json=body) as r:
        if r.status_code != 200:
            raise SystemExit(f"{fmt}: HTTP {r.status_code}: {r.read()[:300]!r}")
        for part in r.iter_raw():
            if part and first is None:
                first = time.perf_counter() - t0
            size += len(part)
    return first, time.perf_counter() - t0, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", help="model to serve (default: the embedded voice)")
    ap.add_argument("--chars", type=int, default=2000, help="characters of input text")
    ap.add_argument("--repeats", type=int, default=5, help="rounds; each format once per round")
    args = ap.parse_args()
    text = text_of(args.chars)
    proc, url = start_server(args.model)
    runs: dict[str, list[tuple[float, float, int]]] = {f: [] for f in FORMATS}
    try:
        with httpx.Client(timeout=TIMEOUT_S) as client:
            timed(client, url, "Warm up.", "wav")
            for r in range(args.repeats):
                for fmt in FORMATS[r % len(FORMATS):] + FORMATS[:r % len(FORMATS)]:
                    runs[fmt].append(timed(client, url, text, fmt))
    finally:
        proc.terminate()
        proc.wait(30)
    base = statistics.median(x[0] for x in runs["wav"])
    print(f"input {len(text)} characters, {args.repeats} rounds, load average {os.getloadavg()[0]:.1f}")
    print("| format | first byte (median) | last byte (median) | first byte / wav's | body |")
    print("|---|---|---|---|---|")
    for fmt in FORMATS:
        first = statistics.median(x[0] for x in runs[fmt])
        last = statistics.median(x[1] for x in runs[fmt])
        size = statistics.median(x[2] for x in runs[fmt])
        print(f"| {fmt} | {first:.3f} s | {last:.2f} s | {first / base:.2f}x | {size / 1e3:.0f} kB |")
    print("first bytes (s): " + "; ".join(f"{f}: " + ", ".join(f"{x[0]:.3f}" for x in runs[f]) for f in FORMATS))


if __name__ == "__main__":
    main()

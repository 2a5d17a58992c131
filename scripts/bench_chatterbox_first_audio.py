"""Chatterbox --stream: time to first audio, the schedule before vs after S3Gen's own first chunk.

One process, one real-size model with random weights (as `ttscli bench chatterbox
--random-weights --stream`), the same text, seed and conditionals on both sides; each stream is
stopped at its first audio. CPU seconds of this process (all its threads) beside wall seconds,
since the machine may be shared:

    .venv/bin/python scripts/bench_chatterbox_first_audio.py [--rounds 1]

"before": the pipeline's chunking up to commit f159e00: a generic first chunk of 3 T3 tokens,
then 25, counting every id T3 draws; the 3-token pass cannot make audio (S3Gen holds back the
flow's 3-token lookahead and 8 mel frames of vocoder context), so audio waits for the 28th.
"after": the pipeline as it is (first chunk: S3Gen.first_audio_tokens speech codes).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

import ttscli  # noqa: F401  (loads the BLAS before mlx)
import numpy as np

from ttscli.bench import DEFAULT_TEXT
from ttscli.generate import Request
from ttscli.models.base import LoadOptions
from ttscli.models.chatterbox.load import load_pipeline
from ttscli.models.chatterbox.pipeline import SPEECH_CODES


def before(pipe, r: Request, conds):
    """The pre-change schedule, written out (its S3Gen.stream call is unchanged since)."""
    def chunks():
        buf, sent = [], 0
        for tok in pipe.tokens(r):
            buf.append(tok)
            if len(buf) >= (3 if sent == 0 else 25):
                out = np.asarray([t for t in buf if t < SPEECH_CODES], np.int64)
                buf = []
                if out.size:
                    sent += 1
                    yield out
    return pipe.s3gen.stream(chunks(), conds.gen)


def after(pipe, r: Request, conds):
    return pipe.generate(r)


def first_audio(pipe, r: Request, how) -> dict:
    pipe.reset_stats()
    c0, w0 = time.process_time(), time.perf_counter()
    stream = how(pipe, r, pipe.conditionals(r))
    for piece in stream:
        if len(piece):
            break
    out = {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0,
           "t3_tokens": pipe.stats.frames, "samples": len(piece)}
    stream.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    print(json.dumps({"loadavg_start": os.getloadavg()}), flush=True)
    t = time.perf_counter()
    pipe = load_pipeline(None, None, LoadOptions(random_weights=True))
    print(json.dumps({"load_s": time.perf_counter() - t}), flush=True)
    r = Request(text=DEFAULT_TEXT, seed=0, stream=True, max_frames=50, ignore_eos=True)
    r_after = replace(r, first_chunk_frames=pipe.s3gen.first_audio_tokens)
    # the first run pays MLX's one-off costs (kernels built per shape): "after" runs on either
    # side of "before", so the cold run and the warm one are both shown
    runs = [("after", after, r_after)] + [x for _ in range(a.rounds)
                                          for x in (("before", before, r), ("after", after, r_after))]
    for i, (name, how, req) in enumerate(runs):
        res = {"run": i, "schedule": name, **first_audio(pipe, req, how), "loadavg": os.getloadavg()}
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()

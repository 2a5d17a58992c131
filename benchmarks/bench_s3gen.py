"""S3Gen speed, in process: seconds of compute per second of audio, flow and HiFT apart.

    .venv/bin/python benchmarks/bench_s3gen.py [--seconds 4] [--prompt 4] [--steps 10] [--compiled both]

It builds the real-size S3Gen with random weights (the cost does not depend on the values).
``--compiled on`` makes each Euler step of the CFM one ``mx.compile`` trace
(``CausalConditionalCFM.compiled``); ``both`` times the flow without and with it in one run.
"""
from __future__ import annotations

import argparse
import time

import ttscli  # noqa: F401  (loads the BLAS before mlx)
import mlx.core as mx
import numpy as np

from ttscli.codecs.s3gen import S3Gen, load_s3gen


def bench_s3gen(s3: S3Gen | None = None, *, audio_seconds: float = 4.0, prompt_seconds: float = 4.0,
                n_timesteps: int = 10, repeats: int = 2, seed: int = 0, compiled: bool = False) -> dict[str, float]:
    """Best-of-``repeats`` timings (after one warm-up) of the flow and HiFT on random tokens."""
    s3 = s3 or load_s3gen(None, random_weights=True)
    s3.flow.decoder.compiled = compiled
    rng = np.random.default_rng(seed)
    n_tok, n_prompt = round(audio_seconds * 25), round(prompt_seconds * 25)
    ref = {"prompt_token": rng.integers(0, 6561, (1, n_prompt)),
           "prompt_feat": rng.standard_normal((1, 2 * n_prompt, 80)).astype(np.float32) - 5.0,
           "embedding": rng.standard_normal((1, 192)).astype(np.float32)}
    tokens = rng.integers(0, 6561, n_tok)
    best = {"flow_s": float("inf"), "hift_s": float("inf")}
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        mel = s3.mel(tokens, ref, n_timesteps=n_timesteps, key=mx.random.key(seed))
        mx.eval(mel)
        t1 = time.perf_counter()
        wav, _ = s3.mel2wav(mel, key=mx.random.key(seed + 1))
        mx.eval(wav)
        t2 = time.perf_counter()
        best["flow_s"] = min(best["flow_s"], t1 - t0)
        best["hift_s"] = min(best["hift_s"], t2 - t1)
    audio_s = n_tok / 25
    total = best["flow_s"] + best["hift_s"]
    return {**best, "s3gen_s": total, "audio_s": audio_s, "s3gen_s_per_audio_s": total / audio_s,
            "n_timesteps": float(n_timesteps)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=4.0, help="audio to generate")
    p.add_argument("--prompt", type=float, default=4.0, help="reference prompt length")
    p.add_argument("--steps", type=int, default=10, help="CFM Euler steps")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--compiled", choices=["off", "on", "both"], default="off",
                   help="each CFM Euler step as one compiled trace (both: off, then on, in one run)")
    a = p.parse_args(argv)
    s3 = load_s3gen(None, random_weights=True)
    for c in {"off": [False], "on": [True], "both": [False, True]}[a.compiled]:
        r = bench_s3gen(s3, audio_seconds=a.seconds, prompt_seconds=a.prompt, n_timesteps=a.steps,
                        repeats=a.repeats, compiled=c)
        print(f"compiled={'on' if c else 'off'} " + " ".join(f"{k}={v:.3f}" for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()

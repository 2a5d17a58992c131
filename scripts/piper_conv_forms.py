"""HiFi-GAN conv layers of Piper joe-medium: MLX's conv1d / conv_transpose1d against our GEMM forms.

    .venv/bin/python scripts/piper_conv_forms.py [--frames 200] [--runs 5]

Prints one JSON line per layer shape (best of --runs, seconds). `ttscli bench piper-joe
--peer piper-tts` is the end-to-end measurement; this isolates the convolutions.
"""
from __future__ import annotations

import argparse
import json
import time

import ttscli  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx
import numpy as np


def _timed(fn, runs: int) -> float:
    """Best of ``runs``: the least disturbed run on a shared machine."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench_convs(frames: int = 200, runs: int = 5) -> list[dict]:
    """HiFi-GAN conv layers of joe-medium at ``frames`` latent frames: mx.conv1d vs GEMM form."""
    from ttscli.nn.conv import Conv1d, ConvTranspose1d

    rows = []
    rng = np.random.default_rng(0)

    def run(fn):
        mx.eval(fn())
        return _timed(lambda: mx.eval(fn()), runs)

    t = frames
    ch = 256
    for u, k in [(8, 16), (8, 16), (4, 8)]:
        x = mx.array(rng.standard_normal((1, t, ch)).astype(np.float32))
        w = mx.array(rng.standard_normal((ch // 2, k, ch)).astype(np.float32) * 0.05)
        p = (k - u) // 2
        up = ConvTranspose1d(ch, ch // 2, k, u, p, bias=False)
        up.weight = w.transpose(2, 0, 1)                         # MLX [out, K, in] -> [in, out, K]
        rows.append({"layer": f"conv_transpose k{k} s{u} {ch}->{ch // 2} T{t}",
                     "mlx_s": run(lambda: mx.conv_transpose1d(x, w, stride=u, padding=p)),  # noqa: B023 - called within the iteration
                     "gemm_s": run(lambda: up(x))})  # noqa: B023 - called within the iteration
        t, ch = t * u, ch // 2
        for ks, d in [(3, 2), (5, 6), (7, 12)]:
            x = mx.array(rng.standard_normal((1, t, ch)).astype(np.float32))
            w = mx.array(rng.standard_normal((ch, ks, ch)).astype(np.float32) * 0.05)
            pad = d * (ks - 1) // 2
            conv = Conv1d(ch, ch, ks, dilation=d, padding=pad, bias=False)
            conv.weight = w.transpose(0, 2, 1)                   # MLX [out, K, in] -> [out, in, K]
            rows.append({"layer": f"conv k{ks} d{d} {ch}ch T{t}",
                         "mlx_s": run(lambda: mx.conv1d(x, w, padding=pad, dilation=d)),  # noqa: B023 - called within the iteration
                         "gemm_s": run(lambda: conv.output_side(x))})  # noqa: B023 - called within the iteration
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    for row in bench_convs(a.frames, a.runs):
        print(json.dumps(row))

"""Where a Qwen3-TTS frame's time goes on a GPU: MLX's cost per node, and host vs device.

    python scripts/gpu_frame_anatomy.py [--model qwen3-tts-0.6b-base] [--reps 30]

Prints JSON:
- ``node_cost``: microseconds per node of long dependent chains built lazily and evaluated at
  once (a tiny elementwise op; float32 mat-vecs at the talker's shapes), and the part of it the
  host spends before ``mx.async_eval`` returns (building + encoding the kernels).
- ``code_predictor_frame`` / ``talker_step``: the compiled frame and step as the loop runs them:
  host time to enqueue, time to done, and the time per frame when K frames are queued before
  one wait (the GPU's own pace when the host keeps ahead).
Random weights at the real dimensions.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ttscli  # noqa: F401  (BLAS before mlx)

# isort: split
import mlx.core as mx


def timed(build, reps: int) -> dict:
    """``build()`` returns lazy outputs; host = until async_eval returns, total = until done."""
    host, total = [], []
    for i in range(reps + 2):
        mx.synchronize()
        t0 = time.perf_counter()
        out = build()
        mx.async_eval(out)
        t1 = time.perf_counter()
        mx.eval(out)
        mx.synchronize()
        t2 = time.perf_counter()
        if i >= 2:
            host.append((t1 - t0) * 1e3)
            total.append((t2 - t0) * 1e3)
    return {"host_ms": round(statistics.median(host), 3), "total_ms": round(statistics.median(total), 3)}


def chain(n: int, op, x0) -> dict:
    def build():
        x = x0
        for _ in range(n):
            x = op(x)
        return x
    t = timed(build, 5)
    return {"n": n, "us_per_node_total": round(t["total_ms"] * 1e3 / n, 2),
            "us_per_node_host": round(t["host_ms"] * 1e3 / n, 2)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-tts-0.6b-base")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--queue", type=int, default=8)
    a = ap.parse_args()
    out: dict = {"device": str(mx.default_device()), "mlx": mx.__version__}

    # MLX's floor per node
    v = mx.ones((1024,))
    w1 = mx.random.normal((1024, 1024)) * 0.03
    w_up = mx.random.normal((1024, 4096)) * 0.03
    w_dn = mx.random.normal((4096, 1024)) * 0.015
    x = mx.random.normal((1, 1024))
    w1b = w1.astype(mx.bfloat16)
    mx.eval(v, w1, w1b, w_up, w_dn, x)
    out["node_cost"] = {
        "elementwise_1024": chain(2000, lambda t: t * 1.0001, v),
        "gemv_1024x1024_f32": chain(1000, lambda t: t @ w1, x),
        "gemv_up_down_1024x4096_f32 (2 nodes)": chain(500, lambda t: (t @ w_up) @ w_dn, x),
        "gemv_1024x1024_bf16": chain(1000, lambda t: t @ w1b,
                                     x.astype(mx.bfloat16)),
    }
    print(json.dumps(out), flush=True)

    from ttscli.api import load
    from ttscli.lm import SamplingParams
    from ttscli.lm.sample import KeyStream
    from ttscli.models.base import LoadOptions

    pipe = load(a.model, options=LoadOptions(random_weights=True))
    talker = pipe.model.talker
    dec = pipe.code_decoder
    cp = talker.code_predictor
    H = talker.args.hidden_size
    sub = SamplingParams(0.9, 50, 1.0)
    fn = cp.compiled_frame(sub)
    hidden = mx.random.normal((1, H)) * 0.1
    c0e = mx.random.normal((1, H)) * 0.1
    keys = KeyStream(0).take(16)[1:]
    mx.eval(hidden, c0e, keys)

    out["code_predictor_frame"] = timed(lambda: fn(hidden, c0e, keys), a.reps)

    def queued():
        h = hidden
        outs = []
        for _ in range(a.queue):
            codes, emb = fn(h, c0e, keys)
            outs.append(codes)
            h = emb
        return outs + [h]
    q = timed(queued, max(3, a.reps // 4))
    out["code_predictor_frame"]["queued_ms_per_frame"] = round(q["total_ms"] / a.queue, 3)
    out["code_predictor_frame"]["queued_host_ms_per_frame"] = round(q["host_ms"] / a.queue, 3)

    cache = dec.new_cache()
    emb = mx.random.normal((1, 200, H)) * 0.1
    logits, hid = dec.prefill(emb, cache)
    mx.eval(logits, hid, [c.state for c in cache])
    step_in = emb[:, -1:]

    def step():
        return list(dec.step(step_in, cache))
    out["talker_step"] = timed(step, a.reps)

    def steps():
        outs = []
        for _ in range(a.queue):
            outs += list(dec.step(step_in, cache))
        return outs
    q = timed(steps, max(3, a.reps // 4))
    out["talker_step"]["queued_ms_per_step"] = round(q["total_ms"] / a.queue, 3)
    out["talker_step"]["queued_host_ms_per_step"] = round(q["host_ms"] / a.queue, 3)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Talker-side speed at real dimensions with random weights (no downloads).

    .venv/bin/python benchmarks/bench_qwen3_talker.py [--preset 0.6B-Base] [--prompt 200] [--frames 10]

Prints: batched vs one-position-per-call prefill of a ``--prompt``-token prompt, talker step ms,
code-predictor frame ms (15 steps, compiled, on-device sampling), full frame ms through the real
frame loop, and peak MLX memory.  Float32 on CPU unless --dtype says otherwise.
"""
from __future__ import annotations

import argparse
import json
import time

import ttscli  # noqa: F401  (preloads OpenBLAS before mlx)
import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ttscli.lm import MLXCodeDecoder, SamplingParams
from ttscli.models.qwen3_tts.loop import LoopConfig, generate_frames
from ttscli.models.qwen3_tts.config import GenerationConfig
from ttscli.models.qwen3_tts.model import build_random
from ttscli.models.qwen3_tts.prompt import Prompt


def timed(fn, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="0.6B-Base")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--skip-sequential", action="store_true")
    a = ap.parse_args()
    t = time.perf_counter()
    model = build_random(a.preset, a.dtype)
    load_s = time.perf_counter() - t
    talker = model.talker
    H = talker.args.hidden_size
    x = (mx.random.normal((1, a.prompt, H), key=mx.random.key(1)) * 0.1).astype(talker.codec_head.weight.dtype)
    mx.eval(x)
    res = {"preset": a.preset, "dtype": a.dtype, "prompt_tokens": a.prompt, "build_s": round(load_s, 2)}

    def prefill(seq):
        dec = MLXCodeDecoder(talker, sequential=seq)
        c = dec.new_cache()
        mx.eval(dec.prefill(x, c))
        return c

    prefill(False)  # warm up
    res["prefill_batched_s"] = float(np.median(timed(lambda: prefill(False), 3)))
    if not a.skip_sequential:
        res["prefill_sequential_s"] = float(np.median(timed(lambda: prefill(True), 1)))
        res["prefill_ratio_seq_over_batched"] = res["prefill_sequential_s"] / res["prefill_batched_s"]

    dec = MLXCodeDecoder(talker)
    cache = prefill(False)
    e = x[:, :1]
    step = timed(lambda: mx.eval(dec.step(e, cache)), 10)[2:]
    res["talker_step_ms"] = float(np.median(step) * 1e3)
    logits, h = dec.step(e, cache)
    c0e = talker.embed_codec(mx.array([7]))
    keys = mx.random.split(mx.random.key(3), 15)
    p = SamplingParams(0.9, 50, 1.0)
    cpf = talker.code_predictor.compiled_frame(p)
    res["cp_frame_ms"] = float(np.median(timed(lambda: mx.eval(cpf(h, c0e, keys)), 8)[2:]) * 1e3)
    res["cp_frame_uncompiled_ms"] = float(np.median(timed(
        lambda: mx.eval(talker.code_predictor.frame(h, c0e, p, keys)), 6)[2:]) * 1e3)

    cfg = LoopConfig.from_generation_config(GenerationConfig(), max_frames=a.frames)
    cfg.ignore_eos = True
    prompt = Prompt(x, x[:, :5], x[:, :1])
    from ttscli.generate import Stats

    st = Stats()
    for _ in generate_frames(talker, dec, prompt, cfg, seed=0, stats=st):
        pass
    res["full_frame_ms"] = float(np.median(st.frame_s[2:]) * 1e3)
    res["peak_mem_gb"] = mx.get_peak_memory() / 2**30
    # Decode is memory-bound: bytes of weights one frame must read (talker layers + head once,
    # predictor layers + one head per step, 15 steps) against the measured frame time.
    nbytes = lambda tree: sum(v.nbytes for _, v in tree_flatten(tree))  # noqa: E731
    cp_m = talker.code_predictor
    per_frame = (nbytes([layer.parameters() for layer in talker.model.layers]) + talker.codec_head.weight.nbytes
                 + 15 * nbytes([layer.parameters() for layer in cp_m.model.layers])
                 + nbytes([h.parameters() for h in cp_m.lm_head]))
    res["frame_weight_gb"] = per_frame / 1e9
    res["frame_effective_gb_per_s"] = per_frame / 1e9 / (res["full_frame_ms"] / 1e3)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

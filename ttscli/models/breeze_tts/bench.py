"""Bench hooks: the backbone step and the depth decoder's frame, timed apart."""
from __future__ import annotations

import time


def bench_components(pipeline, req) -> dict[str, float]:
    """Backbone step and depth-decoder frame (15 codebooks) times, measured apart, synced."""
    import mlx.core as mx
    import numpy as np

    from ttscli.lm.sample import SamplingParams, logit_bias, sample

    model, dec = pipeline.model, pipeline.code_decoder
    H = model.args.hidden_size
    n = int(getattr(req, "prompt_tokens", 200))
    x = mx.random.normal((1, n, H), key=mx.random.key(1)).astype(model.lm_head.weight.dtype) * 0.1
    mx.eval(dec.prefill(x[:, :8], dec.new_cache()))
    cache = dec.new_cache()
    t = time.perf_counter()
    mx.eval(dec.prefill(x, cache))
    prefill_s = time.perf_counter() - t
    params = SamplingParams(0.9, 50, 1.0)
    bias = logit_bias(model.args.vocab_size, range(model.args.codebook_size, model.args.vocab_size))[None]
    keys = mx.random.split(mx.random.key(2), 16)
    step_ms, depth_ms = [], []
    depth_frame = getattr(dec, "depth_frame", model.depth_frame)
    for i in range(8):
        t = time.perf_counter()
        logits, h = dec.step(x[:, i:i + 1], cache)
        mx.eval(logits, h)
        t1 = time.perf_counter()
        codes, _ = depth_frame(h, mx.array([5]), lambda z, j: sample(z, params, keys[j], bias=bias))
        mx.eval(codes)
        t2 = time.perf_counter()
        if i >= 2:
            step_ms.append((t1 - t) * 1e3)
            depth_ms.append((t2 - t1) * 1e3)
    return {"backbone_step_ms": float(np.median(step_ms)), "depth_frame_ms": float(np.median(depth_ms)),
            "prefill_tokens": n, "prefill_ms": prefill_s * 1e3, "prefill_tokens_per_s": n / prefill_s}

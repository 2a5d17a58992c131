"""Bench hooks: the talker step and the code predictor's frame, timed apart."""
from __future__ import annotations

import time


def bench_components(pipeline, req) -> dict[str, float]:
    """Talker step and code-predictor frame times (ms), measured apart with a sync after each."""
    import mlx.core as mx

    from ttscli.lm import SamplingParams

    talker = pipeline.model.talker
    H = talker.args.hidden_size
    dec = pipeline.code_decoder
    n = int(getattr(req, "prompt_tokens", 200))
    x = mx.random.normal((1, n, H), key=mx.random.key(1)) * 0.1
    mx.eval(dec.prefill(x[:, :8], dec.new_cache()))  # warm-up (compilation, allocation)
    cache = dec.new_cache()
    t = time.perf_counter()
    mx.eval(dec.prefill(x, cache))  # this variant's prefill mode: batched, or one position per call
    prefill_s = time.perf_counter() - t
    step_ms, cp_ms = [], []
    cp = (dec if hasattr(dec, "compiled_frame") else talker.code_predictor).compiled_frame(SamplingParams(0.9, 50, 1.0))
    keys = mx.random.split(mx.random.key(2), 15)
    for i in range(12):
        t = time.perf_counter()
        logits, h = dec.step(x[:, i:i + 1], cache)
        mx.eval(logits, h)
        t1 = time.perf_counter()
        codes, emb = cp(h, talker.embed_codec(mx.array([5])), keys)
        mx.eval(codes, emb)
        t2 = time.perf_counter()
        if i >= 2:
            step_ms.append((t1 - t) * 1e3)
            cp_ms.append((t2 - t1) * 1e3)
    import numpy as np

    from ttscli.models.qwen3_tts.loop import frame_kernels

    from ttscli.lm import MLXCodeDecoder

    kernels = {} if not isinstance(dec, MLXCodeDecoder) else frame_kernels(
        talker, dec, SamplingParams(0.9, 50, 1.0), SamplingParams(0.9, 50, 1.0, 0.0, 1.05), x[:, :16])
    from ttscli.models.qwen3_tts.cuda_frame import CodeFrameKernel

    return {"talker_step_ms": float(np.median(step_ms)), "code_predictor_frame_ms": float(np.median(cp_ms)),
            "code_predictor_one_kernel": float(isinstance(cp, CodeFrameKernel)),
            "prefill_tokens": n, "prefill_ms": prefill_s * 1e3, "prefill_tokens_per_s": n / prefill_s, **kernels}

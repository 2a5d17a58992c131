"""Where a Qwen3-TTS frame's time goes on a GPU: the frame loop (generate_frames) at real 0.6B
dimensions with random float32 weights, timed with each part of the compiled decode path
switched on or off in turn.  Diagnostic only ("no-mask" computes wrong attention on purpose,
to price the masked attention kernel).

    python scripts/gpu_frame_variants.py [--frames 150] [--rounds 2] [--prompt 200]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ttscli  # noqa: F401

# isort: split
import mlx.core as mx
import numpy as np

from ttscli.generate import Stats
from ttscli.lm import MLXCodeDecoder
from ttscli.lm import cache as lmcache
from ttscli.models.qwen3_tts.config import GenerationConfig, preset_config
from ttscli.models.qwen3_tts.loop import LoopConfig, generate_frames
from ttscli.models.qwen3_tts.model import build_random
from ttscli.models.qwen3_tts.prompt import Prompt


def frames(model, dec, x, n):
    cfg = LoopConfig.from_generation_config(GenerationConfig(), max_frames=n)
    cfg.ignore_eos = True
    st = Stats()
    t = time.perf_counter()
    first = None
    for _ in generate_frames(model.talker, dec, Prompt(x, x[:, :0], x[:, :1]), cfg, seed=0, stats=st):
        first = first or time.perf_counter() - t
    return np.array(st.frame_s) * 1e3, first * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args()
    cfg = preset_config("0.6B-Base")
    cfg.pop("speaker_encoder_config", None)
    model = build_random(cfg, a.dtype)
    H = cfg["talker_config"]["hidden_size"]
    x = (mx.random.normal((1, a.prompt, H), key=mx.random.key(0)) * 0.1).astype(getattr(mx, a.dtype))
    mx.eval(x)
    mask = lmcache.SlotCache.make_mask

    def variant(name):
        lmcache.SlotCache.make_mask = mask
        if name.startswith("plain"):
            return MLXCodeDecoder(model.talker, compiled=False)
        dec = MLXCodeDecoder(model.talker, compiled=True)
        if name == "no-compiled-sampler":
            dec.compiled = False
        elif name == "no-compiled-step":
            dec._step = None
        elif name == "no-mask":
            lmcache.SlotCache.make_mask = lambda self, n: None
        return dec

    out = {}
    # plain first: building a compiled decoder fuses the model's projections for good (so
    # "plain-again" is the uncompiled loop with fused projections)
    for name in ("plain", "full", "no-compiled-step", "no-mask", "plain-again", "full"):
        dec = variant(name)
        frames(model, dec, x, 8)  # warm-up: traces, allocations
        runs = [frames(model, dec, x, a.frames) for _ in range(a.rounds)]
        ms = np.concatenate([r[0][2:] for r in runs])
        key = name if name not in out else name + "-again"
        out[key] = {"p50": round(float(np.percentile(ms, 50)), 2), "p95": round(float(np.percentile(ms, 95)), 2),
                    "mean": round(float(ms.mean()), 2),
                    "first_frame_ms": round(float(np.median([r[1] for r in runs])), 1),
                    "first12": [round(float(v), 1) for v in runs[-1][0][:12]]}
        print(key, json.dumps(out[key]), flush=True)
    lmcache.SlotCache.make_mask = mask


if __name__ == "__main__":
    main()

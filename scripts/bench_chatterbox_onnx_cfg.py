"""Chatterbox T3 on onnxruntime: CFG's two rows as one batch of two against the two rows run one
after the other (one cache each), interleaved in one process, at T3's real width with random
weights and a reduced depth (the ratio is per layer). The README's "CPU backend" figures.

    TTSCLI_CACHE=/tmp/cbx .venv/bin/python scripts/bench_chatterbox_onnx_cfg.py --layers 6 --precision int8
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import ttscli  # noqa: F401  (BLAS preload before mlx)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--precision", default="int8", choices=("float32", "int8", "int4"))
    ap.add_argument("--prompt", type=int, default=120)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    import mlx.core as mx

    from ttscli.backends.onnx.graph import Quant
    from ttscli.models.chatterbox.config import T3Args
    from ttscli.models.chatterbox.onnx_decoder import open_decoder
    from ttscli.models.chatterbox.onnx_export import build_from_model
    from ttscli.models.chatterbox.t3 import T3

    t3 = T3(T3Args(num_hidden_layers=a.layers))
    mx.eval(t3.parameters())
    dec = open_decoder(build_from_model(t3, Quant(a.precision)))
    rng = np.random.default_rng(0)
    H = t3.args.hidden_size
    prompt = (rng.standard_normal((2, a.prompt, H)) * 0.1).astype(np.float32)
    steps = (rng.standard_normal((a.steps, 2, 1, H)) * 0.1).astype(np.float32)
    ms = {"batch of two": [], "two rows apart": []}
    for r in range(a.rounds):
        for mode in (list(ms) if r % 2 == 0 else list(ms)[::-1]):
            if mode == "batch of two":
                c = dec.new_cache()
                dec.prefill(prompt, c)
                t = time.perf_counter()
                for e in steps:
                    dec.step(e, c)
            else:
                cs = [dec.new_cache(), dec.new_cache()]
                for b, c in enumerate(cs):
                    dec.prefill(prompt[b:b + 1], c)
                t = time.perf_counter()
                for e in steps:
                    for b, c in enumerate(cs):
                        dec.step(e[b:b + 1], c)
            ms[mode].append((time.perf_counter() - t) / a.steps * 1e3)
    print(f"T3 {a.layers} layers x {H}, {a.precision}, ms per CFG step (rounds):")
    for k, v in ms.items():
        print(f"  {k:15s} {' '.join(f'{x:7.1f}' for x in v)}   median {np.median(v):.1f}")


if __name__ == "__main__":
    main()

"""CFG's two depth-decoder rows on onnxruntime at Breeze TTS 2's real depth size (12 layers,
1024 wide, 15 heads of 2051; random weights): one batched run per step against a run (and
cache) per row, interleaved in one process. The README's "Breeze TTS 2" section quotes it.

    .venv/bin/python scripts/bench_breeze_onnx_cfg.py --precision int8 --frames 6
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli.backends.coreml.weights import RandomWeights
from ttscli.backends.onnx.export import export_lm
from ttscli.backends.onnx.graph import Quant
from ttscli.backends.onnx.runtime import OnnxLM
from ttscli.lm.config import stack_shapes
from ttscli.models.breeze_tts.config import ModelArgs, real_config
from ttscli.models.breeze_tts.onnx_decoder import OnnxDepthDecoder
from ttscli.models.breeze_tts.onnx_export import DEPTH_FILE, HEAD_INPUT, depth_weights


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="int8", choices=("float32", "int8", "int4"))
    ap.add_argument("--frames", type=int, default=6, help="guided frames per variant (the first is dropped)")
    ap.add_argument("--cfg-scale", type=float, default=3.0)
    opt = ap.parse_args()
    a = ModelArgs.from_dict(real_config(), source="real config")
    d = a.depth
    shapes = {"depth_decoder.model." + k: v for k, v in stack_shapes(d).items()}
    shapes["depth_decoder.model.inputs_embeds_projector.weight"] = (d.hidden_size, a.audio_embed_size)
    shapes["depth_decoder.codebooks_head.weight"] = (a.num_codebooks - 1, d.hidden_size, a.vocab_size)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        w, proj, heads = depth_weights(RandomWeights(shapes), a)
        entry = export_lm(d, w, Path(tmp), DEPTH_FILE, heads=heads, max_positions=a.num_codebooks,
                          quant=Quant(opt.precision), in_proj=proj, cache_block=a.num_codebooks,
                          head_select=HEAD_INPUT)
        del w, heads
        print(f"built {opt.precision} in {time.perf_counter() - t:.1f} s", flush=True)
        table = (np.random.default_rng(0).standard_normal((a.num_codebooks * a.vocab_size, a.hidden_size))
                 * 0.02).astype(np.float32)
        depth = OnnxDepthDecoder(OnnxLM(Path(tmp), entry), table, a.vocab_size, a.num_codebooks)
        hidden = mx.random.normal((2, a.hidden_size), key=mx.random.key(0)) * 0.1
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(opt.frames):
            for one_run in (True, False):
                depth.rows_in_one_run = one_run
                t = time.perf_counter()
                depth.frame(hidden, mx.array([3]), lambda z, k: mx.argmax(z, axis=-1), opt.cfg_scale)
                times[one_run].append(time.perf_counter() - t)
    for one_run, name in ((True, "two rows, one batched run"), (False, "a run per row")):
        v = times[one_run][1:]
        print(f"{opt.precision} {name}: guided depth frame median {1e3 * float(np.median(v)):.1f} ms, "
              f"fastest {1e3 * min(v):.1f} ms", flush=True)


if __name__ == "__main__":
    main()

"""On MLX's CUDA backend: the one-position step with our kernels (ttscli.lm.cuda_kernels:
qk_norm_rope, one_query_attention, add_rms_norm) against the same step without them, for Qwen3 blocks (q/k norms) and
Llama blocks (none), at tiny and at real head sizes, through the plain cache and the compiled
fixed-capacity step. Prints one JSON line per case with the largest difference.

    python scripts/gpu_check_kernels.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "lm"))
import ttscli  # noqa: F401  (BLAS before mlx)

# isort: split
import mlx.core as mx
import numpy as np
from test_compiled_step import run_steps
from test_model import LLAMA3, HeadModel, build

from ttscli.lm import DecoderLM, MLXCodeDecoder
from ttscli.lm.model import LMAttention


def main() -> int:
    from ttscli.lm import cuda_kernels

    print(json.dumps({"device": str(mx.default_device()), "cuda_kernels": cuda_kernels.available()}))
    worst = 0.0
    for model_type, extra in (("qwen3", {}), ("llama", {}),
                              ("qwen3", {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                                         "head_dim": 128, "intermediate_size": 512}),
                              ("llama", {"rope_scaling": LLAMA3}),
                              ("llama", {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
                                         "head_dim": 64, "intermediate_size": 512})):
        x = mx.random.normal((1, 21, extra.get("hidden_size", 64)), key=mx.random.key(5))
        model = HeadModel(build(model_type, False, **extra))
        for compiled in (False, True):
            out = {}
            for on in (False, True):
                LMAttention.fused_qk_rope = LMAttention.fused_attention = DecoderLM.fused_norms = None if on else False
                out[on] = run_steps(MLXCodeDecoder(model, compiled=compiled), x, 4, 8)
            d = float(np.abs(out[True] - out[False]).max())
            worst = max(worst, d)
            print(json.dumps({"model": model_type, "head_dim": extra.get("head_dim", 16), "compiled": compiled,
                              "max_abs_diff": d, "peak": float(np.abs(out[False]).max())}))
    LMAttention.fused_qk_rope = LMAttention.fused_attention = DecoderLM.fused_norms = None
    if cuda_kernels.available():
        # the attention kernel alone, for a fixed-capacity cache's mask and a batch's padding mask
        from ttscli.lm.model import _one_query_attention

        keys = mx.random.split(mx.random.key(7), 3)
        for B, H, Hk, S, D in ((2, 8, 2, 40, 16), (2, 16, 8, 300, 128), (1, 16, 16, 257, 64)):
            q = mx.random.normal((B, H, 1, D), key=keys[0])
            k = mx.random.normal((B, Hk, S, D), key=keys[1])
            v = mx.random.normal((B, Hk, S, D), key=keys[2])
            pad = mx.array([[True] * S] + [[False] * 3 + [True] * (S - 3)] * (B - 1))
            for name, mask in (("slots", (mx.arange(S) <= S // 2)[None, None, None, :]),
                               ("padding", pad[:, None, None, :])):
                # against float32 on the CPU: the plain ops' GPU matmuls are 3e-4 off it where they
                # are GEMMs (GQA groups, likely TF32) and 3e-7 where they are one-row, so they are
                # shown, not used as the reference
                with mx.stream(mx.cpu):
                    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5, mask=mask)
                    mx.eval(ref)
                d = float(mx.abs(cuda_kernels.one_query_attention(q, k, v, D ** -0.5, mask) - ref).max())
                ops = float(mx.abs(_one_query_attention(q, k, v, D ** -0.5, mask) - ref).max())
                worst = max(worst, d)
                print(json.dumps({"attention": name, "shape": [B, H, Hk, S, D], "kernel_vs_cpu_float32": d,
                                  "mlx_gpu_ops_vs_cpu_float32": ops}))
    # the model-level steps compare with the plain GPU ops, whose GEMMs are ~3e-4 off float32
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    raise SystemExit(main())

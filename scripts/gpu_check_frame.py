"""Issue 19: the code predictor's one-kernel frame (ttscli.models.qwen3_tts.cuda_frame) against the compiled MLX
frame on a GPU, random weights at the real dimensions, then both timed as the loop runs them.

    python scripts/gpu_check_frame.py [--model qwen3-tts-0.6b-base] [--reps 30]

Per sampling setting and row count: how many of the 15 codes agree, the last head's logits
against the MLX frame's (uncompiled, fed the kernel's codes: same inputs), the Gumbel noise of
the batched draw against the per-key draws; then host/total milliseconds per frame for both.
Prints JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ttscli  # noqa: F401  (BLAS before mlx)

# isort: split
import mlx.core as mx
from gpu_frame_anatomy import timed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-tts-0.6b-base")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()

    from ttscli.api import load
    from ttscli.lm import SamplingParams
    from ttscli.models.qwen3_tts.cuda_frame import CodeFrameKernel, unsupported
    from ttscli.lm.sample import KeyStream, sample
    from ttscli.models.base import LoadOptions

    pipe = load(a.model, options=LoadOptions(random_weights=True))
    cp = pipe.model.talker.code_predictor
    H = cp.model.codec_embedding[0].weight.shape[1]
    out: dict = {"device": str(mx.default_device()), "model": a.model, "checks": []}
    settings = {"greedy": SamplingParams(do_sample=False), "t0.9_k50": SamplingParams(0.9, 50, 1.0),
                "t1.0_nok": SamplingParams(1.0, 0, 1.0)}
    ok = True
    for name, params in settings.items():
        why = unsupported(cp, params)
        if why:
            out["checks"].append({"setting": name, "unsupported": why})
            ok = False
            continue
        kern = CodeFrameKernel(cp, params)
        ref = cp._mlx_frame(params)
        for rows in (1, 2, 4):
            mx.random.seed(rows)
            hidden = mx.random.normal((rows, H))
            c0 = mx.random.normal((rows, H)) * 0.1
            keys = KeyStream(rows).take(16)[1:]
            args = (hidden, c0) if params.greedy else (hidden, c0, keys)
            codes, total, scratch = kern.run(*args)
            rcodes, rtotal = ref(*args)
            mx.eval(codes, total, scratch, rcodes, rtotal)
            # the MLX frame fed the kernel's codes: its last logits see exactly the kernel's inputs
            seen = {}

            def replay(j, logits, codes=codes, seen=seen):
                seen[j] = logits
                return codes[:, j]
            cp.frame_with(hidden, c0, replay)
            kl = kern.last_logits(scratch, rows)
            rl = seen[len(cp.lm_head) - 1]
            # the same replay in float32 on the CPU: the reference both GPU paths are measured from
            cpu_seen = {}
            try:
                with mx.stream(mx.cpu):
                    def replay_cpu(j, logits, codes=codes, cpu_seen=cpu_seen):
                        cpu_seen[j] = logits
                        return codes[:, j]
                    cp.frame_with(hidden, c0, replay_cpu)
                    cl = cpu_seen[len(cp.lm_head) - 1]
                    mx.eval(cl)
                cpu = {"kernel_vs_cpu_max_abs": float(mx.abs(kl - cl).max().item()),
                       "mlx_gpu_vs_cpu_max_abs": float(mx.abs(rl - cl).max().item())}
            except Exception as e:  # noqa: BLE001 - a check script reports what it could not do
                cpu = {"cpu_reference": f"failed: {e}"}
            rec = {"setting": name, "rows": rows,
                   "codes_equal": int((codes == rcodes).sum().item()), "codes": rows * len(cp.lm_head),
                   "total_max_abs": float(mx.abs(total - rtotal).max().item()),
                   "last_logits_max_abs": float(mx.abs(kl - rl).max().item()),
                   "last_logits_scale": float(mx.abs(rl).max().item()), **cpu}
            if not params.greedy:
                noise = mx.vmap(lambda k, r=rows: mx.random.gumbel((r, cp.lm_head[0].weight.shape[0]), key=k))(keys)
                per = mx.stack([mx.random.gumbel((rows, cp.lm_head[0].weight.shape[0]), key=keys[j])
                                for j in range(keys.shape[0])])
                rec["noise_equal"] = bool(mx.array_equal(noise, per).item())
                # the kernel's draw against sample() on the replayed logits of each codebook
                rec["draws_equal_given_logits"] = int(sum(
                    int((sample(seen[j], params, keys[j]) == codes[:, j]).sum().item()) for j in seen))
            out["checks"].append(rec)
            print(json.dumps(rec), flush=True)
    sub = SamplingParams(0.9, 50, 1.0)
    kern = CodeFrameKernel(cp, sub)
    ref = cp._mlx_frame(sub)
    hidden = mx.random.normal((1, H))
    c0 = mx.random.normal((1, H)) * 0.1
    keys = KeyStream(0).take(16)[1:]
    mx.eval(hidden, c0, keys)
    out["timing_ms"] = {"kernel": timed(lambda: kern(hidden, c0, keys), a.reps),
                        "mlx_compiled": timed(lambda: ref(hidden, c0, keys), a.reps),
                        "kernel_again": timed(lambda: kern(hidden, c0, keys), a.reps)}
    print(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

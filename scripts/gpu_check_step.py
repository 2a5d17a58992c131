"""The one-kernel decode step (ttscli.lm.cuda_step) against MLX's compiled step and against float32
on the CPU, on a GPU, random weights at the real dimensions (the Qwen3-TTS talker, Chatterbox's T3 or Breeze's
backbone); then both timed.

    python scripts/gpu_check_step.py [--model qwen3-tts-0.6b-base] [--steps 20] [--reps 30]

Per row count: a 200-position prefill into two identical caches, then ``--steps`` steps on the
same random inputs through each path: the largest logit/hidden difference per step, argmax
agreement, and the caches' new positions; the same steps on the CPU (float32) give the
reference both GPU paths are measured from. Prints JSON; exit status 1 when the kernel's argmax
disagrees with the CPU's where the CPU's top two logits are further apart than twice the error.
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
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()

    from ttscli.api import load
    from ttscli.lm import DecoderLM, MLXCodeDecoder, cuda_step
    from ttscli.lm.model import LMAttention
    from ttscli.models.base import LoadOptions

    pipe = load(a.model, options=LoadOptions(random_weights=True))
    # the code decoder's LM-head model: Qwen3-TTS's talker, Chatterbox's T3, Breeze's model
    model = getattr(pipe, "model", None)
    talker = getattr(model, "talker", None) or getattr(pipe, "t3", None) or model
    dec = MLXCodeDecoder(talker)
    lm, head = talker.step_parts()
    H = lm.args.hidden_size
    out: dict = {"device": str(mx.default_device()), "model": a.model,
                 "unsupported": cuda_step.unsupported(lm, head, 1), "checks": []}
    ok = out["unsupported"] is None
    for rows in (1, 2) if ok else ():
        mx.random.seed(rows)
        emb = mx.random.normal((rows, 200, H)) * 0.5
        xs = [mx.random.normal((rows, 1, H)) * 0.5 for _ in range(a.steps)]
        mx.eval(emb, xs)
        ca, cb = dec.new_cache(), dec.new_cache()
        mx.eval(dec.prefill(emb, ca), dec.prefill(emb, cb), [c.state for c in ca + cb])
        # float32 on the CPU through the plain layer path (no GPU-only kernels of ours)
        switches = (DecoderLM.flat_decode, DecoderLM.fused_norms,
                    LMAttention.fused_qk_rope, LMAttention.fused_attention)
        DecoderLM.flat_decode = DecoderLM.fused_norms = LMAttention.fused_qk_rope = LMAttention.fused_attention = False
        try:
            with mx.stream(mx.cpu):
                cc = talker.new_cache()
                ref = [talker(emb, cc)]
                ref += [talker(x, cc) for x in xs]
                mx.eval(ref)
        finally:
            (DecoderLM.flat_decode, DecoderLM.fused_norms, LMAttention.fused_qk_rope,
             LMAttention.fused_attention) = switches
        rec = {"rows": rows, "steps": []}
        for i, x in enumerate(xs):
            MLXCodeDecoder.step_kernel = False
            la, ha = dec.step(x, ca)
            MLXCodeDecoder.step_kernel = True
            lb, hb = dec.step(x, cb)
            lc, hc = ref[i + 1]
            mx.eval(la, ha, lb, hb)
            rec["steps"].append({
                "kernel_vs_cpu_logits": float(mx.abs(lb - lc).max().item()),
                "mlx_gpu_vs_cpu_logits": float(mx.abs(la - lc).max().item()),
                "kernel_vs_cpu_hidden": float(mx.abs(hb - hc).max().item()),
                "argmax_equal": bool(mx.array_equal(lb.argmax(-1), lc.argmax(-1)).item()),
                "mlx_gpu_argmax_equal": bool(mx.array_equal(la.argmax(-1), lc.argmax(-1)).item()),
                "kernel_vs_mlx_gpu_argmax_equal": bool(mx.array_equal(lb.argmax(-1), la.argmax(-1)).item()),
                # the CPU's top-2 gap: a disagreement inside the GPU paths' error is a near-tie
                "cpu_top2_gap": float((lambda t: (t[:, -1] - t[:, -2]).min())(mx.sort(lc, axis=-1)).item()),
                "logits_scale": float(mx.abs(lc).max().item())})
            st = rec["steps"][-1]
            # a disagreement counts unless the CPU's top two are closer than the GPU paths' error
            ok &= st["argmax_equal"] or st["cpu_top2_gap"] < 2 * st["kernel_vs_cpu_logits"]
        MLXCodeDecoder.step_kernel = False
        n = ca[0].offset
        rec["cache_new_positions_max_abs"] = max(
            float(mx.abs(p.keys[..., 200:n, :] - q.keys[..., 200:n, :]).max().item()) for p, q in zip(ca, cb))
        rec["worst"] = {k: max(s[k] for s in rec["steps"]) for k in
                        ("kernel_vs_cpu_logits", "mlx_gpu_vs_cpu_logits", "kernel_vs_cpu_hidden")}
        out["checks"].append(rec)
        print(json.dumps({k: v for k, v in rec.items() if k != "steps"}), flush=True)
    if ok:
        cache = dec.new_cache()
        emb = mx.random.normal((1, 200, H)) * 0.5
        x = mx.random.normal((1, 1, H)) * 0.5
        mx.eval(dec.prefill(emb, cache), x, [c.state for c in cache])

        def step(kernel: bool):
            MLXCodeDecoder.step_kernel = kernel
            return list(dec.step(x, cache))
        out["timing_ms"] = {"kernel": timed(lambda: step(True), a.reps),
                            "mlx_compiled": timed(lambda: step(False), a.reps),
                            "kernel_again": timed(lambda: step(True), a.reps)}
        MLXCodeDecoder.step_kernel = False
    print(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

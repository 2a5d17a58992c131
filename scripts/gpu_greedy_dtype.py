"""Greedy Qwen3-TTS frames of the tiny parity fixture in a given compute dtype, against the
upstream golden (``ttscli parity`` loads float32 only).  On a GPU the code decoder is the
compiled one (fused projections, compiled talker step and code-predictor frame), so this is
the check that bf16 on the GPU leaves greedy output unchanged.

    python scripts/gpu_greedy_dtype.py [--dtype bfloat16] [--model-dir DIR] [--golden NPZ]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import ttscli  # noqa: F401  (BLAS before mlx)

# isort: split
import mlx.core as mx

from ttscli.lm import MLXCodeDecoder
from ttscli.models.qwen3_tts.load import load_model, load_tokenizer
from ttscli.models.qwen3_tts.parity import greedy_frames, prompt_from_case, read_golden, zero_eos_row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--model-dir", type=Path, default=ROOT / "tests/fixtures/parity/qwen3-tiny-base")
    ap.add_argument("--golden", type=Path, default=ROOT / "tests/fixtures/parity/qwen3-tiny-base.npz")
    a = ap.parse_args()
    g = read_golden(a.golden)
    model, gen = load_model(a.model_dir, a.dtype)
    if bool(g.get("greedy/zero_eos_row", False)):
        zero_eos_row(model)
    prompt = prompt_from_case(model, load_tokenizer(a.model_dir), g["case"])
    ref = g["greedy/codes"]
    dec = MLXCodeDecoder(model.talker)
    ours = greedy_frames(model, dec, prompt, gen, len(ref))
    n = min(len(ours), len(ref))
    same = int((ours[:n] == ref[:n]).all(axis=1).sum())
    from ttscli.models.qwen3_tts import cuda_frame
    from ttscli.lm.sample import SamplingParams

    frame = cuda_frame.unsupported(model.talker.code_predictor, SamplingParams(do_sample=False)) or "one kernel"
    print(json.dumps({"dtype": a.dtype, "device": str(mx.default_device()), "compiled": dec.compiled,
                      "code_predictor_frame": frame if model.talker.code_predictor.one_kernel_frame is not False
                      else "mlx (switched off)",
                      "talker_step": "one kernel" if dec._step_kernel(1) is not None else "mlx",
                      "frames_equal": same, "golden_frames": len(ref),
                      "ours_frames": len(ours)}))
    return 0 if same == len(ref) == len(ours) else 1


if __name__ == "__main__":
    raise SystemExit(main())

#!/bin/bash
# Issue 19: the code predictor's frame as one CUDA kernel (ttscli.lm.cuda_frame,
# CodePredictor.one_kernel_frame) against the compiled MLX frame (variants mlx, kernel; "both" adds
# the talker step as one kernel, ttscli.lm.cuda_step, checked first with CHECK_STEP=1), on the device after
# scripts/gpu_figures.sh's install (STEPS=none). The kernel checked against the MLX frame
# (scripts/gpu_check_frame.py), the tiny fixture's greedy frames against the upstream golden with
# and without it, then the frame bench with each (interleaved, ROUNDS rounds) and mlx-audio's frame.
# Writes $OUT/check.json, greedy_*.json, bench_*.json, peer.json, log.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/root/site:$PWD TTSCLI_MLX_AUDIO_PYTHON=python3
Q=qwen3-tts-0.6b-base
SET='import sys
from ttscli.lm import MLXCodeDecoder
from ttscli.models.qwen3_tts.code_predictor import CodePredictor
v = sys.argv.pop(1)
CodePredictor.one_kernel_frame = None if v in ("kernel", "both") else False
MLXCodeDecoder.step_kernel = v == "both"'
as_variant() {  # as_variant mlx|kernel SCRIPT|-m ARGS...: a script or the CLI with the switch set
  local v=$1 what=$2; shift 2
  if [ "$what" = cli ]; then
    timeout 200 python3 -c "$SET"'
from ttscli.cli import main
sys.argv[0] = "ttscli"
main()' "$v" "$@"
  else
    timeout 120 python3 -c "$SET"'
import runpy
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$v" "$what" "$@"
  fi
}
[ -n "${CHECK-1}" ] && timeout 300 python3 scripts/gpu_check_frame.py --reps ${REPS:-30} > "$OUT/check.json"
[ -n "${CHECK_STEP:-}" ] && for m in ${STEP_MODELS:-$Q chatterbox}; do
  timeout 150 python3 scripts/gpu_check_step.py --model $m --reps ${REPS:-30} > "$OUT/check_step_$m.json"; done
[ -n "${GREEDY-1}" ] && for v in ${GREEDY_VARIANTS:-kernel mlx}; do
  as_variant $v scripts/gpu_greedy_dtype.py --dtype float32 > "$OUT/greedy_$v.json"; done
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in ${VARIANTS:-mlx kernel}; do
    echo "=== bench $v round $r $(date +%T)" >&2
    as_variant $v cli bench $Q --random-weights --repeats ${REPEATS:-3} --max-frames ${FRAMES:-200} --stream \
      --json > "$OUT/bench_${v}_$r.json"
    echo "=== rc=$? at ${SECONDS}s" >&2
  done
done
[ -n "${PEER:-}" ] && timeout 150 python3 scripts/bench_qwen3_peer.py --frames 60 --rounds 3 > "$OUT/peer.json"
find "$OUT" -empty -delete; ls -la "$OUT"

#!/bin/bash
# Issue 19: one-position LM calls on [B, hidden] rows (DecoderLM.flat_decode, the GPU default)
# and our kernels against the [B, 1, hidden] path without them (3d): flat rows alone (flat), with
# the q/k-norm + RoPE kernel (flatk, LMAttention.fused_qk_rope), with it and the residual add +
# RMSNorm kernel (norms, DecoderLM.fused_norms), with those and the one-query attention kernel
# (all: the default, LMAttention.fused_attention), in one run on the device after scripts/gpu_figures.sh's
# install (STEPS=none). Variants interleaved, ROUNDS rounds of the frame bench each; then the
# kernel histogram of each variant, the tiny fixture's greedy frames against the upstream golden
# on the GPU, and mlx-audio's frame beside ours. Writes $OUT/flat_*.json, kernels_*.json, log.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/root/site:$PWD TTSCLI_MLX_AUDIO_PYTHON=python3
Q=qwen3-tts-0.6b-base
SET='import sys
from ttscli.lm import DecoderLM
from ttscli.lm.model import LMAttention
v = sys.argv.pop(1)
DecoderLM.flat_decode = False if v == "3d" else None
LMAttention.fused_qk_rope = None if v in ("flatk", "norms", "all") else False
DecoderLM.fused_norms = None if v in ("norms", "all") else False
LMAttention.fused_attention = None if v == "all" else False'
run_as() {  # run_as 3d|flat|flatk|norms|all ARGS...: the ttscli CLI with the variant's switches
  local v=$1; shift
  timeout 150 python3 -c "$SET"'

from ttscli.cli import main
sys.argv[0] = "ttscli"
main()' "$v" "$@"
}
[ -n "${CHECK:-1}" ] && { timeout 120 python3 scripts/gpu_check_kernels.py; timeout 90 python3 scripts/gpu_greedy_dtype.py --dtype float32; }
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in ${VARIANTS:-3d flat flatk norms all}; do
    echo "=== bench $v round $r $(date +%T)" >&2
    run_as $v bench $Q --random-weights --repeats ${REPEATS:-3} --max-frames ${FRAMES:-200} --stream \
      --json > "$OUT/flat_${v}_$r.json"
    echo "=== rc=$? at ${SECONDS}s" >&2
  done
done
[ -n "${KERNELS:-1}" ] && for v in 3d all; do
  timeout 90 python3 -c "$SET"'
import runpy
sys.argv = ["frame_kernel_labels.py", "--top", "40"]
runpy.run_path("scripts/frame_kernel_labels.py", run_name="__main__")' $v > "$OUT/kernels_$v.json"
done
[ -n "${PEER:-1}" ] && timeout 150 python3 scripts/bench_qwen3_peer.py --frames 60 --rounds 3 > "$OUT/peer.json"
find "$OUT" -empty -delete; ls -la "$OUT"

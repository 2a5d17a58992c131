#!/bin/bash
# Issue 19: does MLX's CUDA-graph batching set the frame time? The same frame bench under MLX's
# own CUDA knobs (mlx/backend/cuda/device.cpp): MLX_USE_CUDA_GRAPHS=0 launches each kernel directly;
# MLX_MAX_OPS_PER_BUFFER sets how many kernels go into one CUDA graph (H100/H200 default 100).
# Run on the device after scripts/gpu_figures.sh's install (STEPS=none), writes $OUT/env_*.json.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/root/site:$PWD
tt=/root/tt
Q=qwen3-tts-0.6b-base
for v in default graphs0 ops20 ops400 ops2000; do
  case $v in
    default) e=() ;;
    graphs0) e=(MLX_USE_CUDA_GRAPHS=0) ;;
    ops20) e=(MLX_MAX_OPS_PER_BUFFER=20) ;;
    ops400) e=(MLX_MAX_OPS_PER_BUFFER=400) ;;
    ops2000) e=(MLX_MAX_OPS_PER_BUFFER=2000) ;;
  esac
  echo "=== $v $(date +%T)" >&2
  timeout 150 env "${e[@]}" $tt bench $Q --random-weights --repeats ${REPEATS:-2} --max-frames ${FRAMES:-100} --json > "$OUT/env_$v.json"
  echo "=== $v rc=$? at ${SECONDS}s" >&2
done

#!/bin/bash
# Issue 19 figures on the lent H200 (see ../shared/gpu/README.md): run in the project root on
# the device machine.  The MLX CUDA wheel travels in 18 MB parts (the shared working tree leaves
# little room in a call): earlier calls copy .gpu/i19/{aa,ab,ac,ad} into /root/stash, this one
# carries .gpu/i19/ae and .gpu/i19/c (mlx-audio 0.6.2's wheel and, under before/, the tree before the
# change).
# Everything lands in $OUT as JSON plus log.txt; each step has its own time limit.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
cat /root/stash/cpart_a[a-d] .gpu/i19/ae/cpart_ae > /root/stash/mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /root/site \
  /root/stash/mlx-0.32.4-*.whl /root/stash/mlx_cuda_13-*.whl .gpu/i19/c/mlx_audio-*.whl || exit 1
export PYTHONUNBUFFERED=1
here=$PWD
printf '#!/bin/bash\nexec python3 -c "import sys; from ttscli.cli import main; sys.argv[0] = \\"ttscli\\"; main()" "$@"\n' > /root/tt
chmod +x /root/tt; tt=/root/tt
# STEPS="after peer ...": run only those steps (default: all)
step() { local name=$1 limit=$2; shift 2; [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]] && return 0
  echo "=== $name" >&2; timeout "$limit" "$@"; echo "=== $name rc=$? at ${SECONDS}s" >&2; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,utilization.gpu --format=csv
export PYTHONPATH=/root/site:$here/.gpu/i19/c/before
cd .gpu/i19/c/before
python3 -c 'import mlx.core as mx; print(mx.__version__, mx.default_device())'
B="bench qwen3-tts-0.6b-base --random-weights --repeats 3 --max-frames 200 --stream --json"
step before 120 $tt $B > "$OUT/before.json"
cd "$here"; export PYTHONPATH=/root/site:$here
step after 120 $tt $B > "$OUT/after.json"
step variants 200 python3 scripts/gpu_frame_variants.py --frames 120 --rounds 2
step after_bf16 100 $tt $B --dtype bfloat16 > "$OUT/after_bf16.json"
step peer 170 python3 scripts/bench_qwen3_peer.py --frames 40 --rounds 2
step greedy_f32 45 python3 scripts/gpu_greedy_dtype.py --dtype float32
step greedy_bf16 45 python3 scripts/gpu_greedy_dtype.py --dtype bfloat16
step parity 60 $tt parity qwen3-tts-0.6b-base --model-dir tests/fixtures/parity/qwen3-tiny-base \
  --golden tests/fixtures/parity/qwen3-tiny-base.npz
step batch 90 $tt bench qwen3-tts-0.6b-base --random-weights --batch 1,4,16,64 --json > "$OUT/batch.json"
python3 - "$OUT" <<'PY'
import json, sys, pathlib
for name in ("before", "after", "after_bf16"):
    p = pathlib.Path(sys.argv[1]) / f"{name}.json"
    try:
        r = json.loads(p.read_text())
    except Exception as e:
        print(name, "no figures", e); continue
    for var, f in r["variants"].items():
        keys = ("frame_ms_p50", "frame_ms_p95", "talker_step_ms", "code_predictor_frame_ms", "rtf", "first_audio_s",
                "prefill_tokens", "frames", "kernels_per_frame", "kernels_talker_step", "kernels_code_predictor_frame")
        print(name, var, {k: round(f[k], 4) for k in keys if k in f})
PY

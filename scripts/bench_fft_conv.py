"""One generator conv on onnxruntime, direct against the FFT convolution the vocoder graphs use
(ttscli.backends.onnx.vocoder.ConvNet.conv_fft): best of ``--repeats`` runs each, interleaved,
and the largest difference relative to the direct conv's peak.

    python scripts/bench_fft_conv.py                      # Kokoro's two generator stages
    python scripts/bench_fft_conv.py --channels 128 --frames 41000 --cases 11,1 7,1

Defaults: 256 channels x 6,800 frames and 128 x 41,000 (Kokoro's stages for 8.5 s of audio),
every (kernel, dilation) of its resblocks. Threads: TTSCLI_ONNX_THREADS or every CPU.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def session(w: dict, k: int, d: int, fft: bool, channels: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from ttscli.backends.onnx.graph import OPSET, Builder, Quant
    from ttscli.backends.onnx.runtime import session_options
    from ttscli.backends.onnx.vocoder import ConvNet

    b = Builder(Quant())
    net = ConvNet(b, w, conv2d=True)
    net.fft_min_channels = 1 if fft else None
    y = net.conv("x", "c", dilation=d, pad=(d * (k - 1) // 2,) * 2)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 1, None])
    g = helper.make_graph(b.nodes, "conv", [x], [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
                          initializer=b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return ort.InferenceSession(m.SerializeToString(), session_options(), providers=["CPUExecutionProvider"])


def best(s, x, repeats: int) -> tuple[float, np.ndarray]:
    y = s.run(None, {"x": x})[0]
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        s.run(None, {"x": x})
        t.append(time.perf_counter() - t0)
    return min(t), y


def main() -> int:
    from ttscli.backends.onnx.vocoder import FFT_BLOCK

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", type=int, nargs="*", default=[256, 128])
    ap.add_argument("--frames", type=int, nargs="*", default=[6800, 41000])
    ap.add_argument("--cases", nargs="*", default=["11,1", "11,3", "11,5", "7,1", "7,3", "7,5", "3,1"])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'channels':>8} {'frames':>7} {'k':>3} {'d':>2} {'direct ms':>10} {'fft ms':>8} {'speed-up':>8} "
          f"{'rel err':>8}  in FFT_BLOCK")
    for C, T in zip(a.channels, a.frames):
        x = rng.standard_normal((1, C, 1, T)).astype(np.float32)
        for case in a.cases:
            k, d = (int(v) for v in case.split(","))
            w = {"c.weight": (rng.standard_normal((C, C, k)) / np.sqrt(C * k)).astype(np.float32),
                 "c.bias": rng.standard_normal(C).astype(np.float32)}
            planned = (k, d) in FFT_BLOCK
            if not planned:                   # an unplanned case: the smallest power of two >= twice the span
                FFT_BLOCK[(k, d)] = 1 << int(np.ceil(np.log2(2 * (d * (k - 1) + 1))))
            try:
                direct, fft = session(w, k, d, False, C), session(w, k, d, True, C)
            finally:
                if not planned:
                    del FFT_BLOCK[(k, d)]
            times = {"direct": [], "fft": []}
            for _ in range(2):                # interleaved rounds
                for name, s in (("direct", direct), ("fft", fft)):
                    t, y = best(s, x, a.repeats)
                    times[name].append((t, y))
            td = min(t for t, _ in times["direct"])
            tf = min(t for t, _ in times["fft"])
            yd, yf = times["direct"][0][1], times["fft"][0][1]
            err = float(np.abs(yd - yf).max() / np.abs(yd).max())
            print(f"{C:8d} {T:7d} {k:3d} {d:2d} {td * 1e3:10.1f} {tf * 1e3:8.1f} {td / tf:7.2f}x {err:8.1e}  "
                  f"{planned}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Re-primed fixed-slot speech decoding vs one pass, at the released decoder's dimensions.

Random weights (no download), 300 random frames; prints re-primes and max abs error per
capacity. Run: .venv/bin/python scripts/reprime_real_dims.py
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ttscli  # noqa: F401  (BLAS preload before mlx)
import numpy as np

from ttscli.codecs.qwen3_12hz.streaming import StreamingDecoder
from ttscli.codecs.qwen3_12hz.weights import build_random_decoder

dec = build_random_decoder()
a = dec.args
print(f"window {a.sliding_window}, layers {a.num_hidden_layers}")
codes = np.random.default_rng(0).integers(0, a.codebook_size, size=(300, a.num_quantizers)).astype(np.int32)
ref = np.array(dec.decode(codes))
for cap in (256, 100):
    s = StreamingDecoder(dec, 3, 25, kv_capacity=cap)
    t = time.perf_counter()
    wav = np.concatenate(s.push(codes) + [s.flush()])
    print(f"capacity {cap}: {s.reprimes} re-primes, max abs {np.abs(wav - ref).max():.2e} "
          f"(signal rms {np.sqrt((ref ** 2).mean()):.3f}), {time.perf_counter() - t:.1f} s")

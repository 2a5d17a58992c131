"""Speech-decoder speed at the released dimensions with random weights.

    .venv/bin/python benchmarks/bench_speech_decoder.py [--frames 50] [--chunk 25] [--repeat 3] [--json]

Reports ms per 80 ms frame and the decoder-only real-time factor (compute seconds per second of
audio; < 1 is faster than real time) for a streamed decode (first chunk, then ``--chunk``)
and the time to the first chunk's audio. Also counts the multiply-accumulates per frame, so
the achieved GFLOP/s can be compared with the machine's BLAS.
"""
from __future__ import annotations

import argparse
import json
import time

import ttscli  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx
import numpy as np

from ttscli.codecs.qwen3_12hz.decoder import Sequential, SpeechDecoder
from ttscli.codecs.qwen3_12hz.streaming import StreamingDecoder
from ttscli.codecs.qwen3_12hz.weights import build_random_decoder


def macs_per_frame(dec: SpeechDecoder) -> int:
    """Multiply-accumulates of the GEMM-shaped work for one frame (convs, linears, attention excluded)."""
    a = dec.args
    steps = 1
    total = a.codebook_dim * a.latent_dim * 3                      # pre_conv
    per_layer = (a.hidden_size * a.head_dim * (a.num_attention_heads * 2 + a.num_key_value_heads * 2)
                 + 3 * a.hidden_size * a.intermediate_size)
    total += a.num_hidden_layers * per_layer + 2 * a.latent_dim * a.hidden_size
    for f in a.upsampling_ratios:
        total += steps * a.latent_dim * a.latent_dim * f
        steps *= f
        total += steps * 8 * a.latent_dim * a.latent_dim          # pwconv1 + pwconv2
    total += steps * 7 * a.latent_dim * a.decoder_dim
    for m in dec.decoder:
        if isinstance(m, Sequential):
            t = m.block[1]
            cin, cout = t.conv.weight.shape[:2]                    # PyTorch layout [in, out, K]
            total += steps * cin * t.blocks * t.stride * cout
            steps *= t.stride
            total += steps * 3 * 8 * cout * cout
    return total


def run(frames: int = 50, chunk: int = 25, first: int = 3, repeat: int = 3, seed: int = 0) -> dict:
    dec = build_random_decoder("float32", seed=seed)
    codes = np.random.default_rng(seed).integers(0, dec.args.codebook_size, (frames, dec.args.num_quantizers))
    StreamingDecoder(dec, first, chunk).push(codes[: first + chunk])    # warm-up: compile, allocate
    best, first_best, cpu_best = float("inf"), float("inf"), float("inf")
    for _ in range(repeat):
        s = StreamingDecoder(dec, first, chunk)
        c0 = time.process_time()
        t0 = time.perf_counter()
        got = s.push(codes[:first])
        t_first = time.perf_counter() - t0
        got += s.push(codes[first:])
        tail = s.flush()
        total = time.perf_counter() - t0
        cpu_best = min(cpu_best, time.process_time() - c0)
        assert sum(len(g) for g in got) + (0 if tail is None else len(tail)) == frames * dec.samples_per_frame
        best, first_best = min(best, total), min(first_best, t_first)
    macs = macs_per_frame(dec)
    frame_s = dec.samples_per_frame / dec.sample_rate
    return {
        "frames": frames, "first_chunk_frames": first, "chunk_frames": chunk,
        "ms_per_frame": 1e3 * best / frames,
        "rtf": best / (frames * frame_s),
        # CPU seconds of this process (all its threads): on a shared machine, wall time also
        # counts other processes' turns on the cores
        "cpu_ms_per_frame": 1e3 * cpu_best / frames,
        "first_chunk_ms": 1e3 * first_best,
        "gmacs_per_frame": macs / 1e9,
        "gflops_achieved": 2 * macs * frames / best / 1e9,
        "mlx": mx.__version__,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=50)
    p.add_argument("--chunk", type=int, default=25)
    p.add_argument("--first", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    r = run(a.frames, a.chunk, a.first, a.repeat)
    if a.json:
        print(json.dumps(r))
    else:
        print(f"speech decoder (real dims, random f32): {r['ms_per_frame']:.1f} ms/frame "
              f"(CPU {r['cpu_ms_per_frame']:.1f}), RTF {r['rtf']:.2f}, "
              f"first {r['first_chunk_frames']}-frame chunk {r['first_chunk_ms']:.0f} ms, "
              f"{r['gmacs_per_frame']:.2f} GMAC/frame -> {r['gflops_achieved']:.0f} GFLOP/s")


if __name__ == "__main__":
    main()

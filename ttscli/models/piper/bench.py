"""Speed of our MLX Piper against piper-tts (onnxruntime) on the same text, in one process.

``bench()`` is what ``ttscli bench piper-joe`` calls; ``bench_convs()`` times the HiFi-GAN
conv forms (MLX's own conv1d vs our GEMM versions) at the real decoder shapes.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

DEFAULT_TEXT = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins "
                "with a single step, and every long road starts somewhere.")


def _timed(fn, runs: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench(text: str = DEFAULT_TEXT, checkpoint: Path | None = None, runs: int = 3,
          reference: bool = True, random_weights: bool = False, seed: int = 0,
          sampling: dict | None = None) -> dict:
    """Median wall time / real-time factor of ours and (if installed) piper-tts on ``text``.

    RTF = compute seconds / audio seconds (lower is faster). ``ratio`` = ours / piper-tts.
    """
    from types import SimpleNamespace

    from ttscli import _blas
    from ttscli.generate import Request
    from ttscli.models.base import LoadOptions

    from . import default_voice_dir, find_onnx, load_pipeline

    checkpoint = Path(checkpoint) if checkpoint else default_voice_dir()
    spec = SimpleNamespace(id="piper-joe", sample_rate=None, defaults={})
    pipe = load_pipeline(spec, checkpoint, LoadOptions(random_weights=random_weights))
    req = Request(text=text, seed=seed, sampling=dict(sampling or {}))
    list(pipe.generate(req))                                         # warm-up
    ours_s, chunks = _timed(lambda: list(pipe.generate(req)), runs)
    audio_s = sum(len(c) for c in chunks) / pipe.sample_rate
    result = {
        "text_chars": len(text),
        "blas": _blas.loaded or "mlx builtin",
        "audio_s": audio_s,
        "ours_s": ours_s,
        "ours_rtf": ours_s / audio_s,
        "ours_first_audio_s": pipe.stats.first_audio_s,
        "ours_encoder_durations_s": pipe.stats.prefill_s,
        "ours_flow_decoder_s": pipe.stats.decoder_s,
    }
    if reference and not random_weights:
        try:
            from piper import PiperVoice, SynthesisConfig
        except ImportError:
            result["piper_tts"] = "not installed"
            return result
        cfg = pipe.settings(req)
        voice = PiperVoice.load(find_onnx(checkpoint))
        syn = SynthesisConfig(noise_scale=cfg["noise_scale"], noise_w_scale=cfg["noise_w"],
                              length_scale=cfg["length_scale"])
        list(voice.synthesize(text, syn))
        ref_s, ref_chunks = _timed(lambda: list(voice.synthesize(text, syn)), runs)
        ref_audio_s = sum(len(c.audio_float_array) for c in ref_chunks) / voice.config.sample_rate
        result.update({
            "piper_tts_s": ref_s,
            "piper_tts_audio_s": ref_audio_s,
            "piper_tts_rtf": ref_s / ref_audio_s,
            "ratio": (ours_s / audio_s) / (ref_s / ref_audio_s),
        })
    return result


def bench_convs(frames: int = 200, runs: int = 5) -> list[dict]:
    """HiFi-GAN conv layers of joe-medium at ``frames`` latent frames: mx.conv1d vs GEMM form."""
    from .conv import conv1d_gemm, conv_transpose1d_gemm

    rows = []
    rng = np.random.default_rng(0)

    def run(fn):
        mx.eval(fn())
        return _timed(lambda: mx.eval(fn()), runs)[0]

    t = frames
    ch = 256
    for u, k in [(8, 16), (8, 16), (4, 8)]:
        x = mx.array(rng.standard_normal((1, t, ch)).astype(np.float32))
        w = mx.array(rng.standard_normal((ch // 2, k, ch)).astype(np.float32) * 0.05)
        p = (k - u) // 2
        rows.append({"layer": f"conv_transpose k{k} s{u} {ch}->{ch // 2} T{t}",
                     "mlx_s": run(lambda: mx.conv_transpose1d(x, w, stride=u, padding=p)),
                     "gemm_s": run(lambda: conv_transpose1d_gemm(x, w, None, u, p))})
        t, ch = t * u, ch // 2
        for ks, d in [(3, 2), (5, 6), (7, 12)]:
            x = mx.array(rng.standard_normal((1, t, ch)).astype(np.float32))
            w = mx.array(rng.standard_normal((ch, ks, ch)).astype(np.float32) * 0.05)
            pad = d * (ks - 1) // 2
            rows.append({"layer": f"conv k{ks} d{d} {ch}ch T{t}",
                         "mlx_s": run(lambda: mx.conv1d(x, w, padding=pad, dilation=d)),
                         "gemm_s": run(lambda: conv1d_gemm(x, w, None, d, pad))})
    return rows


if __name__ == "__main__":
    import json
    import sys

    if "--convs" in sys.argv:
        for row in bench_convs():
            print(json.dumps(row))
    else:
        print(json.dumps(bench(), indent=1))

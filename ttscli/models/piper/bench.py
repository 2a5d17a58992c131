"""The piper family's convert and bench hooks (declared in family.py; ``parity`` lives in parity.py)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError


def convert_mlx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool = False, q_bits: int = 8,
                q_group_size: int = 64, dtype: str | None = None, progress=None) -> Path:
    """``ttscli convert piper-joe --to mlx -o DIR``: the ONNX initializers as safetensors."""
    from . import convert_onnx, find_onnx

    if quantize:
        raise UsageError("Piper voices are small (63 MB) and run in float32; drop -q")
    if dtype not in (None, "float32"):
        raise UsageError("Piper weights convert to float32 only; drop --dtype")
    steps = iter(range(1, 5))
    say = (lambda msg: progress(next(steps, 4), 4, msg)) if progress else None
    return convert_onnx(find_onnx(checkpoint), Path(out_dir), progress=say)


def bench_peer(spec, checkpoint: Path, text: str, repeats: int) -> dict:
    """``ttscli bench piper-joe --peer piper-tts``: piper-tts (onnxruntime) on the same text."""
    try:
        from piper import PiperVoice
    except ImportError as err:
        raise UsageError("piper-tts is not installed: pip install piper-tts") from err
    from . import find_onnx

    voice = PiperVoice.load(find_onnx(checkpoint))
    list(voice.synthesize(text))                                      # warm-up
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        c0 = time.process_time()
        first, n = None, 0
        for chunk in voice.synthesize(text):
            if first is None:
                first = time.perf_counter() - t0
            n += len(chunk.audio_float_array)
        total = time.perf_counter() - t0
        runs.append({"total_s": total, "cpu_s": time.process_time() - c0, "first_audio_s": first,
                     "audio_s": n / voice.config.sample_rate})
    med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    med["rtf"] = med["total_s"] / med["audio_s"]
    return med


def bench_components(pipe, req) -> dict:
    """Stage timings of the last run (seconds)."""
    s = pipe.stats
    return {"phonemize_s": s.extra.get("phonemize_s"), "encoder_durations_s": s.prefill_s,
            "flow_decoder_s": s.decoder_s, "sentences": s.extra.get("sentences")}

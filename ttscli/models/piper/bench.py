"""Bench hooks: the stage times of the last run, and piper-tts on the same text as a peer."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError


def bench_peer(spec, checkpoint: Path, text: str, repeats: int) -> dict:
    """``ttscli bench piper-joe --peer piper-tts``: piper-tts (onnxruntime) on the same text."""
    try:
        from piper import PiperVoice
    except ImportError as err:
        raise UsageError("piper-tts is not installed: pip install piper-tts") from err
    from .load import find_onnx

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

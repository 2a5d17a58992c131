"""Bench hooks: the stage figures of the last run (``ttscli bench chatterbox``). The comparison with
mlx-audio needs its own environment and lives outside the package (benchmarks/chatterbox_mlx_audio.py)."""
from __future__ import annotations


def bench_components(pipe, req) -> dict:
    """The last run's stage figures."""
    # t3_s and s3gen_flow_s / _hift_s / _passes come as Stats.extra, the median
    # of the runs (T3 and S3Gen are timed apart, added up over the chunks of a stream)
    s = pipe.stats
    steps = sum(s.frame_s)
    audio_s = s.decoder_frames / 25.0
    return {"t3_prefill_s": s.prefill_s,
            "t3_tokens_per_s": (len(s.frame_s) / steps) if steps else None,
            "s3gen_s_per_audio_s": (s.decoder_s / audio_s) if audio_s and s.decoder_s else None,
            # a number, as the bench table shows only numbers: which runtime the flow estimator ran on
            "s3gen_flow_onnx": float(pipe.backends.get("flow_estimator") == "onnx"),
            "s3gen_hift_onnx": float(pipe.backends.get("vocoder") == "onnx")}

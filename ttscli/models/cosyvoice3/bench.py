"""Bench hooks: the stage figures of the last run (LM prefill and steps, the DiT flow, the causal
HiFT), and upstream's PyTorch code as a peer, run by benchmarks/bench_cosyvoice3_peer.py in the
Python environment that has it (with random weights at the published size, as ours)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError
from ttscli.models.base import Request, run_peer_script

PEER_SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_cosyvoice3_peer.py"
PEER_PYTHON = "TTSCLI_COSYVOICE_PYTHON"
PEER_SRC = "COSYVOICE_SRC"
PEER_TIMEOUT_S = 3600


def bench_components(pipe, req) -> dict[str, float]:
    s = pipe.stats
    steps = sum(s.frame_s)
    audio_s = s.decoder_frames / pipe.args.token_frame_rate
    return {"flow_onnx": float(str(pipe.backends.get("flow_estimator", "mlx")).startswith("onnx")),
            "lm_prefill_s": s.prefill_s,
            "lm_tokens_per_s": (len(s.frame_s) / steps) if steps else None,
            "token2wav_s_per_audio_s": (s.decoder_s / audio_s) if audio_s and s.decoder_s else None}


def bench_peer(spec, checkpoint: Path | None, text: str, repeats: int, threads: int | None = None,
               frames: int = 50) -> dict:
    """``ttscli bench cosyvoice3 --random-weights --peer pytorch``: upstream's CosyVoice3LM,
    CausalMaskedDiffWithDiT and CausalHiFTGenerator built from its own cosyvoice3.yaml (the
    published sizes) with random weights, on the same text length and the same number of speech
    tokens (stops masked), one-shot. ``$TTSCLI_COSYVOICE_PYTHON`` names a Python with torch and
    upstream's dependencies, ``$COSYVOICE_SRC`` the upstream checkout (scripts/goldens/
    cosyvoice_fetch.sh); never ttscli dependencies. Medians over ``repeats`` runs after a warm-up."""
    python, src = os.environ.get(PEER_PYTHON), os.environ.get(PEER_SRC)
    if not python or not src:
        raise UsageError(f"--peer pytorch runs upstream's code in another Python: set {PEER_PYTHON} to the python "
                         f"of scripts/reference-venv.sh's environment and {PEER_SRC} to a CosyVoice checkout "
                         "(scripts/goldens/cosyvoice_fetch.sh)")
    args = {"text": text, "repeats": repeats, "frames": frames, "threads": threads, "src": src}
    return run_peer_script("pytorch", python, PEER_SCRIPT, args, PEER_TIMEOUT_S)


def bench_batch(pipe, sizes: list[int], frames: int, text: str, seed: int = 0, warmup: int = 1) -> dict[str, dict]:
    """``ttscli bench cosyvoice3 --batch``: ``B`` one-shot rows of ``frames`` speech tokens each
    through the pipeline's rows, per size (each row seeded on its own: ``seed + row``).

    Random weights seldom stop where real ones do, so rows run with ignore_eos and end together.
    The step figures are the batched LM steps alone (the first step, which prefills every row,
    and the last, which runs each row's flow and HiFT, are left out of the median); the wall time
    and the audio rate cover the whole: prefill, steps, and the flow + HiFT of every row, which
    batching does not share (``token2wav_s``)."""
    out = {}
    for B in sizes:
        for _ in range(warmup + 1):
            gen = pipe.rows()
            rows = [gen.start(Request(text=text, seed=seed + i, max_frames=frames, ignore_eos=True)) for i in range(B)]
            steps, t0 = [], time.perf_counter()
            while not all(r.done for r in rows):
                ts = time.perf_counter()
                gen.step([r for r in rows if not r.done])
                steps.append(time.perf_counter() - ts)
            wall = time.perf_counter() - t0
            failed = next((r.error for r in rows if r.error is not None), None)
            if failed is not None:
                raise failed
            audio_s = sum(len(gen.take(r)) for r in rows) / pipe.sample_rate
        step_ms = float(np.median(steps[1:-1] or steps) * 1e3)
        out[f"batch {B}"] = {
            "step_ms_p50": step_ms,
            "frame_ms_per_row": step_ms / B,
            "prefill_s": steps[0],
            "token2wav_s": steps[-1],
            "frames_per_s": B * frames / wall,
            "audio_s_per_s": audio_s / wall,
            "total_s": wall,
        }
    base = out[f"batch {sizes[0]}"]["audio_s_per_s"]
    for v in out.values():
        v["speedup_vs_first"] = v["audio_s_per_s"] / base
    return out

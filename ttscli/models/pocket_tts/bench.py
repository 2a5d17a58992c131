"""Bench hooks: the flow LM step, the flow head and the Mimi decoder's frame, timed apart; and
upstream's package (pocket-tts, PyTorch) as a peer, run by benchmarks/bench_pocket_peer.py in the
Python environment that has it."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError
from ttscli.models.base import run_peer_script

PEER_SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_pocket_peer.py"
PEER_PYTHON = "TTSCLI_POCKET_PYTHON"
PEER_TIMEOUT_S = 1800


def bench_components(pipe, req) -> dict[str, float]:
    """Median times of the three stages of a frame, each synced, after a 200-token prefill. The
    flow LM on onnxruntime runs its step and the flow head in one graph: ``lm_step_ms`` is then
    both, and ``flow_head_ms`` is left out."""
    import mlx.core as mx

    lm, mimi, dec = pipe.model.flow_lm, pipe.model.mimi, pipe.code_decoder
    n = int(getattr(req, "prompt_tokens", 200))
    cache = dec.new_cache()
    tokens = mx.array(np.arange(n, dtype=np.int32)[None] % lm.args.n_bins)
    mx.eval(dec.prefill(lm.text_embeddings(tokens), cache))
    stream = mimi.new_stream()
    latent = None
    fused = hasattr(dec, "frame")
    step_ms, flow_ms, mimi_ms = [], [], []
    for i in range(10):
        noise = mx.random.normal((1, pipe.args.latent_dim), key=mx.random.key(i))
        mx.eval(noise)
        t = time.perf_counter()
        if fused:
            latent = pipe.frame(lm.latent_embeddings(latent), cache, noise, 1)[2][:, None]
            mx.eval(latent)
            t1 = t2 = time.perf_counter()
        else:
            _, h = dec.step(lm.latent_embeddings(latent), cache)
            mx.eval(h)
            t1 = time.perf_counter()
            latent = pipe.latent(h, noise, 1)[:, None]
            mx.eval(latent)
            t2 = time.perf_counter()
        mx.eval(mimi.decode(latent * lm.emb_std + lm.emb_mean, stream))
        t3 = time.perf_counter()
        if i >= 2:
            step_ms.append((t1 - t) * 1e3)
            flow_ms.append((t2 - t1) * 1e3)
            mimi_ms.append((t3 - t2) * 1e3)
    figures = {"lm_step_ms": float(np.median(step_ms)), "mimi_frame_ms": float(np.median(mimi_ms))}
    return figures if fused else {**figures, "flow_head_ms": float(np.median(flow_ms))}


def bench_peer(spec, checkpoint: Path | None, text: str, repeats: int, threads: int | None = None) -> dict:
    """``ttscli bench pocket-tts --random-weights --peer pocket-tts``: upstream's TTSModel at
    english.yaml's size with random weights, on the same text, the same 50 frames (its EOS
    disabled) and no voice prompt, as our random-weights run; ``$TTSCLI_POCKET_PYTHON`` names a
    Python with pocket-tts and torch (never a ttscli dependency; scripts/reference-venv.sh
    builds one). Figures are medians over ``repeats`` runs after one warm-up."""
    python = os.environ.get(PEER_PYTHON)
    if not python:
        raise UsageError(f"--peer pocket-tts runs upstream's package in another Python: set {PEER_PYTHON} to "
                         "the python of an environment with pocket-tts and torch (scripts/reference-venv.sh)")
    args = {"text": text, "repeats": repeats, "frames": 50, "threads": threads}
    return run_peer_script("pocket-tts", python, PEER_SCRIPT, args, PEER_TIMEOUT_S)

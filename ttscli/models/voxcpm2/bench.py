"""Bench hooks: one patch's three stages timed apart (the two LMs' step, the diffusion head, the
AudioVAE's decode); and upstream's package (voxcpm, PyTorch) as a peer, run by
benchmarks/bench_voxcpm2_peer.py in the Python environment that has it."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError
from ttscli.models.base import run_peer_script

PEER_SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_voxcpm2_peer.py"
PEER_PYTHON = "TTSCLI_VOXCPM_PYTHON"
PEER_TIMEOUT_S = 3600
# as ttscli bench's random-weights run: 50 frames (patches), the stop ignored; a run with
# --max-frames N sets the same N here, since `ttscli bench` hands a peer no frame limit
PEER_PATCHES = "TTSCLI_VOXCPM_PEER_PATCHES"
DEFAULT_PEER_PATCHES = 50


def bench_components(pipe, req) -> dict[str, float]:
    """Median times of the stages of a patch, each synced, after a prefill of ``prompt_tokens``
    text positions (default 200)."""
    import mlx.core as mx

    from ttscli.codecs.audiovae import DecodeStream

    from .generate import Prompt, prefill, step

    m, a = pipe.model, pipe.args
    n = int(getattr(req, "prompt_tokens", 200) or 200)
    P, D = a.patch_size, a.feat_dim
    tokens = mx.array((np.arange(n, dtype=np.int32) % 256)[None])
    pre = prefill(m, Prompt(tokens, mx.ones((1, n)), mx.zeros((1, n, P, D)), mx.zeros((1, n))))
    lm_hidden, res_hidden, cond = pre.lm_hidden, pre.residual_hidden, mx.zeros((1, P, D))
    stream = DecodeStream(m.audio_vae)
    lm_ms, dit_ms, vae_ms = [], [], []
    for i in range(8):
        t = time.perf_counter()
        patch = m.feat_decoder(m.dit_condition(lm_hidden, res_hidden), cond,
                               mx.random.normal((1, P, D), key=mx.random.key(i)), 10, 2.0)
        mx.eval(patch)
        t1 = time.perf_counter()
        lm_hidden, res_hidden = step(m, patch, pre.caches)
        mx.eval(lm_hidden, res_hidden)
        t2 = time.perf_counter()
        mx.eval(stream.push(patch.astype(mx.float32)))
        t3 = time.perf_counter()
        cond = patch
        if i >= 2:
            dit_ms.append((t1 - t) * 1e3)
            lm_ms.append((t2 - t1) * 1e3)
            vae_ms.append((t3 - t2) * 1e3)
    return {"lm_step_ms": float(np.median(lm_ms)), "dit_patch_ms": float(np.median(dit_ms)),
            "vae_patch_ms": float(np.median(vae_ms))}


def bench_peer(spec, checkpoint: Path | None, text: str, repeats: int, threads: int | None = None) -> dict:
    """``ttscli bench voxcpm2 --random-weights --peer voxcpm``: upstream's VoxCPM2Model at the
    released size with random weights, on the same text read as UTF-8 bytes, the same 50
    patches (its stop disabled; ``$TTSCLI_VOXCPM_PEER_PATCHES`` to match a --max-frames run),
    streamed so its first audio is timed as ours;
    ``$TTSCLI_VOXCPM_PYTHON`` names a Python with voxcpm and torch (never a ttscli dependency;
    scripts/reference-venv.sh builds one). Figures are medians over ``repeats`` runs after one
    warm-up."""
    python = os.environ.get(PEER_PYTHON)
    if not python:
        raise UsageError(f"--peer voxcpm runs upstream's package in another Python: set {PEER_PYTHON} to "
                         "the python of an environment with voxcpm and torch (scripts/reference-venv.sh)")
    try:
        patches = int(os.environ.get(PEER_PATCHES, DEFAULT_PEER_PATCHES))
    except ValueError:
        raise UsageError(f"{PEER_PATCHES} must be a whole number of patches") from None
    if patches < 1:
        raise UsageError(f"{PEER_PATCHES} must be at least 1")
    args = {"text": text, "repeats": repeats, "patches": patches, "threads": threads}
    return run_peer_script("voxcpm", python, PEER_SCRIPT, args, PEER_TIMEOUT_S)

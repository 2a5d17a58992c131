"""Bench hooks: the stage figures of the last run (LM prefill and steps, the DiT flow, the causal
HiFT), and upstream's PyTorch code as a peer, run by benchmarks/bench_cosyvoice3_peer.py in the
Python environment that has it (with random weights at the published size, as ours)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ttscli.errors import TTSError, UsageError

PEER_SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_cosyvoice3_peer.py"
PEER_PYTHON = "TTSCLI_COSYVOICE_PYTHON"
PEER_SRC = "COSYVOICE_SRC"
PEER_TIMEOUT_S = 3600


def bench_components(pipe, req) -> dict[str, float]:
    s = pipe.stats
    steps = sum(s.frame_s)
    audio_s = s.decoder_frames / pipe.args.token_frame_rate
    return {"lm_prefill_s": s.prefill_s,
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
    try:
        p = subprocess.run([python, str(PEER_SCRIPT)], input=json.dumps(args).encode(), capture_output=True,
                           timeout=PEER_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TTSError(f"--peer pytorch: {python} {PEER_SCRIPT.name} did not finish ({e})") from None
    if p.returncode != 0:
        said = (p.stderr.decode("utf-8", "replace").strip().splitlines() or ["nothing on stderr"])[-1]
        raise TTSError(f"--peer pytorch failed (exit {p.returncode}): {said}")
    try:
        return json.loads(p.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TTSError("--peer pytorch printed no figures") from None

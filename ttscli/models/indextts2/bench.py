"""Bench hooks: the stage figures of the last run (GPT codes, S2Mel's flow, BigVGAN), and
upstream's PyTorch code as a peer, run by benchmarks/bench_indextts2_peer.py in the Python
environment that has it (every module at the published size with random weights, as ours)."""
from __future__ import annotations

import os
from pathlib import Path

from ttscli.errors import UsageError
from ttscli.models.base import RANDOM_WEIGHTS_FRAMES, run_peer_script

PEER_SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_indextts2_peer.py"
PEER_PYTHON = "TTSCLI_INDEXTTS_PYTHON"
PEER_SRC = "INDEXTTS_SRC"
PEER_DEPS = "INDEXTTS_DEPS"
PEER_TIMEOUT_S = 3600
PEER_REF_SECONDS = 4.0           # the length of ttscli's random-weights voice (voice.random_voice)


def bench_components(pipe, req) -> dict[str, float]:
    s = pipe.stats
    gpt_s = s.extra.get("gpt_s")
    return {"gpt_s": gpt_s, "gpt_codes_per_s": (s.frames / gpt_s) if gpt_s else None,
            "s2mel_s": s.extra.get("s2mel_s"), "vocoder_s": s.extra.get("vocoder_s")}


def bench_peer(spec, checkpoint: Path | None, text: str, repeats: int, threads: int | None = None,
               frames: int = RANDOM_WEIGHTS_FRAMES) -> dict:
    """``ttscli bench indextts2 --random-weights --peer pytorch``: upstream's ``infer_generator``
    over its own modules at the published sizes with random weights, on the ids ttscli's
    random-weights run gives the same text, ``frames`` codes (the stop barred until then, as
    ttscli's run ignores end of speech), upstream's default beam sampling. ``$TTSCLI_INDEXTTS_PYTHON``
    names a Python with torch and upstream's dependencies, ``$INDEXTTS_SRC`` / ``$INDEXTTS_DEPS`` the
    checkout and pinned packages of scripts/goldens/indextts2_fetch.sh. Medians over ``repeats``
    runs after a warm-up that also encodes the reference (upstream caches it, as ttscli does)."""
    from ttscli.models.indextts2.config import read_args
    from ttscli.models.indextts2.text import RandomTokenizer

    python, src, deps = (os.environ.get(k) for k in (PEER_PYTHON, PEER_SRC, PEER_DEPS))
    if not python or not src or not deps:
        raise UsageError(f"--peer pytorch runs upstream's code in another Python: set {PEER_PYTHON} to the python "
                         f"of scripts/reference-venv.sh's environment, {PEER_SRC} and {PEER_DEPS} to the folders "
                         "scripts/goldens/indextts2_fetch.sh makes")
    tok = RandomTokenizer(int(read_args(None).gpt["number_text_tokens"]))
    args = {"text_ids": tok.ids(tok.pieces(text)), "repeats": repeats, "frames": frames, "threads": threads,
            "src": src, "deps": deps, "ref_seconds": PEER_REF_SECONDS, "beams": 3}
    return run_peer_script("pytorch", python, PEER_SCRIPT, args, PEER_TIMEOUT_S)

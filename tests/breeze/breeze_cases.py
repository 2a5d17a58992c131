"""What the Breeze tests share (imported by name; conftest.py files clash): the tiny checkpoint,
upstream's goldens for it, and running a golden case's greedy frames through a code decoder."""
import json
from pathlib import Path

import numpy as np

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "breeze"
TINY = FIX / "tiny"


def read_goldens():
    """(arrays, cases) computed by upstream's code (scripts/goldens/breeze_tiny.py)."""
    return np.load(FIX / "tiny.goldens.npz"), json.loads((FIX / "tiny.cases.json").read_text(encoding="utf-8"))


def cos(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def prompts_for(model, tok, goldens, case):
    from ttscli.models.breeze_tts.prompt import Voice, prompts

    arrays, meta = goldens
    t = case["template"]
    voice = Voice(arrays["ref_codes"], meta["request"]["ref_text"]) if t.startswith("ref_") else None
    instruct = meta["request"]["instruction"] if t in ("tts_instruction", "ref_edit_tata") else None
    return prompts(model, tok, meta["request"]["text"], instruct, voice, case["cfg_scale"])


def greedy(model, tok, goldens, case, decoder, frames):
    """Greedy frames as upstream's goldens ran them (their EOS row zeroed: here the EOS class is
    masked instead, the same argmax since no golden frame ended)."""
    from ttscli.lm.sample import SamplingParams
    from ttscli.models.breeze_tts.loop import LoopConfig, generate_frames

    cond, uncond, scale = prompts_for(model, tok, goldens, case)
    cfg = LoopConfig(SamplingParams(1.0, 0, 1.0, 0.0, 1.1, False), SamplingParams(1.0, 0, 1.0, 0.0, 1.0, False),
                     frames, ignore_eos=True)
    trace: list = []
    codes = np.stack(list(generate_frames(model, decoder, cond, uncond, scale, cfg, trace=trace)))
    return codes, trace

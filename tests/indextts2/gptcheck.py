"""What the GPT's tests share (tests/indextts2/test_gpt.py on MLX, test_onnx_gpt.py on
onnxruntime): the tiny folder's goldens, its GPT, the prompt of the goldens, and one
generate call's codes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from ttscli.models.indextts2.conditioning import CONDITIONER_PREFIXES
from ttscli.models.indextts2.gpt import CodeLimitReached, GPTArgs, load_gpt
from ttscli.torchfile import state_dict

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
G = np.load(FIX / "goldens.npz")       # scripts/goldens/indextts2_upstream.py
B = np.load(FIX / "beams.npz")         # scripts/goldens/indextts2_beams.py
STOP = 65


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def tiny_args() -> GPTArgs:
    cfg = yaml.safe_load((FIX / "tiny" / "config.yaml").read_text())
    return GPTArgs.from_dict(cfg["gpt"], source="config.yaml", where="gpt.")


def tiny_weights() -> dict:
    return state_dict(FIX / "tiny" / "gpt.pth")


def tiny_gpt(args: GPTArgs | None = None, weights: dict | None = None):
    return load_gpt(weights if weights is not None else tiny_weights(), args or tiny_args(), CONDITIONER_PREFIXES)


def prompt(gpt):
    """The goldens' prompt: their speaker latents, emotion vector and text."""
    import mlx.core as mx

    return gpt.prompt(mx.array(G["cond_latents"])[None], mx.array(G["emovec"])[None], G["text"])


def run(gpt, embeds, params, **kw) -> tuple[list[int], bool]:
    """(codes, limit reached) of one generate call."""
    codes = []
    try:
        for c in gpt.generate(embeds, params, **kw):
            codes.append(c)
    except CodeLimitReached as e:
        assert e.codes == codes
        return codes, True
    return codes, False

"""mlx-audio 0.6.2's Breeze port on the tiny published-layout checkpoint, against the upstream
goldens (tests/fixtures/breeze/tiny.goldens.npz) that ttscli's tests hold ttscli to.

Run in a throwaway venv with mlx-audio==0.6.2 (never a ttscli dependency):

    VENV/bin/python scripts/goldens/breeze_mlx_audio_side_by_side.py

For each case of the goldens: mlx-audio's prompt embeddings and backbone prefill logits (cosine),
and its greedy frames (temperature 0) with upstream's repetition penalty 1.1 and with mlx-audio's
own default 1.0, counted against the upstream frames. The reference codes are injected (the
goldens carry codes, not audio), lm_head's EOS row is zeroed as in the goldens, and the model is
cast to float32 (mlx-audio computes in the file's bf16 by default) so that only the algorithms differ.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_audio.tts.utils import load_model

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "breeze"


def cos(a, b) -> float:
    if isinstance(a, mx.array):
        a = np.array(a.astype(mx.float32))
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main() -> None:
    g = np.load(FIX / "tiny.goldens.npz")
    meta = json.loads((FIX / "tiny.cases.json").read_text(encoding="utf-8"))
    req = meta["request"]
    m = load_model(str(FIX / "tiny"))
    # it keeps the file's bf16; compare the algorithm, as ttscli's tests do, in float32
    m.set_dtype(mx.float32)
    V = m.vocab_size
    w = np.array(m.lm_head.weight.astype(mx.float32))
    w[V] = 0.0
    m.lm_head.weight = mx.array(w).astype(m.lm_head.weight.dtype)
    ref_codes = mx.array(g["ref_codes"])[None]
    m._encode_reference = lambda _audio: ref_codes
    recorded: list = []
    depth_tokens = m._depth_tokens

    def record(first, *a, **k):
        frame = depth_tokens(first, *a, **k)
        recorded.append(frame)
        return frame

    m._depth_tokens = record
    rows = []
    for name, case in meta["cases"].items():
        tpl, scale = case["template"], case["cfg_scale"]
        instruct = req["instruction"] if tpl in ("tts_instruction", "ref_edit_tata") else None
        ref = tpl.startswith("ref_")
        kw = {"ref_audio": np.zeros(1920, np.float32), "ref_text": req["ref_text"]} if ref else \
            {"ref_audio": None, "ref_text": None}
        emb = m._prompt_embeddings(req["text"], voice=None, instruct=instruct, **kw)
        row = {"case": name, "embeds_cos": cos(emb[0], g[f"{name}.cond.embeds"])
               if emb.shape[1] == g[f"{name}.cond.embeds"].shape[0] else None}
        h = m.backbone_model(input_embeddings=emb, cache=m.backbone_model.make_cache())[:, -1, :]
        row["prefill_logits_cos"] = cos(np.array(m.lm_head(h)[0, :V].astype(mx.float32)),
                                        g[f"{name}.cond.prefill_logits"][:V])
        for pen in (1.1, 1.0):
            recorded.clear()
            try:
                for _ in m.generate(req["text"], instruct=instruct, cfg_scale=scale, temperature=0.0, top_k=0,
                                    top_p=1.0, repetition_penalty=pen, max_tokens=meta["frames"], **kw):
                    pass
            except ValueError as e:   # its decode of the tiny codec; the frames are recorded before it
                row["decode_error"] = str(e)[:120]
            got = np.array(recorded[:meta["frames"]])
            ref_frames = g[f"{name}.codes"]
            same = int((got == ref_frames).all(axis=1).sum()) if got.shape == ref_frames.shape else 0
            row[f"frames_equal_penalty_{pen}"] = f"{same}/{len(ref_frames)}"
        rows.append(row)
    try:
        recorded.clear()
        try:
            for _ in m.generate(req["text"], cfg_scale=2.0, temperature=0.0, max_tokens=2, ref_audio=None,
                                ref_text=None):
                pass
        except ValueError:
            if not recorded:
                raise
        plain_cfg = "accepted silently (upstream raises)"
    except ValueError as e:
        plain_cfg = f"refused: {e}"
    out = {"cases": rows, "plain_text_with_cfg_2": plain_cfg}
    print(json.dumps(out, indent=1))
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

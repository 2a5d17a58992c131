"""`ttscli parity chatterbox --golden FILE.npz`: T3 and the voice encoder against goldens exported
from the reference (format: docs/parity.md, Chatterbox section)."""
from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError

T3_KEYS = ("t3/text", "t3/text_ids", "t3/speaker_emb", "t3/prompt_tokens", "t3/exaggeration", "t3/cfg_weight",
           "t3/cond_emb", "t3/prefill_logits", "t3/greedy_tokens", "t3/repetition_penalty", "t3/min_p", "t3/top_p")
VE_KEYS = ("ve/wav16k", "ve/embed")


def _scalar(g, key: str, default: float) -> float:
    return float(np.asarray(g[key]).reshape(-1)[0]) if key in g else default


def parity_checks(spec, checkpoint: Path | None, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list:
    import mlx.core as mx

    from ttscli.lm.decoder import MLXCodeDecoder
    from ttscli.models.chatterbox.load import (
        load_t3,
        load_tokenizer,
        load_voice_encoder,
    )
    from ttscli.models.chatterbox.t3 import T3Cond, T3Sampling
    from ttscli.models.chatterbox.tokenizer import punc_norm
    from ttscli.parity import Check, cosine, max_abs

    if golden is None:
        raise UsageError("chatterbox parity needs --golden FILE.npz (format: docs/parity.md)")
    if against is not None:
        raise UsageError("chatterbox parity has no --against backends yet")
    if backend not in (None, "mlx"):
        raise UsageError(f"chatterbox parity runs the mlx code decoder only (asked for {backend})")
    try:
        g = dict(np.load(golden, allow_pickle=False))
    except (OSError, ValueError) as e:
        raise UsageError(f"{golden}: not a readable .npz of arrays ({e})") from None
    known = [k for k in g if k in T3_KEYS or k in VE_KEYS]
    if not known:
        raise UsageError(f"{golden}: none of the Chatterbox golden keys (docs/parity.md) is in the file")
    unknown = sorted(set(g) - set(T3_KEYS) - set(VE_KEYS))
    if unknown:
        warnings.warn(f"{golden}: ignoring unknown keys {', '.join(unknown)}", stacklevel=2)
    checks: list = []
    if "t3/speaker_emb" in g and "t3/text_ids" in g:
        t3 = load_t3(checkpoint)
        ids = [int(i) for i in g["t3/text_ids"]]
        if "t3/text" in g:
            ours = load_tokenizer(checkpoint).encode(punc_norm(str(g["t3/text"])))
            same = sum(a == b for a, b in zip(ours, ids)) if len(ours) == len(ids) else 0
            checks.append(Check("text tokens vs golden (equal ids)", same, len(ids), "==",
                                f"ours {len(ours)} ids, golden {len(ids)}"))
        cond = T3Cond(g["t3/speaker_emb"], g.get("t3/prompt_tokens"), _scalar(g, "t3/exaggeration", 0.5))
        cfg_w = _scalar(g, "t3/cfg_weight", 0.5)
        if "t3/cond_emb" in g:
            checks.append(Check("conditioning vs golden (max abs)", max_abs(np.array(t3.conditioning(cond))[0],
                                                                            g["t3/cond_emb"]), 1e-4, "<="))
        embeds = t3.prefill_embeds(cond, ids, cfg=cfg_w > 0)
        logits, _ = t3(embeds, t3.new_cache())
        if "t3/prefill_logits" in g:
            got, ref = np.array(logits), g["t3/prefill_logits"]
            cos = min(cosine(a, b) for a, b in zip(got, ref)) if got.shape == ref.shape else float("nan")
            checks.append(Check("CFG prefill logits vs golden (cosine, worst row)", cos, 0.99999, ">=",
                                f"{got.shape[0]} row(s)"))
        seq, _ = MLXCodeDecoder(t3, sequential=True).prefill(embeds, t3.new_cache())
        checks.append(Check("internal: batched vs sequential prefill (max abs)",
                            max_abs(np.array(logits), np.array(seq)), 1e-4, "<="))
        if "t3/greedy_tokens" in g:
            ref = [int(t) for t in g["t3/greedy_tokens"]][:frames]
            s = T3Sampling(temperature=0.0, min_p=_scalar(g, "t3/min_p", 0.05), top_p=_scalar(g, "t3/top_p", 1.0),
                           repetition_penalty=_scalar(g, "t3/repetition_penalty", 1.2), cfg_weight=cfg_w,
                           max_new_tokens=len(ref) + 1)
            got = list(itertools.islice(t3.generate(cond, ids, s), len(ref)))
            lead = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
            checks.append(Check("greedy speech tokens vs golden (leading equal)", lead, len(ref), "==",
                                "" if lead == len(ref) else f"first difference at token {lead}"))
        mx.clear_cache()
    if "ve/wav16k" in g and "ve/embed" in g:
        ve = load_voice_encoder(checkpoint)
        checks.append(Check("voice-encoder embedding vs golden (max abs)", max_abs(ve.embed(g["ve/wav16k"]),
                                                                                    g["ve/embed"]), 1e-4, "<="))
    return checks


def export(t3_goldens: Path, conds_pt: Path, meta_json: Path, out: Path) -> None:
    """The committed tiny goldens (scripts/goldens/chatterbox_t3.py) in the parity format."""
    from ttscli.models.chatterbox.conds import Conditionals

    g = np.load(t3_goldens)
    meta = json.loads(Path(meta_json).read_text())
    c = Conditionals.from_torch(conds_pt)
    np.savez_compressed(out, **{
        "t3/text": np.array(meta["text"]), "t3/text_ids": g["text_ids"].astype(np.int32),
        "t3/speaker_emb": c.speaker_emb, "t3/prompt_tokens": c.prompt_tokens.astype(np.int32),
        "t3/exaggeration": np.float32(0.5), "t3/cfg_weight": np.float32(meta["cfg_weight"]),
        "t3/cond_emb": g["cond_emb_exag5"], "t3/prefill_logits": g["prefill_logits_exag5"],
        "t3/greedy_tokens": g["greedy_rp12"].astype(np.int32), "t3/repetition_penalty": np.float32(1.2),
        "t3/min_p": np.float32(meta["min_p"]), "t3/top_p": np.float32(meta["top_p"]),
        "ve/wav16k": g["ve_wav"], "ve/embed": g["ve_embed"]})

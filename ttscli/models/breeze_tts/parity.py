"""`ttscli parity breeze-tts-2 --golden FILE.npz`: one request against goldens from upstream.

Keys (docs/parity.md): ``text``; optional ``instruction``, ``ref_text`` + ``ref_codes [N, 16]``;
``cfg_scale``; ``embeds [L, H]`` (and ``uncond_embeds`` with CFG): the prompt embeddings;
``prefill_hidden [H]`` / ``prefill_logits [V + 1]`` of the conditional prompt; ``codes [T, 16]``
greedy frames (penalty 1.1) and optionally ``backbone_logits [T, V + 1]``; ``zero_eos_row``
(tiny random checkpoints: the goldens were run with lm_head's EOS row zeroed).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ttscli.errors import UsageError

KEYS = ("text", "instruction", "ref_text", "ref_codes", "cfg_scale", "embeds", "uncond_embeds", "prefill_hidden",
        "prefill_logits", "codes", "backbone_logits", "zero_eos_row")


def parity_checks(spec, checkpoint: Path | None, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list:
    import mlx.core as mx

    from ttscli.lm import MLXCodeDecoder
    from ttscli.lm.sample import SamplingParams
    from ttscli.models.breeze_tts.load import load_model, load_tokenizer
    from ttscli.models.breeze_tts.loop import LoopConfig, generate_frames
    from ttscli.models.breeze_tts.prompt import Voice, prompts
    from ttscli.parity import Check, cosine

    if golden is None:
        raise UsageError("breeze parity needs --golden FILE.npz (format: docs/parity.md)")
    if against is not None:
        raise UsageError("breeze parity has no --against backends yet")
    if backend not in (None, "mlx"):
        raise UsageError(f"breeze parity runs the mlx backbone only (asked for {backend})")
    if checkpoint is None:
        raise UsageError("breeze parity needs the checkpoint the goldens were made from (--model-dir)")
    try:
        g = dict(np.load(golden, allow_pickle=False))
    except (OSError, ValueError) as e:
        raise UsageError(f"{golden}: not a readable .npz of arrays ({e})") from None
    missing = [k for k in ("text", "embeds", "codes") if k not in g]
    if missing:
        raise UsageError(f"{golden}: missing {', '.join(missing)} (format: docs/parity.md)")
    model, _ = load_model(checkpoint)
    tok = load_tokenizer(checkpoint, model.args)
    if float(g.get("zero_eos_row", 0)):
        w = np.array(model.lm_head.weight)
        w[model.args.eos_id] = 0.0
        model.lm_head.weight = mx.array(w)
    voice = Voice(g["ref_codes"].astype(np.int32), str(g["ref_text"])) if "ref_codes" in g else None
    scale = float(g.get("cfg_scale", 1.0))
    cond, uncond, guided = prompts(model, tok, str(g["text"]), str(g["instruction"]) if "instruction" in g else None,
                                   voice, scale)
    checks = [Check("prompt embeddings (cosine)", cosine(np.array(cond.embeds[0]), g["embeds"]), 0.99999, ">=",
                    f"{cond.embeds.shape[1]} positions, golden {g['embeds'].shape[0]}")]
    if "uncond_embeds" in g and uncond is not None:
        checks.append(Check("unconditional prompt embeddings (cosine)",
                            cosine(np.array(uncond.embeds[0]), g["uncond_embeds"]), 0.99999, ">="))
    logits, h = model(cond.embeds, model.new_cache())
    if "prefill_hidden" in g:
        checks.append(Check("backbone prefill hidden (cosine)", cosine(np.array(h[0]), g["prefill_hidden"]),
                            0.99999, ">="))
    if "prefill_logits" in g:
        checks.append(Check("backbone prefill logits (cosine)", cosine(np.array(logits[0]), g["prefill_logits"]),
                            0.99999, ">="))
    ref = g["codes"][:frames]
    cfg = LoopConfig(SamplingParams(1.0, 0, 1.0, 0.0, 1.1, False), SamplingParams(1.0, 0, 1.0, 0.0, 1.0, False),
                     len(ref), ignore_eos=bool(float(g.get("zero_eos_row", 0))))
    trace: list = []
    out = list(generate_frames(model, MLXCodeDecoder(model, compiled=False), cond, uncond, guided, cfg, trace=trace))
    same = sum(bool((a == b).all()) for a, b in zip(out, ref)) if len(out) == len(ref) else 0
    checks.append(Check(f"greedy frames, all 16 codes (cfg {scale:g})", same, len(ref), "==",
                        f"ours {len(out)} frames, golden {len(ref)}"))
    if "backbone_logits" in g and trace:
        worst = min(cosine(np.array(t[0][0]), r) for t, r in zip(trace, g["backbone_logits"]))
        checks.append(Check("backbone logits per frame, worst (cosine)", worst, 0.99999, ">="))
    return checks

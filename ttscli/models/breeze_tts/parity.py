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
    from ttscli.models.base import Check, cosine

    if (golden is None) == (against is None):
        raise UsageError("breeze parity needs exactly one of --golden FILE.npz (format: docs/parity.md) or "
                         "--against onnx|onnx-f32|onnx-int8|onnx-int4")
    if backend not in (None, "mlx"):
        raise UsageError(f"breeze parity runs the mlx backbone and depth decoder as ours (asked for {backend}); "
                         "compare onnxruntime with --against onnx")
    if checkpoint is None:
        raise UsageError("breeze parity needs a checkpoint (--model-dir)")
    if frames < 1:
        raise UsageError("--frames must be at least 1")
    if against is not None:
        return onnx_checks(Path(checkpoint), against, frames)
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


# MLX float32 vs onnxruntime: float32 differs by summation order only; int8/int4 weights quantized
ONNX_COSINE = {"float32": 0.99999, "int8": 0.999, "int4": 0.9}
# the fixed request of --against: voice design with CFG, so both backbone branches and the
# depth decoder's guided rows run
AGAINST_TEXT, AGAINST_INSTRUCTION, AGAINST_CFG = "Hello there, this is a short test.", "calm low voice, slow", 3.0


def _greedy(model, decoder, cond, uncond, scale, frames: int):
    from ttscli.lm.sample import SamplingParams
    from ttscli.models.breeze_tts.loop import LoopConfig, generate_frames

    # EOS masked: always `frames` frames to compare
    cfg = LoopConfig(SamplingParams(1.0, 0, 1.0, 0.0, 1.1, False), SamplingParams(1.0, 0, 1.0, 0.0, 1.0, False),
                     frames, ignore_eos=True)
    return np.stack(list(generate_frames(model, decoder, cond, uncond, scale, cfg)))


def onnx_checks(checkpoint: Path, against: str, frames: int) -> list:
    """MLX float32 vs the onnxruntime graphs (``onnx``: every precision) on a fixed request:
    backbone prefill logits, the depth decoder's logits on the same inputs (MLX's backbone state,
    MLX's codes forced), and greedy frames, which must all agree at float32 and are reported at
    int8/int4 (one flipped code changes every later frame: there agreement measures drift)."""
    import mlx.core as mx

    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.onnx.graph import Quant
    from ttscli.backends.select import split_backend
    from ttscli.lm import MLXCodeDecoder
    from ttscli.models.breeze_tts.load import load_model, load_tokenizer
    from ttscli.models.breeze_tts.onnx_decoder import open_decoder
    from ttscli.models.breeze_tts.onnx_export import find_or_build
    from ttscli.models.breeze_tts.prompt import prompts
    from ttscli.models.base import Check, cosine

    if not against.startswith("onnx"):
        raise UsageError(f"--against {against}: Breeze compares its MLX LMs with onnx, onnx-f32, onnx-int8 or "
                         "onnx-int4; for upstream numbers use --golden FILE.npz")
    require_onnxruntime()
    precisions = ("float32", "int8", "int4") if against == "onnx" else (split_backend(against)[1],)
    model, _ = load_model(checkpoint)
    tok = load_tokenizer(checkpoint, model.args)
    cond, uncond, scale = prompts(model, tok, AGAINST_TEXT, AGAINST_INSTRUCTION, None, AGAINST_CFG)
    ref_logits, _ = model(cond.embeds, model.new_cache())
    ref_frames = _greedy(model, MLXCodeDecoder(model, compiled=False), cond, uncond, scale, frames)
    hidden = mx.concatenate([model(p.embeds, model.new_cache())[1] for p in (cond, uncond)], axis=0)
    forced = ref_frames[0]

    def force(z, k):
        return mx.array([int(forced[k])])

    c0 = mx.array([int(forced[0])])
    # the threshold applies to the conditional row alone: guidance at scale s amplifies any
    # difference between the rows by about 2s + 1, so the guided logits are reported beside it
    _, ref_depth = model.depth_frame(hidden[:1], c0, force)
    _, ref_guided = model.depth_frame(hidden, c0, force, scale)
    checks = []
    for prec in precisions:
        name = f"onnx-{prec}"
        dec = open_decoder(find_or_build(checkpoint, Quant(prec)), model)
        logits, _ = dec.prefill(cond.embeds, dec.new_cache())
        checks.append(Check(f"backbone prefill logits mlx vs {name} (cosine)",
                            cosine(np.array(ref_logits), np.array(logits)), ONNX_COSINE[prec], ">=",
                            f"{cond.embeds.shape[1]} positions"))
        _, depth = dec.depth_frame(hidden[:1], c0, force)
        _, guided = dec.depth_frame(hidden, c0, force, scale)
        worst = min(cosine(np.array(a), np.array(b)) for a, b in zip(ref_depth, depth))
        worst_guided = min(cosine(np.array(a), np.array(b)) for a, b in zip(ref_guided, guided))
        checks.append(Check(f"depth decoder logits mlx vs {name}, worst of {len(depth)} codebooks (cosine)", worst,
                            ONNX_COSINE[prec], ">=", f"the same inputs and codes; guided (cfg {scale:g}): "
                            f"{worst_guided:.6f}"))
        ours = _greedy(model, dec, cond, uncond, scale, frames)
        same = int((ours == ref_frames).all(axis=1).sum())
        if prec == "float32":
            checks.append(Check(f"greedy frames mlx vs {name}, all 16 codes (cfg {scale:g})", same, len(ref_frames),
                                "=="))
        else:
            checks.append(Check(f"greedy frames mlx vs {name}, all 16 codes (cfg {scale:g})", same, 0, ">=",
                                f"of {len(ref_frames)}; reported, not required: "
                                f"{100 * float(np.mean(ours == ref_frames)):.0f}% of codes equal"))
    return checks

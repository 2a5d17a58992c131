"""`ttscli parity chatterbox --golden FILE.npz [--code-decoder-backend onnx-f32]`: T3 and the voice
encoder against goldens exported from the reference (format: docs/parity.md, Chatterbox section);
`--against onnx[-f32|-int8|-int4]`: MLX T3 against its graphs on onnxruntime (and, with float32,
S3Gen's flow estimator on MLX against its graph)."""
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


ONNX_COSINE = {"float32": 0.99999, "int8": 0.999, "int4": 0.9}
AGAINST_TEXT = "The quick brown fox jumps over the lazy dog."


def _decoder(backend: str | None, checkpoint: Path):
    """The code decoder the checks drive: None for MLX's own, else T3's ONNX graph at that
    precision (the checkpoint's conversion in ttscli's cache, built when missing)."""
    from ttscli.backends.select import split_backend

    if backend in (None, "mlx"):
        return None
    base, prec = split_backend(backend)
    if base != "onnx":
        raise UsageError(f"chatterbox parity runs the mlx or onnx code decoder (asked for {backend})")
    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.onnx.graph import Quant
    from ttscli.models.chatterbox.onnx_decoder import open_decoder
    from ttscli.models.chatterbox.onnx_export import find_or_build

    require_onnxruntime()
    return open_decoder(find_or_build(checkpoint, Quant(prec)))


def _worst_cosine(got, ref) -> float:
    from ttscli.models.base import cosine

    got, ref = np.asarray(got), np.asarray(ref)
    return min(cosine(a, b) for a, b in zip(got, ref)) if got.shape == ref.shape else float("nan")


def _leading(got: list[int], ref: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))


def parity_checks(spec, checkpoint: Path | None, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list:
    if (golden is None) == (against is None):
        raise UsageError("chatterbox parity needs --golden FILE.npz (format: docs/parity.md) or --against "
                         "onnx|onnx-f32|onnx-int8|onnx-int4, not both")
    if frames < 1:
        raise UsageError("--frames must be at least 1")
    if against is not None:
        if backend not in (None, "mlx"):
            raise UsageError("--against compares MLX with that backend; drop --code-decoder-backend")
        return against_checks(Path(checkpoint), against, frames)
    return golden_checks(Path(checkpoint), Path(golden), frames, backend)


def golden_checks(checkpoint: Path, golden: Path, frames: int, backend: str | None) -> list:
    """T3 (on the MLX code decoder, or ``backend``'s) and the voice encoder against the goldens."""
    import mlx.core as mx

    from ttscli.lm.decoder import MLXCodeDecoder
    from ttscli.models.chatterbox.load import (
        load_t3,
        load_tokenizer,
        load_voice_encoder,
    )
    from ttscli.models.chatterbox.t3 import T3Cond, T3Sampling
    from ttscli.models.chatterbox.tokenizer import punc_norm
    from ttscli.models.base import Check, max_abs

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
    decoder = _decoder(backend, checkpoint)
    on = "" if decoder is None else f" ({backend})"
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
        if decoder is None:
            logits, _ = t3(embeds, t3.new_cache())
        else:
            logits, _ = decoder.prefill(embeds, decoder.new_cache())
        if "t3/prefill_logits" in g:
            got = np.array(logits)
            checks.append(Check(f"CFG prefill logits vs golden{on} (cosine, worst row)",
                                _worst_cosine(got, g["t3/prefill_logits"]), 0.99999, ">=", f"{got.shape[0]} row(s)"))
        if decoder is None:
            seq, _ = MLXCodeDecoder(t3, sequential=True).prefill(embeds, t3.new_cache())
            checks.append(Check("internal: batched vs sequential prefill (max abs)",
                                max_abs(np.array(logits), np.array(seq)), 1e-4, "<="))
        if "t3/greedy_tokens" in g:
            ref = [int(t) for t in g["t3/greedy_tokens"]][:frames]
            s = T3Sampling(temperature=0.0, min_p=_scalar(g, "t3/min_p", 0.05), top_p=_scalar(g, "t3/top_p", 1.0),
                           repetition_penalty=_scalar(g, "t3/repetition_penalty", 1.2), cfg_weight=cfg_w,
                           max_new_tokens=len(ref) + 1)
            got = list(itertools.islice(t3.generate(cond, ids, s, decoder=decoder), len(ref)))
            lead = _leading(got, ref)
            checks.append(Check(f"greedy speech tokens vs golden{on} (leading equal)", lead, len(ref), "==",
                                "" if lead == len(ref) else f"first difference at token {lead}"))
        mx.clear_cache()
    if "ve/wav16k" in g and "ve/embed" in g:
        ve = load_voice_encoder(checkpoint)
        checks.append(Check("voice-encoder embedding vs golden (max abs)", max_abs(ve.embed(g["ve/wav16k"]),
                                                                                    g["ve/embed"]), 1e-4, "<="))
    return checks


def against_checks(checkpoint: Path, against: str, frames: int) -> list:
    """MLX float32 T3 vs its ONNX graphs (``onnx``: every precision) on a fixed request with the
    checkpoint's default voice and CFG 0.5: the CFG prefill logits (worst row) and greedy speech
    tokens with the default repetition penalty, which must all agree at float32 and are
    reported at int8 / int4 (one flipped token changes every later one, so agreement there
    measures drift, not correctness)."""
    from ttscli.models.chatterbox.load import load_conds, load_t3, load_tokenizer
    from ttscli.models.chatterbox.t3 import T3Sampling
    from ttscli.models.chatterbox.tokenizer import punc_norm
    from ttscli.models.base import Check

    precisions = ("f32", "int8", "int4") if against == "onnx" else (against.partition("-")[2],)
    t3 = load_t3(checkpoint)
    cond = load_conds(checkpoint).t3_cond(0.5)
    ids = load_tokenizer(checkpoint).encode(punc_norm(AGAINST_TEXT))
    embeds = t3.prefill_embeds(cond, ids, cfg=True)
    ref_logits, _ = t3(embeds, t3.new_cache())
    s = T3Sampling(temperature=0.0, cfg_weight=0.5, max_new_tokens=frames + 1)
    # the stop token is masked: the tokens compared are always `frames` long
    ref = list(itertools.islice(t3.generate(cond, ids, s, ignore_eos=True), frames))
    checks = []
    for p in precisions:
        dec = _decoder(f"onnx-{p}", checkpoint)
        name = f"onnx-{dec.precision}"
        logits, _ = dec.prefill(embeds, dec.new_cache())
        checks.append(Check(f"CFG prefill logits mlx vs {name} (cosine, worst row)",
                            _worst_cosine(np.array(logits), np.array(ref_logits)), ONNX_COSINE[dec.precision], ">=",
                            f"{embeds.shape[1]} positions, 2 rows"))
        got = list(itertools.islice(t3.generate(cond, ids, s, decoder=dec, ignore_eos=True), frames))
        lead = _leading(got, ref)
        detail = "" if lead == len(ref) else f"first difference at token {lead}"
        if dec.precision == "float32":
            checks.append(Check(f"greedy speech tokens mlx vs {name} (leading equal)", lead, len(ref), "==", detail))
        else:
            same = sum(a == b for a, b in zip(got, ref))
            checks.append(Check(f"greedy speech tokens mlx vs {name} (leading equal)", lead, 0, ">=",
                                f"{detail + '; ' if detail else ''}reported, not required: "
                                f"{same}/{len(ref)} tokens equal"))
    if "f32" in precisions:
        checks += [flow_check(checkpoint), hift_check(checkpoint)]
    return checks


FLOW_TOLERANCE = 1e-4     # max abs / peak of the mel: float32 summation order only


def flow_check(checkpoint: Path):
    """S3Gen's mel with its flow estimator on MLX vs on onnxruntime (TTSCLI_FLOW_BACKEND), same
    tokens (the default voice's prompt tokens), prompt and seeded noise."""
    import mlx.core as mx

    from ttscli.models.chatterbox.load import load_conds
    from ttscli.codecs.s3gen import load_s3gen
    from ttscli.codecs.s3gen.onnx_flow import attach
    from ttscli.models.base import Check

    s3 = load_s3gen(checkpoint / "s3gen.safetensors")
    gen = load_conds(checkpoint).gen
    tokens = np.asarray(gen["prompt_token"]).reshape(-1)[:50]
    ref = np.array(s3.mel(tokens, gen, key=mx.random.key(0)))
    attach(s3.flow, checkpoint)
    got = np.array(s3.mel(tokens, gen, key=mx.random.key(0)))
    err = float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-12))
    return Check("S3Gen mel, flow estimator mlx vs onnx-float32 (max abs / peak)", err, FLOW_TOLERANCE, "<=",
                 f"{len(tokens)} tokens after a {np.asarray(gen['prompt_token']).size}-token prompt, 10 Euler steps")


HIFT_TOLERANCE = 1e-4     # max abs / peak of the waveform: float32 summation order only


def hift_check(checkpoint: Path):
    """S3Gen's waveform with HiFT's decode on MLX vs on onnxruntime (TTSCLI_HIFT_BACKEND), same
    mel (the flow on MLX, seeded) and the same source draws."""
    import mlx.core as mx

    from ttscli.models.chatterbox.load import load_conds
    from ttscli.codecs.s3gen import load_s3gen
    from ttscli.codecs.s3gen.onnx_hift import attach
    from ttscli.models.base import Check

    s3 = load_s3gen(checkpoint / "s3gen.safetensors")
    gen = load_conds(checkpoint).gen
    tokens = np.asarray(gen["prompt_token"]).reshape(-1)[:50]
    mel = s3.mel(tokens, gen, key=mx.random.key(0))
    ref = np.array(s3.mel2wav(mel, key=mx.random.key(1))[0])
    attach(s3.mel2wav, checkpoint)
    got = np.array(s3.mel2wav(mel, key=mx.random.key(1))[0])
    err = float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-12))
    return Check("S3Gen wave, HiFT decode mlx vs onnx-float32 (max abs / peak)", err, HIFT_TOLERANCE, "<=",
                 f"{mel.shape[0]} mel frames, the same source draws")


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

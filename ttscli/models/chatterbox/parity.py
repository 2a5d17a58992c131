"""`ttscli parity chatterbox --golden FILE.npz [--code-decoder-backend onnx-f32]`: T3, the voice
encoder and S3Gen (flow mel, HiFT F0 / source / waveform with the reference's recorded random
draws, the S3 tokenizer, CAMPPlus) against goldens exported from the reference (format:
docs/parity.md, Chatterbox section);
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
# each S3Gen check runs when all of its keys are present (docs/parity.md, Chatterbox format)
S3GEN_FLOW_KEYS = ("s3gen/flow/prompt_token", "s3gen/flow/prompt_feat", "s3gen/flow/embedding",
                   "s3gen/flow/tokens", "s3gen/flow/noise", "s3gen/flow/mel")
S3GEN_HIFT_KEYS = ("s3gen/hift/mel", "s3gen/hift/phase", "s3gen/hift/sine_noise", "s3gen/hift/f0",
                   "s3gen/hift/source", "s3gen/hift/wav")
S3GEN_TOKENIZER_KEYS = ("s3gen/tokenizer/wav16k", "s3gen/tokenizer/tokens")
S3GEN_REF_KEYS = ("s3gen/ref/wav", "s3gen/ref/sample_rate", "s3gen/ref/prompt_token", "s3gen/ref/prompt_feat",
                  "s3gen/ref/embedding")
S3GEN_KEYS = S3GEN_FLOW_KEYS + S3GEN_HIFT_KEYS + S3GEN_TOKENIZER_KEYS + S3GEN_REF_KEYS
# max abs on mel, source, waveform, prompt mel and x-vector (F0, in Hz, over its peak): float32
# on both sides, the bounds the S3Gen tests hold the same stages to
S3GEN_TOLERANCE = 1e-4


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
    known = [k for k in g if k in T3_KEYS or k in VE_KEYS or k in S3GEN_KEYS]
    if not known:
        raise UsageError(f"{golden}: none of the Chatterbox golden keys (docs/parity.md) is in the file")
    unknown = sorted(set(g) - set(T3_KEYS) - set(VE_KEYS) - set(S3GEN_KEYS))
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
    return checks + s3gen_checks(checkpoint, g)


def _has(g: dict, keys: tuple) -> bool:
    return all(k in g for k in keys)


def _max_abs(got, ref, *, over_peak: bool = False) -> float:
    """Largest absolute difference (over the reference's peak with ``over_peak``); inf when the
    shapes differ."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return float("inf")
    err = float(np.abs(got - ref).max())
    return err / max(float(np.abs(ref).max()), 1e-12) if over_peak else err


def _shape_note(got, ref) -> str:
    got, ref = np.asarray(got), np.asarray(ref)
    return "" if got.shape == ref.shape else f"shape {got.shape}, golden {ref.shape}"


def s3gen_checks(checkpoint: Path, g: dict) -> list:
    """S3Gen (``s3gen.safetensors``, float32 on MLX) against the ``s3gen/*`` goldens: each stage
    fed the reference's inputs and, where the reference drew random numbers (the CFM's starting
    noise, SineGen's phases and normals), the values it drew."""
    if not any(k in g for k in S3GEN_KEYS):
        return []
    import mlx.core as mx

    from ttscli.codecs.s3gen import load_s3gen
    from ttscli.codecs.s3gen.hift import SourceDraws
    from ttscli.models.base import Check

    s3 = load_s3gen(checkpoint / "s3gen.safetensors")
    checks: list = []
    if _has(g, S3GEN_FLOW_KEYS):
        ref = {"prompt_token": g["s3gen/flow/prompt_token"], "prompt_feat": g["s3gen/flow/prompt_feat"],
               "embedding": g["s3gen/flow/embedding"]}
        mel = np.array(s3.mel(g["s3gen/flow/tokens"], ref, noise=g["s3gen/flow/noise"])).T
        want = g["s3gen/flow/mel"]
        checks.append(Check("S3Gen flow mel vs golden, recorded noise (max abs)", _max_abs(mel, want),
                            S3GEN_TOLERANCE, "<=", _shape_note(mel, want) or
                            f"{np.asarray(g['s3gen/flow/tokens']).size} tokens, 10 Euler steps"))
    if _has(g, S3GEN_HIFT_KEYS):
        mel = mx.array(np.asarray(g["s3gen/hift/mel"], np.float32).T)
        draws = SourceDraws(mx.array(np.asarray(g["s3gen/hift/phase"], np.float32)),
                            mx.array(np.asarray(g["s3gen/hift/sine_noise"], np.float32).T))
        f0, source = s3.mel2wav.source(mel, draws)
        wav, _ = s3.mel2wav(mel, draws)
        for name, got, key in (("F0", f0, "f0"), ("harmonic source", source, "source"), ("waveform", wav, "wav")):
            want, hz = g[f"s3gen/hift/{key}"], key == "f0"
            checks.append(Check(f"S3Gen HiFT {name} vs golden, recorded draws (max abs{' / peak' if hz else ''})",
                                _max_abs(np.array(got), want, over_peak=hz), S3GEN_TOLERANCE, "<=",
                                _shape_note(np.array(got), want) or f"{mel.shape[0]} mel frames"))
    if _has(g, S3GEN_TOKENIZER_KEYS):
        got, want = s3.tokenize(g["s3gen/tokenizer/wav16k"]), np.asarray(g["s3gen/tokenizer/tokens"]).reshape(-1)
        same = int(np.sum(got == want)) if got.shape == want.shape else 0
        checks.append(Check("S3 tokenizer tokens vs golden (equal)", same, want.size, "==",
                            f"ours {got.size} tokens, golden {want.size}"))
    if _has(g, S3GEN_REF_KEYS):
        ref = s3.embed_ref(g["s3gen/ref/wav"], int(_scalar(g, "s3gen/ref/sample_rate", 24000)))
        got, want = ref["prompt_token"].reshape(-1), np.asarray(g["s3gen/ref/prompt_token"]).reshape(-1)
        same = int(np.sum(got == want)) if got.shape == want.shape else 0
        checks.append(Check("reference prompt tokens vs golden (equal)", same, want.size, "==",
                            f"ours {got.size} tokens, golden {want.size}"))
        checks.append(Check("reference prompt mel vs golden (max abs)",
                            _max_abs(ref["prompt_feat"][0], g["s3gen/ref/prompt_feat"]), S3GEN_TOLERANCE, "<="))
        checks.append(Check("CAMPPlus x-vector vs golden (max abs)",
                            _max_abs(ref["embedding"][0], g["s3gen/ref/embedding"]), S3GEN_TOLERANCE, "<="))
    mx.clear_cache()
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
    """S3Gen's mel with its flow estimator on MLX vs on onnxruntime (--backend flow_estimator), same
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
    """S3Gen's waveform with HiFT's decode on MLX vs on onnxruntime (--backend vocoder), same
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


def export(t3_goldens: Path, conds_pt: Path, meta_json: Path, out: Path, s3gen_dir: Path | None = None) -> None:
    """The committed tiny goldens (scripts/goldens/chatterbox_t3.py, and with ``s3gen_dir``
    scripts/goldens/chatterbox_s3gen.py's ``flow_tiny``/``hift_tiny``/``s3gen_tiny`` made on the
    same S3Gen weights) in the parity format."""
    from ttscli.models.chatterbox.conds import Conditionals

    g = np.load(t3_goldens)
    meta = json.loads(Path(meta_json).read_text())
    c = Conditionals.from_torch(conds_pt)
    arrays = {
        "t3/text": np.array(meta["text"]), "t3/text_ids": g["text_ids"].astype(np.int32),
        "t3/speaker_emb": c.speaker_emb, "t3/prompt_tokens": c.prompt_tokens.astype(np.int32),
        "t3/exaggeration": np.float32(0.5), "t3/cfg_weight": np.float32(meta["cfg_weight"]),
        "t3/cond_emb": g["cond_emb_exag5"], "t3/prefill_logits": g["prefill_logits_exag5"],
        "t3/greedy_tokens": g["greedy_rp12"].astype(np.int32), "t3/repetition_penalty": np.float32(1.2),
        "t3/min_p": np.float32(meta["min_p"]), "t3/top_p": np.float32(meta["top_p"]),
        "ve/wav16k": g["ve_wav"], "ve/embed": g["ve_embed"]}
    if s3gen_dir is not None:
        arrays.update(_s3gen_arrays(Path(s3gen_dir)))
    np.savez_compressed(out, **arrays)


def _s3gen_arrays(folder: Path) -> dict[str, np.ndarray]:
    flow, hift, whole = (np.load(folder / f"{n}_tiny.npz") for n in ("flow", "hift", "s3gen"))
    out = {f"s3gen/flow/{k}": flow[k] for k in ("prompt_token", "prompt_feat", "embedding", "noise", "mel")}
    out["s3gen/flow/tokens"] = flow["token"]
    out.update({f"s3gen/hift/{k}": hift[k] for k in ("mel", "phase", "sine_noise", "f0", "source", "wav")})
    out.update({"s3gen/tokenizer/wav16k": whole["wav16"], "s3gen/tokenizer/tokens": whole["tokens16"],
                "s3gen/ref/wav": whole["ref24"], "s3gen/ref/sample_rate": np.int32(24000)})
    out.update({f"s3gen/ref/{k}": whole[f"ref_{k}"] for k in ("prompt_token", "prompt_feat", "embedding")})
    return out

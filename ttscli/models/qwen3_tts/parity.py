"""``ttscli parity`` for Qwen3-TTS: goldens from the upstream reference, or MLX vs Core ML.

``--golden FILE.npz`` (format: docs/parity.md) runs every check whose arrays the file holds:
prompt embeddings, prefill logits/hidden, greedy frames, speech-decoder waveform; two internal
consistency checks (batched vs sequential prefill, streamed vs one-shot decode) always run.
``--against coreml`` (or ``mlx`` with ``--code-decoder-backend coreml``) compares the two
talkers on one prompt: prefill logits and greedy frames.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli.errors import BackendUnavailableError, GenerationError, UsageError
from ttscli.models.base import Check, LoadOptions, cosine, max_abs

_LOG = logging.getLogger(__name__)

SIMILAR = 0.99999        # float32 vs float32: only summation order differs
EXACT_TOL = 1e-4         # absolute, on embeddings / logits / [-1, 1] audio
COREML_COSINE = 0.999    # Core ML packages may compute in float16
STREAM_CHUNKS = (3, 8)   # first chunk, later chunks (frames): several chunk boundaries in 40 frames
KNOWN_KEYS = {"case/json", "prompt/embeds", "prompt/trailing", "prompt/tts_pad", "prefill/embeds",
              "prefill/logits", "prefill/hidden", "greedy/codes", "greedy/zero_eos_row",
              "decoder/codes", "decoder/audio"}


def read_golden(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            g = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001  (zip / npy format errors come in many types)
        raise UsageError(f"--golden {path}: not a readable .npz ({e})") from None
    unknown = sorted(set(g) - KNOWN_KEYS)
    if unknown:
        _LOG.warning("--golden %s: ignoring unknown arrays %s", path, ", ".join(unknown))
    if not set(g) & (KNOWN_KEYS - {"greedy/zero_eos_row"}):
        raise UsageError(f"--golden {path} holds none of the Qwen3-TTS golden arrays (see docs/parity.md)")
    for need, needs in (("prompt/embeds", "case/json"), ("greedy/codes", "case/json"),
                        ("prefill/logits", "prefill/embeds"), ("prefill/hidden", "prefill/embeds"),
                        ("decoder/audio", "decoder/codes")):
        if need in g and needs not in g:
            raise UsageError(f"--golden {path}: {need} needs its input {needs} in the same file")
    if "case/json" in g:
        try:
            g["case"] = json.loads(str(g["case/json"]))
        except ValueError as e:
            raise UsageError(f"--golden {path}: case/json is not JSON ({e})") from None
    return g


def _shape(g: dict, key: str, shape: tuple, path) -> np.ndarray:
    a = g[key]
    if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise UsageError(f"--golden {path}: {key} has shape {list(a.shape)}, expected {want}")
    return a


def prompt_from_case(model, tokenizer, case: dict):
    from ttscli.models.qwen3_tts.prompt import VoicePrompt, prepare

    voice = None
    if case.get("x_vector") is not None:
        codes = case.get("ref_code")
        codes = None if codes is None or case.get("x_vector_only") else mx.array(np.array(codes, np.int32))
        voice = VoicePrompt(mx.array(np.array(case["x_vector"], np.float32)), codes, case.get("ref_text"))
    return prepare(model.talker, model.args, tokenizer, case["text"], language=case.get("language", "auto"),
                   speaker=case.get("speaker"), instruct=case.get("instruct"), voice=voice,
                   non_streaming=case.get("non_streaming"))


def default_prompt(model, tokenizer):
    """A fixed request valid for every model kind (for --against, which has no golden)."""
    a = model.args
    case = {"text": "Parity check: one, two, three.", "language": "english"}
    if a.tts_model_type == "custom_voice":
        case["speaker"] = a.speakers[0]
    elif a.tts_model_type == "voice_design":
        case["instruct"] = "A calm, clear voice."
    else:
        dim = (a.speaker_encoder_config or {}).get("enc_dim", a.talker_config.hidden_size)
        case["x_vector"] = (np.random.default_rng(0).standard_normal(dim) * 0.5).tolist()
    return prompt_from_case(model, tokenizer, case)


def zero_eos_row(model) -> None:
    w = model.talker.codec_head.weight
    eos = model.args.talker_config.codec_eos_token_id
    model.talker.codec_head.weight = mx.where(mx.arange(w.shape[0])[:, None] == eos, 0.0, w)


def greedy_frames(model, decoder, prompt, gen, n: int, ignore_eos: bool = False) -> np.ndarray:
    """Up to ``n`` frames ``[F, 16]`` with greedy talker and sub-talker (fewer if EOS comes first,
    unless ``ignore_eos``: then EOS is masked out and exactly ``n`` frames come back)."""
    from ttscli.models.qwen3_tts.loop import LoopConfig, generate_frames
    from ttscli.lm import SamplingParams

    cfg = LoopConfig.from_generation_config(gen, {"do_sample": False, "subtalker_do_sample": False}, max_frames=n)
    cfg.sub = SamplingParams(do_sample=False)
    cfg.ignore_eos = ignore_eos
    out = []
    try:
        for f in generate_frames(model.talker, decoder, prompt, cfg):
            out.append(f)
    except GenerationError:
        pass                     # n frames without EOS: all we asked for
    return np.stack(out) if out else np.zeros((0, 16), np.int32)


def frames_check(name: str, ours: np.ndarray, ref: np.ndarray, detail: str = "") -> Check:
    n = min(len(ours), len(ref))
    same = 0
    while same < n and np.array_equal(ours[same], ref[same]):
        same += 1
    first = "" if same == max(len(ours), len(ref)) else f"; first difference at frame {same}"
    return Check(name, float(same), float(max(len(ours), len(ref))), "==",
                 f"{len(ours)} vs {len(ref)} frames{first}{detail}")


def prefill_consistency(model, embeds: mx.array) -> Check:
    from ttscli.lm import MLXCodeDecoder

    l1, h1 = MLXCodeDecoder(model.talker).prefill(embeds, model.talker.new_cache())
    l2, h2 = MLXCodeDecoder(model.talker, sequential=True).prefill(embeds, model.talker.new_cache())
    err = max(max_abs(np.array(l1), np.array(l2)), max_abs(np.array(h1), np.array(h2)))
    return Check("internal: batched vs sequential prefill (max abs)", err, EXACT_TOL, "<=",
                 f"{embeds.shape[1]} positions, logits and hidden")


def stream_consistency(dec, codes: np.ndarray) -> Check:
    from ttscli.codecs.qwen3_12hz.streaming import stream_decode

    codes = np.maximum(np.asarray(codes), 0).astype(np.int32)
    one = np.array(dec(mx.array(codes)).astype(mx.float32))
    chunks = list(stream_decode(dec, codes, *STREAM_CHUNKS))
    streamed = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return Check("internal: streamed vs one-shot decoder (max abs)", max_abs(streamed, one), EXACT_TOL, "<=",
                 f"{len(codes)} frames in {len(chunks)} chunks")


def reprime_consistency(dec, codes: np.ndarray) -> Check:
    """A fixed-slot decoder cache small enough to re-prime at least twice, against one pass."""
    from ttscli.codecs.qwen3_12hz.streaming import StreamingDecoder

    context = dec.args.sliding_window - 1
    codes = np.maximum(np.asarray(codes), 0).astype(np.int32)
    if len(codes) < context + 25:
        rng = np.random.default_rng(1)
        codes = rng.integers(0, dec.args.codebook_size, (context + 25, dec.args.num_quantizers)).astype(np.int32)
    capacity = context + max(1, (len(codes) - context) // 2 - 1)
    one = np.array(dec(mx.array(codes)).astype(mx.float32))
    s = StreamingDecoder(dec, *STREAM_CHUNKS, kv_capacity=capacity)
    chunks = s.push(codes)
    tail = s.flush()
    ours = np.concatenate(chunks + ([tail] if tail is not None else []))
    err = max_abs(ours, one) if s.reprimes else float("inf")     # no re-prime: nothing was checked
    return Check("internal: re-primed fixed-slot vs one-shot decoder (max abs)", err, EXACT_TOL, "<=",
                 f"{len(codes)} frames through {capacity} slots, {s.reprimes} re-primes")


def _load(checkpoint: Path, backend: str | None, need_decoder: bool):
    from ttscli.models.qwen3_tts.load import load_code_decoder
    from ttscli.models.qwen3_tts.load import load_model, load_tokenizer
    from ttscli.codecs.qwen3_12hz import load_speech_decoder

    model, gen = load_model(checkpoint, "float32")
    tok = load_tokenizer(checkpoint)
    backend = backend or "mlx"
    code_decoder = load_code_decoder(backend, model, checkpoint, LoadOptions(backends={"code_decoder": backend}))
    dec = load_speech_decoder(Path(checkpoint) / "speech_tokenizer") if need_decoder else None
    return model, gen, tok, code_decoder, dec


def golden_checks(checkpoint: Path, golden: Path, frames: int, backend: str | None) -> list[Check]:
    g = read_golden(golden)
    model, gen, tok, code_decoder, dec = _load(checkpoint, backend, need_decoder=True)
    H = model.args.talker_config.hidden_size
    V = model.args.talker_config.vocab_size
    if bool(g.get("greedy/zero_eos_row", False)):
        zero_eos_row(model)
        if (backend or "").startswith("onnx"):   # its graphs hold the head: build them from the edited model
            from ttscli.models.qwen3_tts.load import load_code_decoder

            code_decoder = load_code_decoder(backend, model, None, LoadOptions(backends={"code_decoder": backend}))
    checks: list[Check] = []
    prompt = None
    if "case" in g:
        prompt = prompt_from_case(model, tok, g["case"])
    if "prompt/embeds" in g:
        ref = [_shape(g, "prompt/embeds", (None, H), golden)]
        ours = [np.array(prompt.embeds[0])]
        if "prompt/trailing" in g:
            ref.append(_shape(g, "prompt/trailing", (None, H), golden))
            ours.append(np.array(prompt.trailing[0]))
        if "prompt/tts_pad" in g:
            ref.append(_shape(g, "prompt/tts_pad", (H,), golden))
            ours.append(np.array(prompt.tts_pad).reshape(-1))
        err = max(max_abs(o, r) for o, r in zip(ours, ref))
        shapes = " + ".join(f"{list(r.shape)}" for r in ref)
        parts = ", ".join(k.split("/")[1] for k in ("prompt/embeds", "prompt/trailing", "prompt/tts_pad") if k in g)
        checks.append(Check("prompt embeddings vs golden (max abs)", err, EXACT_TOL, "<=", f"{parts}: {shapes}"))
    embeds = None
    if "prefill/embeds" in g:
        embeds = mx.array(_shape(g, "prefill/embeds", (None, H), golden).astype(np.float32))[None]
    elif prompt is not None:
        embeds = prompt.embeds
    if "prefill/logits" in g or "prefill/hidden" in g:
        logits, hidden = code_decoder.prefill(embeds, code_decoder.new_cache())
        if "prefill/logits" in g:
            checks.append(Check("prefill logits vs golden (cosine)",
                                cosine(np.array(logits[0]), _shape(g, "prefill/logits", (V,), golden)), SIMILAR, ">=",
                                f"last of {embeds.shape[1]} positions, {V} logits"))
        if "prefill/hidden" in g:
            checks.append(Check("prefill hidden vs golden (cosine)",
                                cosine(np.array(hidden[0]), _shape(g, "prefill/hidden", (H,), golden)), SIMILAR, ">=",
                                f"last of {embeds.shape[1]} positions, post-norm"))
    if "greedy/codes" in g:
        ref = _shape(g, "greedy/codes", (None, 16), golden)
        n = min(frames, len(ref))
        ours = greedy_frames(model, code_decoder, prompt, gen, n)
        note = f" (--frames {frames}, golden has {len(ref)})" if frames > len(ref) else ""
        checks.append(frames_check("greedy frames vs golden (all 16 codes)", ours, ref[:n], note))
    if embeds is None:
        embeds = default_prompt(model, tok).embeds
    checks.append(prefill_consistency(model, embeds))
    if "decoder/codes" in g:
        codes = _shape(g, "decoder/codes", (None, dec.args.num_quantizers), golden)
        if "decoder/audio" in g:
            ref = _shape(g, "decoder/audio", (None,), golden)
            ours = dec.chunked_decode(codes)
            checks.append(Check("speech decoder vs golden waveform (max abs)", max_abs(ours, ref), EXACT_TOL, "<=",
                                f"{len(codes)} frames, {ours.size} vs {ref.size} samples"))
    else:
        rng = np.random.default_rng(0)
        codes = rng.integers(0, dec.args.codebook_size, (40, dec.args.num_quantizers))
    checks.append(stream_consistency(dec, codes))
    checks.append(reprime_consistency(dec, codes))
    return checks


def against_checks(checkpoint: Path, against: str, frames: int, backend: str | None) -> list[Check]:
    from ttscli.backends.coreml import coreml_available
    from ttscli.models.qwen3_tts.load import load_code_decoder

    ours = backend or "mlx"
    if against.startswith("onnx") and ours == "mlx":
        return onnx_checks(checkpoint, against, frames)
    if ours.startswith("onnx") and against == "mlx":
        return onnx_checks(checkpoint, ours, frames)
    if against not in ("mlx", "coreml"):
        raise UsageError(f"--against {against}: Qwen3-TTS compares the mlx and coreml talkers; "
                         "for upstream numbers use --golden FILE.npz")
    if against == ours:
        raise UsageError(f"--against {against} compares with the other backend; "
                         f"use --against {'coreml' if ours == 'mlx' else 'mlx'}")
    ok, why = coreml_available()
    if not ok:
        raise BackendUnavailableError(f"{why}; `ttscli parity --against coreml` runs on a Mac")
    model, gen, tok, a, _ = _load(checkpoint, ours, need_decoder=False)
    b = load_code_decoder(against, model, checkpoint, LoadOptions(backends={"code_decoder": against}))
    return compare_code_decoders(model, gen, tok, a, b, ours, against, frames)


def compare_code_decoders(model, gen, tok, a, b, name_a: str, name_b: str, frames: int,
                          min_cosine: float = COREML_COSINE) -> list[Check]:
    """Two talkers behind loop.CodeDecoder (embeddings, code predictor and sampling shared) on
    the fixed request of :func:`default_prompt`: prefill logits and greedy frames."""
    prompt = default_prompt(model, tok)
    la, _ = a.prefill(prompt.embeds, a.new_cache())
    lb, _ = b.prefill(prompt.embeds, b.new_cache())
    checks = [Check(f"prefill logits {name_a} vs {name_b} (cosine)", cosine(np.array(la), np.array(lb)),
                    min_cosine, ">=", f"{prompt.embeds.shape[1]} positions")]
    # EOS masked on both sides (the Core ML head cannot be edited): always `frames` frames
    fa = greedy_frames(model, a, prompt, gen, frames, ignore_eos=True)
    fb = greedy_frames(model, b, prompt, gen, frames, ignore_eos=True)
    checks.append(frames_check(f"greedy frames {name_a} vs {name_b} (all 16 codes)", fa, fb))
    return checks


ONNX_COSINE = {"float32": SIMILAR, "int8": 0.999, "int4": 0.9}


def onnx_checks(checkpoint: Path, against: str, frames: int) -> list[Check]:
    """MLX float32 vs the onnxruntime graphs (``onnx``: every precision) on the fixed request:
    prefill logits cosine (onnxruntime's own prefill, not the MLX hand-over) and greedy frames,
    which must all agree at float32 and are reported at int8/int4 (one flipped code changes
    every later frame, so agreement there measures drift, not correctness)."""
    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.onnx.graph import Quant
    from ttscli.backends.select import split_backend
    from ttscli.models.qwen3_tts.onnx_decoder import open_decoder
    from ttscli.models.qwen3_tts.onnx_export import find_or_build

    require_onnxruntime()
    precisions = ("float32", "int8", "int4") if against == "onnx" else (split_backend(against)[1],)
    model, gen, tok, ref, _ = _load(checkpoint, "mlx", need_decoder=False)
    prompt = default_prompt(model, tok)
    lr, _ = ref.prefill(prompt.embeds, ref.new_cache())
    fr = greedy_frames(model, ref, prompt, gen, frames, ignore_eos=True)
    checks = []
    for prec in precisions:
        dec = open_decoder(find_or_build(checkpoint, Quant(prec)), model, prefill="onnx")
        name = f"onnx-{prec}"
        lo, _ = dec.prefill(prompt.embeds, dec.new_cache())
        checks.append(Check(f"prefill logits mlx vs {name} (cosine)", cosine(np.array(lr), np.array(lo)),
                            ONNX_COSINE[prec], ">=", f"{prompt.embeds.shape[1]} positions"))
        fo = greedy_frames(model, dec, prompt, gen, frames, ignore_eos=True)
        c = frames_check(f"greedy frames mlx vs {name} (all 16 codes)", fo, fr)
        if prec != "float32":
            codes = float(np.mean(fo == fr)) if fo.shape == fr.shape else 0.0
            c = Check(c.name, c.value, 0.0, ">=", f"{c.detail}; reported, not required: "
                      f"{100 * codes:.0f}% of codes equal")
        checks.append(c)
    return checks


def parity_checks(spec, checkpoint: Path, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list[Check]:
    if (golden is None) == (against is None):
        raise UsageError("give exactly one of --golden FILE.npz or --against coreml|mlx|onnx")
    if frames < 1:
        raise UsageError("--frames must be at least 1")
    if golden is not None:
        return golden_checks(Path(checkpoint), Path(golden), frames, backend)
    return against_checks(Path(checkpoint), against, frames, backend)

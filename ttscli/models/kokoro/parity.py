"""``ttscli parity kokoro-82m --against onnxruntime``: our MLX model against the published graph.

Two references, both run by onnxruntime from the one published file (reference.py):

1. its **float twin** (the same graph on dequantized weights with float ops): durations equal,
   F0 and N within 1e-4 (rel L2), the harmonic source, the decoder fed the reference's own
   durations and STFT features within 1e-4, end to end within 0.1 rel L2 and 0.15 log-mel L1.
   End to end cannot be tighter: ORT's STFT leaves noise in the Nyquist bin's phase (a random
   +-pi) that feeds the noise convs; we use torch's convention (docs/parity.md).
2. the **int8 graph as published** (activations quantized per run, so no float model matches
   it sample for sample): durations within one frame per token, F0 within 1 %, N within 5 %,
   log-mel L1 with the int8 graph's durations <= 0.3; never a waveform bound (the source phase
   integrates F0, so 0.5 % of F0 error decorrelates the waveform within a quarter second).

The ONNX iSTFT leaves its output 1.5x torch.istft's (the level hexgrad's model makes); the
comparisons divide it out and skip the 10 samples at each end where the two differ.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ttscli.errors import UsageError
from ttscli.models.base import Check, rel_l2

# Fixed phoneme strings (misaki's output for the texts, the spec's §8), so parity does not depend
# on the text front end: American English and Japanese.
UTTERANCES = (
    ("en1", "ði kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˈOvəɹ ði lˈAzi dˈɔɡ."),
    ("ja1", "koɲɲiʨiβa, kʲoː βa iː teŋkʲi desɨ ne."),
)
VOICE = "jf_alpha"
EDGE = 10
TWIN = {"f0": 1e-4, "n": 1e-4, "har": 5e-3, "decoder": 1e-4, "audio": 0.1, "logmel": 0.15}
INT8 = {"f0": 0.01, "n": 0.05, "logmel": 0.3, "token_diff": 0.15, "total": 0.04}


def log_mel(y: np.ndarray, sr: int = 24000) -> np.ndarray:
    """ln of the 80-band mel magnitude spectrogram (n_fft 1024, hop 256), floored at 1e-5 as
    HiFi-GAN-style vocoders compress it."""
    from ttscli.eval.features import mel_filters, power_spectrogram

    mag = np.sqrt(power_spectrogram(np.asarray(y, np.float32), 1024, 256))
    return np.log(np.maximum(mag @ mel_filters(sr, 1024, 80).T, 1e-5))


def log_mel_l1(a: np.ndarray, b: np.ndarray) -> float:
    n = min(a.size, b.size)
    return float(np.mean(np.abs(log_mel(a[:n]) - log_mel(b[:n]))))


def _inner(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64).reshape(-1)[EDGE:-EDGE]


class Ours:
    """Our model's stages for one token list (numpy out)."""

    def __init__(self, model):
        self.model = model

    def run(self, tokens, style, durations=None, har_features=None) -> dict:
        import mlx.core as mx

        m = self.model
        toks = mx.array(np.asarray(tokens, np.int32).reshape(-1))
        s = mx.array(np.asarray(style, np.float32).reshape(-1))
        d, dur = m.durations(toks, s)
        mx.eval(dur)
        ours_dur = np.array(dur)
        if durations is not None:
            dur = mx.array(np.asarray(durations, np.float32).reshape(-1))
        p = m.prosody(toks, s, d, np.array(dur))
        har, feats = m.source(p.f0)
        if har_features is not None:
            feats = mx.array(np.asarray(har_features, np.float32).reshape(22, -1).T)
        audio = m.decode(p, s, feats)
        mx.eval(p.f0, p.n, har, audio)
        return {"durations": ours_dur, "f0": np.array(p.f0), "n": np.array(p.n), "har": np.array(har),
                "audio": np.array(audio)}


def references(onnx_path: Path, voices: dict, vocab: dict, utterances=UTTERANCES) -> list[dict]:
    """Per utterance: tokens, style row, and the outputs of the float twin (free and teacher-forced
    on its own durations and STFT features) and of the int8 graph."""
    from .load import style_row
    from .pipeline import tokens_of
    from .reference import OnnxKokoro

    twin = OnnxKokoro(onnx_path, float_twin=True)
    forced = OnnxKokoro(onnx_path, float_twin=True, teacher_forced=True)
    int8 = OnnxKokoro(onnx_path)
    out = []
    for name, ps in utterances:
        tokens = tokens_of(ps, vocab)
        style = style_row(voices[VOICE], len(ps))
        ref = twin(tokens, style)
        tf = forced(tokens, style, 1.0, ref["durations"], ref["har_features"])
        out.append({"name": name, "tokens": tokens, "style": style, "twin": ref, "forced": tf,
                    "int8": int8(tokens, style)})
    return out


def compare(model, refs: list[dict]) -> list[Check]:
    from .reference import ONNX_GAIN

    ours = Ours(model)
    w = {k: 0.0 for k in ("f0", "n", "har", "decoder", "audio", "logmel", "i_f0", "i_n", "i_logmel",
                          "i_diff", "i_total", "i_step")}
    dur_same = dur_total = 0
    for r in refs:
        tokens, style, ref, q = r["tokens"], r["style"], r["twin"], r["int8"]
        o = ours.run(tokens, style)
        same = (o["durations"].size == ref["durations"].size
                and np.array_equal(o["durations"], ref["durations"].reshape(-1)))
        dur_same += int(np.sum(o["durations"] == ref["durations"].reshape(-1)))
        dur_total += o["durations"].size
        o_tw = o if same else ours.run(tokens, style, ref["durations"])
        w["f0"] = max(w["f0"], rel_l2(o_tw["f0"], ref["f0"]))
        w["n"] = max(w["n"], rel_l2(o_tw["n"], ref["n"]))
        w["har"] = max(w["har"], rel_l2(o_tw["har"], ref["har"]))
        w["audio"] = max(w["audio"], rel_l2(_inner(o["audio"]), _inner(ref["audio"]) / ONNX_GAIN))
        w["logmel"] = max(w["logmel"], log_mel_l1(o["audio"], ref["audio"] / ONNX_GAIN))
        o_tf = ours.run(tokens, style, ref["durations"], ref["har_features"])
        w["decoder"] = max(w["decoder"], rel_l2(_inner(o_tf["audio"]), _inner(r["forced"]["audio"]) / ONNX_GAIN))

        qd = q["durations"].reshape(-1)
        diff = np.abs(o["durations"] - qd)
        w["i_step"] = max(w["i_step"], float(diff.max()))
        w["i_diff"] = max(w["i_diff"], float(np.mean(diff > 0)))
        w["i_total"] = max(w["i_total"], abs(float(o["durations"].sum() - qd.sum())) / float(qd.sum()))
        o_q = ours.run(tokens, style, qd)
        w["i_f0"] = max(w["i_f0"], rel_l2(o_q["f0"], q["f0"]))
        w["i_n"] = max(w["i_n"], rel_l2(o_q["n"], q["n"]))
        w["i_logmel"] = max(w["i_logmel"], log_mel_l1(o_q["audio"], q["audio"] / ONNX_GAIN))
    where = f"worst of {', '.join(r['name'] for r in refs)}; voice {VOICE}"
    return [
        Check("float twin: durations equal (tokens)", float(dur_same), float(dur_total), "==", where),
        Check("float twin: F0 (rel L2)", w["f0"], TWIN["f0"], "<=", where),
        Check("float twin: N (rel L2)", w["n"], TWIN["n"], "<=", where),
        Check("float twin: harmonic source (rel L2)", w["har"], TWIN["har"], "<=",
              where + "; float32 phase of ~1e5 rad, summed in another order"),
        Check("float twin: decoder on its durations + STFT features (rel L2)", w["decoder"], TWIN["decoder"], "<=",
              where + "; ONNX audio / 1.5, 10 edge samples skipped"),
        Check("float twin: end to end (rel L2)", w["audio"], TWIN["audio"], "<=",
              where + "; torch's STFT phase convention vs ORT's noisy Nyquist phase"),
        Check("float twin: end to end (log-mel L1)", w["logmel"], TWIN["logmel"], "<=", where),
        Check("int8 graph: largest duration difference (frames)", w["i_step"], 1.0, "<=", where),
        Check("int8 graph: share of tokens whose duration differs", w["i_diff"], INT8["token_diff"], "<=", where),
        Check("int8 graph: total duration difference (share)", w["i_total"], INT8["total"], "<=", where),
        Check("int8 graph: F0 (rel L2)", w["i_f0"], INT8["f0"], "<=", where + "; with its durations"),
        Check("int8 graph: N (rel L2)", w["i_n"], INT8["n"], "<=", where + "; with its durations"),
        Check("int8 graph: log-mel L1 with its durations", w["i_logmel"], INT8["logmel"], "<=", where),
    ]


def onnx_checks(model, onnx_path: Path, voices: dict, vocab: dict, utterances=UTTERANCES) -> list[Check]:
    return compare(model, references(onnx_path, voices, vocab, utterances))


def decoder_backends_check(model, onnx_model, voices: dict, vocab: dict, utterances=UTTERANCES) -> Check:
    """The onnxruntime decoder (our weights exported, onnx_export.py) against our MLX decoder, both
    fed the MLX model's prosody and STFT features: largest sample difference over the peak."""
    import mlx.core as mx

    from .load import style_row
    from .pipeline import tokens_of

    worst = 0.0
    for _, ps in utterances:
        toks = mx.array(tokens_of(ps, vocab), dtype=mx.int32)
        s = mx.array(style_row(voices[VOICE], len(ps)))
        d, dur = model.durations(toks, s)
        mx.eval(dur)
        p = model.prosody(toks, s, d, dur)
        _, feats = model.source(p.f0)
        ref = np.array(model.decode(p, s, feats))
        got = np.array(onnx_model.decode(p, s, feats))
        worst = max(worst, float(np.abs(got - ref).max() / np.abs(ref).max()))
    return Check("onnx backend: decoder vs our MLX decoder, same features (max abs / peak)", worst, 1e-4, "<=",
                 f"worst of {', '.join(n for n, _ in utterances)}; voice {VOICE}; float32 both")


def golden_checks(model, golden: Path) -> list[Check]:
    """``--golden FILE.npz`` (docs/parity.md): tokens, style [256], speed, audio at torch's level;
    optional durations, f0, n, and har_features (the STFT features of the reference's harmonic
    source, its random draws in them).

    With ``har_features`` our decoder runs on the golden's durations and those features, so it
    sees exactly the reference's inputs and is held to the float32 bound sample for sample;
    the audio is also compared end to end (our source draws none) by log-mel L1."""
    try:
        with np.load(golden, allow_pickle=False) as z:
            g = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"--golden {golden}: not a readable .npz ({e})") from None
    missing = [k for k in ("tokens", "style", "audio") if k not in g]
    if missing:
        raise UsageError(f"--golden {golden} lacks {', '.join(missing)} (Kokoro format: docs/parity.md)")
    import mlx.core as mx

    tokens = mx.array(np.asarray(g["tokens"]).reshape(-1).astype(np.int32))
    style = mx.array(np.asarray(g["style"], np.float32).reshape(-1))
    speed = float(g.get("speed", 1.0))
    d, dur = model.durations(tokens, style, speed)
    mx.eval(dur)
    where = f"{tokens.size} tokens, speed {speed:g}"
    checks = []
    if "durations" in g:
        checks.append(Check("durations equal golden (tokens)",
                            float(np.sum(np.array(dur) == g["durations"].reshape(-1))), float(tokens.size), "=="))
        dur = mx.array(np.asarray(g["durations"], np.float32).reshape(-1))
    p = model.prosody(tokens, style, d, np.array(dur))
    _, feats = model.source(p.f0)
    for key, name in (("f0", "F0"), ("n", "N")):
        if key in g:
            checks.append(Check(f"{name} vs golden (rel L2)", rel_l2(np.array(getattr(p, key)), g[key]),
                                TWIN[key], "<="))
    ref = np.asarray(g["audio"], np.float32).reshape(-1)
    if "har_features" in g:
        forced = np.array(model.decode(p, style, mx.array(np.asarray(g["har_features"], np.float32).reshape(22, -1).T)))
        checks.append(Check("decoder on the golden's durations + STFT features vs golden audio (rel L2)",
                            rel_l2(_inner(forced), _inner(ref)) if forced.size == ref.size else float("inf"),
                            TWIN["decoder"], "<=", f"{where}; {EDGE} edge samples skipped"))
    audio = np.array(model.decode(p, style, feats))
    checks.append(Check("audio vs golden (log-mel L1)", log_mel_l1(audio, ref), TWIN["logmel"], "<=", where))
    return checks


def parity_checks(spec, checkpoint: Path | None, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list[Check]:
    from .load import (
        checkpoint_or_default,
        converted_cache,
        describe,
        load_model,
        load_voices,
        onnx_path_of,
        read_vocab,
    )

    if (golden is None) == (against is None):
        raise UsageError("give exactly one of --golden FILE.npz or --against onnxruntime")
    if against is not None and against not in ("onnxruntime", "onnx"):
        raise UsageError(f"--against {against}: Kokoro is compared with its ONNX graph; use --against onnxruntime")
    if backend not in (None, "mlx", "onnx"):
        raise UsageError(f"--code-decoder-backend {backend}: Kokoro's decoder runs on mlx or onnx")
    checkpoint = checkpoint_or_default(checkpoint)
    model = load_model(checkpoint, converted_cache(spec))
    subject = model
    if backend == "onnx":
        from .onnx_runtime import open_model  # its sessions say in one line when onnxruntime is missing

        subject = open_model(model, checkpoint, getattr(spec, "id", "kokoro-82m"))
    if golden is not None:
        return golden_checks(subject, Path(golden))
    info = describe(checkpoint)
    voices, vocab = load_voices(checkpoint), read_vocab(info["vocab"])
    checks = onnx_checks(subject, onnx_path_of(checkpoint, converted_cache(spec)), voices, vocab)
    if backend == "onnx":
        checks.append(decoder_backends_check(model, subject, voices, vocab))
    return checks

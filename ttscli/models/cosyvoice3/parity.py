"""``ttscli parity cosyvoice3 --golden FILE.npz --model-dir DIR``: the LM, the DiT flow and the
causal HiFT of the checkpoint in DIR against goldens computed by upstream's code on the same
checkpoint (scripts/goldens/cosyvoice3_upstream.py; the format is in docs/parity.md).

Every figure is computed from the recorded inputs (prompt ids, tokens, prompt mel, x-vector,
and the fixed noise upstream's flow and harmonic source read), so it measures the modules alone.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


REQUIRED = ("lm_text", "lm_prompt_speech", "lm_hidden", "lm_logp", "lm_greedy", "flow_tokens", "flow_prompt_tokens",
            "flow_prompt_feat", "flow_embedding", "flow_noise", "flow_mel", "flow_mel_stream", "flow_mel_chunk",
            "flow_chunk_tokens", "hift_mel", "hift_sine_noise", "hift_f0", "hift_source", "hift_wav")


def read_golden(path: Path) -> dict[str, np.ndarray]:
    from ttscli.models.base import read_golden_npz

    return read_golden_npz(path, REQUIRED)


def peak_error(ours: np.ndarray, ref: np.ndarray) -> float:
    """max |ours - ref| / max |ref| (inf when the shapes differ)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return float("inf")
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-12))


def greedy_tokens(lm, embeds, n: int, sampling) -> list[int]:
    from ttscli.models.cosyvoice3.llm import Draw

    out = []
    for tok in lm.generate(embeds, Draw(sampling, np.random.default_rng(0), greedy=True), 0, n + 1):
        out.append(tok)
        if len(out) == n:
            break
    return out


def parity_checks(spec, checkpoint: Path | None, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list:
    import mlx.core as mx

    from ttscli.models.base import Check, golden_only, cosine
    from ttscli.models.cosyvoice3.config import read_args
    from ttscli.models.cosyvoice3.load import load_flow, load_hift, load_llm

    golden_only("cosyvoice3", checkpoint, golden, against, backend)
    g = read_golden(golden)
    args = read_args(Path(checkpoint))
    lm, flow, hift = load_llm(checkpoint, args), load_flow(checkpoint, args), load_hift(checkpoint, args)

    embeds = lm.prompt(g["lm_text"].tolist(), g["lm_prompt_speech"].tolist())
    hidden = lm.backbone(input_embeddings=embeds)
    logp_err = float(np.abs(np.array(lm.logp(hidden)[0]) - g["lm_logp"]).max())
    checks = [Check("LM prefill hidden (cosine)", cosine(np.array(hidden[0]), g["lm_hidden"]), 0.99999, ">="),
              Check("LM last log-probs (max abs error)", logp_err, 1e-4, "<=")]
    n = min(frames, len(g["lm_greedy"]))
    ours = greedy_tokens(lm, embeds, n, args.sampling)
    same = sum(int(a == b) for a, b in zip(ours, g["lm_greedy"][:n].tolist()))
    checks.append(Check(f"LM greedy tokens equal (of {n})", same, n, "==", f"ours {ours}"))
    from ttscli.backends.onnx.runtime import onnx_available

    if onnx_available()[0]:
        # the LM's float32 graph (--backend code_decoder=onnx-f32) against the same goldens
        from ttscli.models.cosyvoice3.onnx_lm import attach

        on_onnx = load_llm(checkpoint, args)
        attach(on_onnx, "onnx-f32", Path(checkpoint), getattr(spec, "id", None))
        logits, _ = on_onnx.decoder.prefill(embeds, on_onnx.decoder.new_cache())
        err = float(np.abs(np.array(on_onnx.log_softmax(logits)[0]) - g["lm_logp"]).max())
        checks.append(Check("LM last log-probs, onnxruntime float32 (max abs error)", err, 1e-4, "<="))
        got = greedy_tokens(on_onnx, embeds, n, args.sampling)
        checks.append(Check(f"LM greedy tokens equal, onnxruntime float32 (of {n})",
                            sum(int(a == b) for a, b in zip(got, g["lm_greedy"][:n].tolist())), n, "==",
                            f"ours {got}"))

    noise = mx.array(g["flow_noise"])
    flows = [("", flow)]
    from ttscli.backends.onnx.runtime import onnx_available

    if onnx_available()[0]:
        # the DiT on onnxruntime (--backend flow_estimator=onnx) against the same goldens
        from ttscli.codecs.s3gen import onnx_dit

        on_onnx = load_flow(checkpoint, args)
        onnx_dit.attach(on_onnx, Path(checkpoint), getattr(spec, "id", None))
        flows.append((", DiT on onnxruntime", on_onnx))
    for label, f in flows:
        for key, streaming, finalize in (("flow_mel", False, True), ("flow_mel_stream", True, True),
                                         ("flow_mel_chunk", True, False)):
            tokens = g["flow_tokens"] if finalize else g["flow_tokens"][: int(g["flow_chunk_tokens"])]
            mel = f(mx.array(tokens), mx.array(g["flow_prompt_tokens"]), mx.array(g["flow_prompt_feat"]),
                    mx.array(g["flow_embedding"]), noise, streaming=streaming, finalize=finalize)
            checks.append(Check(f"{key}{label} (max error / peak)", peak_error(np.array(mel), g[key]), 1e-4, "<="))

    mel = mx.array(g["hift_mel"])
    wav, source = hift(mel, mx.array(g["hift_sine_noise"]))
    f0 = np.array(hift.f0_predictor(mel))
    checks += [Check("HiFT F0 (max error / peak)", peak_error(f0, g["hift_f0"]), 1e-4, "<="),
               Check("HiFT source (max error / peak)", peak_error(np.array(source), g["hift_source"]), 1e-4, "<="),
               Check("HiFT waveform (max error / peak)", peak_error(np.array(wav), g["hift_wav"]), 1e-4, "<=")]
    return checks

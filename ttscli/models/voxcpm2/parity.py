"""`ttscli parity voxcpm2 --golden FILE.npz --model-dir DIR`: the pipeline against upstream goldens.

Keys (docs/parity.md; scripts/goldens/voxcpm2_upstream.py writes them): ``text`` (the target
text) and ``prompt_text`` (the continuation transcript); ``ref_wav`` / ``prompt_wav`` (16 kHz
reference and continuation recordings) with their patches ``ref_feat`` / ``prompt_feat [T, P, D]``;
per mode (``plain``, ``clone``, ``continuation``, ``clone_continuation``): the prompt
``{mode}_tokens`` / ``_text_mask`` / ``_feat_mask [1, T]`` and ``_feat [1, T, P, D]``, the prefill
hidden states ``_base_hidden`` / ``_residual_hidden [1, T, H]``, the diffusion noise upstream drew
``_noise [n, 1, D, P]`` (fed to ours), the generated ``_patches [n, P, D]``, the stop logits
``_stop_logits [n, 2]`` and the waveform ``_audio [1, 1, S]`` (the AudioVAE over the continuation
context and the generated patches); ``stream_chunk_lengths`` and ``stream_audio`` (upstream's
streamed decode of the plain mode, one chunk per patch).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ttscli.errors import UsageError

MODES = ("plain", "clone", "continuation", "clone_continuation")
REQUIRED = ("text", "prompt_text", "ref_wav", "prompt_wav", "stream_audio",
            *(f"{m}_{k}" for m in MODES for k in ("tokens", "feat", "base_hidden", "residual_hidden", "noise",
                                                  "patches", "stop_logits", "audio")))
STEPS, CFG = 10, 2.0      # the goldens' settings: upstream's defaults


def read_golden(path: Path) -> dict[str, np.ndarray]:
    try:
        g = dict(np.load(path, allow_pickle=False))
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: not a readable .npz of arrays ({e})") from None
    missing = [k for k in REQUIRED if k not in g]
    if missing:
        raise UsageError(f"{path}: missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                         "(format: docs/parity.md)")
    return g


def voice_of(pipe, g: dict[str, np.ndarray], mode: str):
    """The mode's voice prompt from the goldens' two recordings (a ttscli clone plays one
    recording in both parts; the goldens keep them apart so each part is checked)."""
    from .pipeline import VoicePrompt

    ref = pipe.encode_audio(g["ref_wav"].astype(np.float32), "right") if "clone" in mode else None
    cont = "continuation" in mode
    prompt = pipe.encode_audio(g["prompt_wav"].astype(np.float32), "left") if cont else None
    return None if mode == "plain" else VoicePrompt(ref=ref, prompt=prompt,
                                                    prompt_text=str(g["prompt_text"]) if cont else "")


def replay(pipe, g: dict[str, np.ndarray], mode: str, **fields) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Our generation of a golden mode with upstream's recorded noise: (audio chunks, patches)."""
    import mlx.core as mx

    from ttscli.models.base import Request

    noise = iter(g[f"{mode}_noise"])
    voice = voice_of(pipe, g, mode)
    got: list[np.ndarray] = []
    latents = pipe.latents

    def record(r, v):
        for patch in latents(r, v):
            got.append(np.array(patch[0].astype(mx.float32)))
            yield patch

    pipe.noise = lambda keys: mx.array(next(noise).transpose(0, 2, 1))
    pipe.voice_prompt = lambda r: voice
    pipe.latents = record
    try:
        req = Request(text=str(g["text"]), seed=0, knobs={"inference_timesteps": STEPS, "cfg_value": CFG}, **fields)
        audio = list(pipe.generate(req))
    finally:
        del pipe.noise, pipe.voice_prompt, pipe.latents
    return audio, got


def _err(ours: np.ndarray, ref: np.ndarray) -> float:
    if ours.shape != ref.shape:
        return float("inf")
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-12))


def mode_checks(pipe, g: dict[str, np.ndarray], mode: str) -> list:
    from ttscli.models.base import Check, Request, cosine

    from .generate import prefill

    voice = voice_of(pipe, g, mode)
    text = pipe.request_text(Request(text=str(g["text"])), voice)
    p = pipe.prompt(text, voice)
    checks = [Check(f"{mode}: prompt tokens", int(np.array(p.tokens).tolist() == g[f"{mode}_tokens"].tolist()), 1,
                    "==", f"ours {p.tokens.shape[1]}, golden {g[f'{mode}_tokens'].shape[1]}"),
              Check(f"{mode}: prompt patches, max error / peak", _err(np.array(p.feats), g[f"{mode}_feat"]),
                    1e-4, "<=")]
    pre = prefill(pipe.model, p)
    checks.append(Check(f"{mode}: LM prefill hidden (cosine)", cosine(np.array(pre.base_hidden),
                                                                      g[f"{mode}_base_hidden"]), 0.99999, ">="))
    checks.append(Check(f"{mode}: residual LM prefill hidden (cosine)", cosine(np.array(pre.residual_all),
                                                                               g[f"{mode}_residual_hidden"]),
                        0.99999, ">="))
    audio, got = replay(pipe, g, mode)
    want = g[f"{mode}_patches"]
    checks.append(Check(f"{mode}: patches until stop", len(got), len(want), "=="))
    checks.append(Check(f"{mode}: patches with upstream's noise, max error / peak",
                        _err(np.stack(got), want) if len(got) == len(want) else float("inf"), 1e-4, "<="))
    ref = g[f"{mode}_audio"].reshape(-1)
    wav = np.concatenate(audio)
    ref = ref[len(ref) - len(wav):] if len(wav) <= len(ref) else ref    # upstream's audio holds the context
    checks.append(Check(f"{mode}: waveform, max error / peak", _err(wav, ref), 1e-4, "<=",
                        f"ours {wav.size} samples, golden {g[f'{mode}_audio'].size} with context"))
    return checks


def parity_checks(spec, checkpoint: Path | None, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list:
    from ttscli.models.base import Check, LoadOptions

    from .load import load_pipeline

    if against is not None or golden is None:
        raise UsageError("voxcpm2 parity compares with upstream goldens only: --golden FILE.npz "
                         "(format: docs/parity.md)")
    if backend not in (None, "mlx"):
        raise UsageError(f"voxcpm2 runs on mlx only (asked for {backend})")
    if checkpoint is None:
        raise UsageError("voxcpm2 parity needs the checkpoint the goldens came from (--model-dir)")
    g = read_golden(golden)
    pipe = load_pipeline(spec, Path(checkpoint), LoadOptions(dtype="float32"))
    checks = []
    for mode in MODES:
        checks += mode_checks(pipe, g, mode)
    chunks, _ = replay(pipe, g, "plain", stream=True, first_chunk_frames=1, chunk_frames=1)
    lengths = [len(c) for c in chunks]
    checks.append(Check("streamed chunk lengths (one per patch)", int(lengths == g["stream_chunk_lengths"].tolist()),
                        1, "==", f"ours {lengths}"))
    checks.append(Check("streamed waveform, max error / peak",
                        _err(np.concatenate(chunks), g["stream_audio"].reshape(-1)), 1e-4, "<="))
    from ttscli.backends.onnx.runtime import onnx_available

    if onnx_available()[0]:
        # the LocDiT and LocEnc on onnxruntime (--backend flow_estimator=onnx --backend
        # patch_encoder=onnx) against the same goldens, and the LMs' float32 graphs with them
        local = {"flow_estimator": "onnx-f32", "patch_encoder": "onnx"}     # the Linux CPU defaults
        for label, backends in (("DiT and patch encoder on onnxruntime", {**local, "lm": "mlx"}),
                                ("LMs, DiT and patch encoder on onnxruntime", {**local, "lm": "onnx-f32"})):
            pipe = load_pipeline(spec, Path(checkpoint), LoadOptions(dtype="float32", backends=backends))
            for mode in MODES:
                audio, got = replay(pipe, g, mode)
                want = g[f"{mode}_patches"]
                checks.append(Check(f"{label}, {mode}: patches with upstream's noise, max error / peak",
                                    _err(np.stack(got), want) if len(got) == len(want) else float("inf"), 1e-4,
                                    "<=", f"{len(got)} patches, golden {len(want)}"))
    return checks

"""``ttscli parity`` for Piper voices.

``--against onnxruntime``: the MLX model (the converted weights ``speak`` uses) against the voice's
own ONNX graph under onnxruntime on a fixed set of sentences: waveform at zero noise, waveform
at the default noise scales with identical noise fed to both, frame counts at three length
scales, and phoneme ids against piper-tts when it is installed.
``--golden FILE.npz``: phoneme ids + scales (+ optional noise draws) -> audio recorded from any
VITS reference (format: docs/parity.md).
"""
from __future__ import annotations

import logging
from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli.errors import UsageError
from ttscli.models.base import Check, rel_l2

_LOG = logging.getLogger(__name__)

REL_L2 = 1e-3
SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Wait, what did you say?",
)
# phonemization is cheap: compare ids on more varied text than we synthesize
PHONEME_TEXTS = SENTENCES + (
    "It costs $3.50, or about 3 euros!",
    "Dr. Smith lives at 221B Baker Street; he was born in 1887.",
    "I can't believe it's already 10:30 p.m., can you?",
    "Hyphenated self-driving cars don't read e-mail.",
    "One sentence.\nAnother line, with a comma\tand a tab.",
)
LENGTH_SCALES = (0.7, 1.0, 1.5)


def _default_scales(spec) -> tuple[float, float, float]:
    d = dict(getattr(spec, "defaults", {}) or {})
    return float(d.get("noise_scale", 0.667)), float(d.get("length_scale", 1.0)), float(d.get("noise_w", 0.8))


def our_model(spec, onnx_path: Path):
    """The converted model ``ttscli speak`` would use (the cache, rebuilt when stale)."""
    from ttscli.paths import converted_dir

    from .load import _cached_model

    return _cached_model(onnx_path, converted_dir(spec.cache_id))


def synthesize(model, ids, noise_scale: float, length_scale: float, noise_w: float,
               dp_noise: np.ndarray | None = None, prior_noise: np.ndarray | None = None) -> np.ndarray:
    """Our audio for one id list; noise arrays in the ONNX graph's channel-first layout
    (``[2, T]``, ``[C, F]``), None for zeros."""
    x = mx.array([list(ids)])
    dp = None if dp_noise is None else mx.array(np.asarray(dp_noise, np.float32).T[None])
    m_p, logs_p, frames = model.durations(x, noise_w, length_scale, noise=dp)
    if prior_noise is not None and prior_noise.shape[-1] != int(np.maximum(frames, 0).sum()):
        # the draws were made for another length: let the length check report it
        return np.zeros(int(np.maximum(frames, 0).sum()) * model.args.hop_length, np.float32)
    prior = None if prior_noise is None else mx.array(np.asarray(prior_noise, np.float32).T[None])
    z = model.latents(m_p, logs_p, frames, noise_scale, noise=prior)
    return np.array(model.decode(z)).reshape(-1)


def onnx_checks(model, id_map: dict, espeak_voice: str, ref, scales: tuple[float, float, float],
                onnx_path: Path, seed: int = 0) -> list[Check]:
    """All ``--against onnxruntime`` checks. ``ref`` is a reference.OnnxVits (or alike)."""
    from .phonemize import text_to_ids

    hop = model.args.hop_length
    ids = [s for text in SENTENCES for s in text_to_ids(text, id_map, espeak_voice)]
    rng = np.random.default_rng(seed)
    noise_scale, length_scale, noise_w = scales

    worst_clean, worst_noisy, samples, noisy_note = 0.0, 0.0, 0, ""
    frames_same, frames_total, mismatches = 0, 0, []
    for n, s in enumerate(ids):
        ours = np.array(model(mx.array([s]), noise_scale=0.0, length_scale=1.0, noise_w=0.0)).reshape(-1)
        clean_ref = ref(s, 0.0, 1.0, 0.0)
        worst_clean = max(worst_clean, rel_l2(ours, clean_ref))
        samples += clean_ref.size

        dp = rng.standard_normal((2, len(s))).astype(np.float32)
        _, _, frames = model.durations(mx.array([s]), noise_w, length_scale, noise=mx.array(dp.T[None]))
        prior = rng.standard_normal((ref.channels, int(frames.sum()))).astype(np.float32)
        ours = synthesize(model, s, noise_scale, length_scale, noise_w, dp, prior)
        try:
            theirs = ref(s, noise_scale, length_scale, noise_w, dp[None], prior[None])
        except Exception:  # noqa: BLE001  (onnxruntime's broadcast failure: our draws fit our frame count only)
            theirs = None
            noisy_note = f"; sentence {n}: the reference made another number of frames"
        worst_noisy = max(worst_noisy, rel_l2(ours, theirs) if theirs is not None else float("inf"))

        for ls in LENGTH_SCALES:
            _, _, frames = model.durations(mx.array([s]), 0.0, ls)
            ref_frames = (clean_ref if ls == 1.0 else ref(s, 0.0, ls, 0.0)).size // hop
            frames_total += 1
            if int(frames.sum()) == ref_frames:
                frames_same += 1
            else:
                mismatches.append(f"sentence {n} x{ls}: {int(frames.sum())} vs {ref_frames}")

    where = f"{len(ids)} sentences, {samples} samples"
    checks = [
        Check("waveform at zero noise (rel L2)", worst_clean, REL_L2, "<=", f"worst of {where}"),
        Check(f"waveform at noise {noise_scale:g}/{noise_w:g}, same draws (rel L2)", worst_noisy, REL_L2, "<=",
              f"worst of {len(ids)} sentences, length scale {length_scale:g}{noisy_note}"),
    ]
    detail = f"{len(ids)} sentences x length scale {'/'.join(f'{x:g}' for x in LENGTH_SCALES)}"
    if mismatches:
        detail += "; " + ", ".join(mismatches[:3])
    frames_check = Check("frame counts (durations) equal", float(frames_same), float(frames_total), "==", detail)
    checks.append(frames_check)

    try:
        from piper import PiperVoice
    except ImportError:
        # Not a pass: the check is absent, and the report says so.
        note = "phoneme ids NOT compared: piper-tts is not installed (pip install piper-tts)"
        _LOG.warning(note)
        frames_check.detail += f"; {note}"
        return checks
    voice = PiperVoice.load(onnx_path)
    same, bad = 0, []
    for text in PHONEME_TEXTS:
        theirs = [voice.phonemes_to_ids(s) for s in voice.phonemize(text) if s]
        if text_to_ids(text, id_map, espeak_voice) == theirs:
            same += 1
        else:
            bad.append(repr(text[:24]))
    from importlib.metadata import version

    detail = f"{len(PHONEME_TEXTS)} texts, piper-tts {version('piper-tts')}"
    if bad:
        detail += "; differ: " + ", ".join(bad[:3])
    checks.append(Check("phoneme ids equal piper-tts's", float(same), float(len(PHONEME_TEXTS)), "==", detail))
    return checks


def golden_checks(model, golden: Path) -> list[Check]:
    try:
        with np.load(golden, allow_pickle=False) as z:
            g = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001  (zip / npy format errors come in many types)
        raise UsageError(f"--golden {golden}: not a readable .npz ({e})") from None
    missing = [k for k in ("phoneme_ids", "audio") if k not in g]
    if missing:
        raise UsageError(f"--golden {golden} lacks {', '.join(missing)} (Piper format: docs/parity.md)")
    ids = np.asarray(g["phoneme_ids"]).reshape(-1).astype(np.int64).tolist()
    noise_scale = float(g.get("noise_scale", 0.0))
    length_scale = float(g.get("length_scale", 1.0))
    noise_w = float(g.get("noise_w", 0.0))
    dp, prior = g.get("dp_noise"), g.get("prior_noise")
    if (noise_w and dp is None) or (noise_scale and prior is None):
        raise UsageError(f"--golden {golden}: noise scales are not 0, so the file needs the reference's noise "
                         "draws dp_noise [2, T] and prior_noise [C, F] (docs/parity.md)")
    ref = np.asarray(g["audio"], np.float32).reshape(-1)
    ours = synthesize(model, ids, noise_scale, length_scale, noise_w,
                      dp if noise_w else None, prior if noise_scale else None)
    hop = model.args.hop_length
    return [
        Check("waveform vs golden (rel L2)", rel_l2(ours, ref), REL_L2, "<=",
              f"{len(ids)} ids, scales {noise_scale:g}/{length_scale:g}/{noise_w:g}"),
        Check("frame count vs golden", float(ours.size // hop), float(ref.size // hop), "==",
              f"{ours.size} vs {ref.size} samples"),
    ]


def parity_checks(spec, checkpoint: Path, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list[Check]:
    """``ttscli parity piper-joe --against onnxruntime`` or ``--golden FILE.npz``."""
    from . import find_onnx
    from .reference import OnnxVits

    if (golden is None) == (against is None):
        raise UsageError("give exactly one of --golden FILE.npz or --against onnxruntime")
    if against is not None and against not in ("onnxruntime", "onnx"):
        raise UsageError(f"--against {against}: Piper voices are compared with their ONNX graph; "
                         "use --against onnxruntime")
    if backend not in (None, "mlx"):
        raise UsageError("--code-decoder-backend is a Qwen3-TTS option; Piper runs on MLX")
    onnx_path = find_onnx(checkpoint)
    model, config = our_model(spec, onnx_path)
    if golden is not None:
        return golden_checks(model, Path(golden))
    ref = OnnxVits(onnx_path)
    return onnx_checks(model, config["phoneme_id_map"], config.get("espeak_voice", "en-us"), ref,
                       _default_scales(spec), onnx_path)

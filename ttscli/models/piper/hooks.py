"""What the engine's ``convert``, ``parity`` and ``bench`` commands call on the piper family."""
from __future__ import annotations

import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli.errors import UsageError

PARITY_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Wait, what did you say? It costs $3.50, or about 3 euros.",
)


def convert_mlx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool = False, q_bits: int = 8,
                q_group_size: int = 64, dtype: str | None = None, progress=None) -> Path:
    """``ttscli convert piper-joe --to mlx -o DIR``: the ONNX initializers as safetensors."""
    from . import convert_onnx, find_onnx

    if quantize:
        raise UsageError("Piper voices are small (63 MB) and run in float32; drop -q")
    if dtype not in (None, "float32"):
        raise UsageError("Piper weights convert to float32 only; drop --dtype")
    steps = iter(range(1, 5))
    say = (lambda msg: progress(next(steps, 4), 4, msg)) if progress else None
    return convert_onnx(find_onnx(checkpoint), Path(out_dir), progress=say)


def parity_checks(spec, checkpoint: Path, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list:
    """``ttscli parity piper-joe --against onnxruntime``: waveforms and lengths vs the ONNX graph,
    and phoneme ids vs piper-tts when it is installed."""
    from ttscli.parity import Check, rel_l2

    from . import find_onnx, load_converted, text_to_ids
    from .convert import convert_onnx
    from .reference import OnnxVits

    if golden is not None or against not in ("onnxruntime", "onnx"):
        raise UsageError("Piper parity runs against the voice's own ONNX graph: use --against onnxruntime")
    import tempfile

    onnx_path = find_onnx(checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        model, config = load_converted(convert_onnx(onnx_path, Path(tmp) / "mlx"))
    ref = OnnxVits(onnx_path)
    id_map = config["phoneme_id_map"]
    checks = []
    rng = np.random.default_rng(0)
    for n, text in enumerate(PARITY_TEXTS):
        ids = text_to_ids(text, id_map, config.get("espeak_voice", "en-us"))[0]
        ours = np.array(model(mx.array([ids]), noise_scale=0.0, length_scale=1.0, noise_w=0.0))
        theirs = ref(ids, 0.0, 1.0, 0.0)
        checks.append(Check(f"text {n}: waveform, noise 0 (rel L2)", rel_l2(ours, theirs), 1e-3, "<=",
                            f"{ours.size} vs {theirs.size} samples"))
        dp = rng.standard_normal((1, len(ids), 2)).astype(np.float32)
        m_p, logs_p, dur = model.durations(mx.array([ids]), 0.8, 1.0, noise=mx.array(dp))
        prior = rng.standard_normal((1, int(dur.sum()), m_p.shape[-1])).astype(np.float32)
        ours = np.array(model.decode(model.latents(m_p, logs_p, dur, 0.667, noise=mx.array(prior)))[0])
        theirs = ref(ids, 0.667, 1.0, 0.8, dp.transpose(0, 2, 1), prior.transpose(0, 2, 1))
        checks.append(Check(f"text {n}: waveform, default noise, same draws (rel L2)", rel_l2(ours, theirs),
                            1e-3, "<=", f"{ours.size} vs {theirs.size} samples"))
    try:
        from piper import PiperVoice
    except ImportError:
        return checks
    voice = PiperVoice.load(onnx_path)
    same = sum(text_to_ids(t, id_map) == [voice.phonemes_to_ids(s) for s in voice.phonemize(t) if s]
               for t in PARITY_TEXTS)
    checks.append(Check("phoneme ids equal piper-tts's (texts)", float(same), float(len(PARITY_TEXTS)), "=="))
    return checks


def bench_peer(peer: str, spec, checkpoint: Path, text: str, repeats: int) -> dict:
    """``ttscli bench piper-joe --peer piper-tts``: piper-tts (onnxruntime) on the same text."""
    if peer not in ("piper-tts", "piper", "onnxruntime"):
        raise UsageError(f"--peer {peer}: the piper family compares with piper-tts")
    try:
        from piper import PiperVoice
    except ImportError as err:
        raise UsageError("piper-tts is not installed: pip install piper-tts") from err
    from . import find_onnx

    voice = PiperVoice.load(find_onnx(checkpoint))
    list(voice.synthesize(text))                                      # warm-up
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        c0 = time.process_time()
        first, n = None, 0
        for chunk in voice.synthesize(text):
            if first is None:
                first = time.perf_counter() - t0
            n += len(chunk.audio_float_array)
        total = time.perf_counter() - t0
        runs.append({"total_s": total, "cpu_s": time.process_time() - c0, "first_audio_s": first,
                     "audio_s": n / voice.config.sample_rate})
    med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    med["rtf"] = med["total_s"] / med["audio_s"]
    return med


def bench_components(pipe, req) -> dict:
    """Stage timings of the last run (seconds)."""
    s = pipe.stats
    return {"phonemize_s": s.extra.get("phonemize_s"), "encoder_durations_s": s.prefill_s,
            "flow_decoder_s": s.decoder_s, "sentences": s.extra.get("sentences")}

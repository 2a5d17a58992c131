"""The kokoro family's load, voices, convert and bench hooks (declared in family.py; parity in parity.py)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError
from ttscli.models.base import LoadOptions


def _checkpoint(checkpoint: Path | None) -> Path:
    from .load import default_data_dir

    return Path(checkpoint) if checkpoint is not None else default_data_dir()


def _cache(spec) -> Path:
    from ttscli.paths import converted_dir

    return converted_dir(getattr(spec, "id", "kokoro-82m"))


def load_pipeline(spec, checkpoint: Path | None, options: LoadOptions | None = None):
    from .load import describe, load_model, load_voices, read_vocab
    from .pipeline import KokoroPipeline

    options = options or LoadOptions()
    backend = acoustic_backend(options)
    if options.dtype not in (None, "float32", "float16", "bfloat16"):
        raise UsageError(f"--dtype {options.dtype}: choose float32, float16 or bfloat16")
    if backend == "onnx" and options.dtype not in (None, "float32"):
        raise UsageError(f"--dtype {options.dtype}: the onnxruntime decoder is float32; "
                         f"set {BACKEND_ENV}=mlx for {options.dtype}")
    checkpoint = _checkpoint(checkpoint)
    info = describe(checkpoint)
    if options.random_weights:
        from .config import ModelArgs
        from .model import KModel
        model = random_model(KModel(ModelArgs()))
    else:
        model = load_model(checkpoint, _cache(spec), options.dtype)
    if backend == "onnx":
        from .onnx_runtime import open_model

        model = open_model(model, None if options.random_weights else checkpoint, getattr(spec, "id", "kokoro-82m"))
    defaults = dict(getattr(spec, "defaults", {}) or {})
    pipe = KokoroPipeline(model, load_voices(checkpoint), read_vocab(info["vocab"]),
                          str(defaults.get("voice", "jf_alpha")))
    pipe.backends["acoustic"] = backend
    if getattr(spec, "sample_rate", None) and spec.sample_rate != pipe.sample_rate:
        from ttscli.errors import CheckpointError
        raise CheckpointError(f"{spec.id}: registry says {spec.sample_rate} Hz, Kokoro makes {pipe.sample_rate} Hz")
    return pipe


BACKEND_ENV = "TTSCLI_KOKORO_BACKEND"
# Where the model runs by default, measured with `ttscli bench kokoro-82m --code-decoder-backend
# mlx,onnx --peer onnxruntime -n 2` on the 2-core AMD EPYC (AVX2, no AVX-512; shared, load 2.9 -> 6.2
# during the run), default text (8.55 s of speech): MLX float32 (MKL) 42.4 s, our float32 graphs on
# onnxruntime 20.0 s, the published int8 graph 23.6 s (with only the decoder on onnxruntime, load
# 6.2-6.7: 28.8 / 15.6 / 15.8 s). Elsewhere on Linux (unmeasured) onnx too; on macOS MLX (Metal GPU).
MEASURED_DEFAULT = {("linux", "AuthenticAMD"): "onnx", ("darwin", ""): "mlx"}


def default_backend() -> str:
    """$TTSCLI_KOKORO_BACKEND, else MLX when its default device is a GPU, else the measured
    choice for this OS and CPU vendor, else onnx on a Linux CPU when onnxruntime is installed,
    else mlx."""
    from ttscli.backends.select import mlx_or_onnx

    return mlx_or_onnx(BACKEND_ENV, MEASURED_DEFAULT)


def acoustic_backend(options: LoadOptions) -> str:
    """Where the model runs: ``options.backends["acoustic"]`` (bench's and parity's
    --code-decoder-backend), else :func:`default_backend`."""
    unknown = set(options.backends) - {"acoustic"}
    if unknown:
        raise UsageError(f"Kokoro has no {', '.join(sorted(unknown))} component (only acoustic: mlx or onnx)")
    from ttscli.backends.select import pick_mlx_or_onnx

    return pick_mlx_or_onnx(options.backends.get("acoustic") or None, what="Kokoro", env_name=BACKEND_ENV,
                            measured=MEASURED_DEFAULT)


def random_model(model, seed: int = 0):
    """Real dimensions, fan-in-scaled random weights (bench / contract tests)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    rng = np.random.default_rng(seed)
    weights = []
    for name, p in tree_flatten(model.parameters()):
        shape = tuple(p.shape)
        if "alpha" in name:
            w = np.ones(shape)
        elif name.endswith(("bias", "beta")) or len(shape) == 1:
            w = ((1.0 if name.endswith(("gamma", "LayerNorm.weight", "layer_norm.weight")) else 0.0)
                 + 0.02 * rng.standard_normal(shape))
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            w = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
        if name.startswith("decoder.generator.conv_post."):
            w = w * 0.05                      # log-magnitudes near 0: exp() of random logits overflows
        elif name.startswith("predictor.duration_proj."):
            # a few frames per token, as the real model makes, instead of ~25
            w = w * 0.1 + (-3.0 if name.endswith("bias") else 0.0)
        weights.append((name, mx.array(w.astype(np.float32))))
    model.load_weights(weights, strict=True)
    mx.eval(model.parameters())
    return model


def voice_names(spec, checkpoint: Path | None) -> list[str]:
    from ttscli.errors import ModelNotFoundError

    from .load import load_voices

    try:
        return sorted(load_voices(_checkpoint(checkpoint)))
    except ModelNotFoundError:
        return list(getattr(spec, "voices", []) or [])


def convert_mlx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool = False, q_bits: int = 8,
                q_group_size: int = 64, dtype: str | None = None, progress=None) -> Path:
    """``ttscli convert kokoro-82m --to mlx -o DIR``: the weights as float32 safetensors (the
    cache ``speak`` reads), from any checkpoint layout load.py accepts."""
    from .load import load_model

    if quantize:
        raise UsageError("Kokoro-82M is small (82M weights) and runs in float; drop -q")
    if dtype not in (None, "float32"):
        raise UsageError("Kokoro weights convert to float32; pass --dtype when speaking instead")
    if progress:
        progress(1, 2, "reading and dequantizing the weights")
    load_model(_checkpoint(checkpoint), Path(out_dir))
    if progress:
        progress(2, 2, "written")
    return Path(out_dir)


def bench_components(pipe, req) -> dict:
    s = pipe.stats
    return {"phonemize_s": s.extra.get("phonemize_s"), "prosody_s": s.extra.get("prosody_s"),
            "decoder_s": s.decoder_s, "pieces": s.extra.get("pieces")}


def bench_peer(spec, checkpoint: Path | None, text: str, repeats: int, threads: int | None = None) -> dict:
    """``ttscli bench kokoro-82m --peer onnxruntime``: the published int8 graph under onnxruntime
    (as kokoro-onnx runs it) on the same phonemes, voice row and speed as ours."""
    import os

    try:
        import onnxruntime as ort
    except ImportError as err:
        raise UsageError("onnxruntime is not installed: pip install onnxruntime") from err
    from ttscli.text import chunk_text

    from .g2p import phonemize
    from .load import (
        describe,
        load_voices,
        onnx_path_of,
        parse_voice,
        read_vocab,
        style_row,
    )
    from .pipeline import _JA_SCRIPT, KokoroPipeline, split_phonemes, tokens_of

    checkpoint = _checkpoint(checkpoint)
    path = onnx_path_of(checkpoint, _cache(spec))
    vocab = read_vocab(describe(checkpoint)["vocab"])
    voices = load_voices(checkpoint)
    default = str(dict(getattr(spec, "defaults", {}) or {}).get("voice", "jf_alpha"))
    pack, _ = parse_voice(default if default in voices else min(voices), voices)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or os.cpu_count() or 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    lang = "ja" if _JA_SCRIPT.search(text) else "en"

    def run():
        n, first, t0 = 0, None, time.perf_counter()
        for chunk in chunk_text(text, KokoroPipeline.max_chunk_chars):
            for piece in split_phonemes(phonemize(chunk, lang)):
                toks = tokens_of(piece, vocab)
                out = sess.run(None, {"tokens": np.array([toks], np.int64),
                                      "style": style_row(pack, len(piece))[None].astype(np.float32),
                                      "speed": np.array([1.0], np.float32)})[0]
                n += out.size
                if first is None:
                    first = time.perf_counter() - t0
        return n, first

    run()                                                              # warm-up
    runs = []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        n, first = run()
        total = time.perf_counter() - t0
        runs.append({"total_s": total, "cpu_s": time.process_time() - c0, "first_audio_s": first,
                     "audio_s": n / 24000})
    med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    med["rtf"] = med["total_s"] / med["audio_s"]
    return med

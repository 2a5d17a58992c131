"""Qwen3-TTS 12 Hz family (Base clone, CustomVoice, VoiceDesign; 0.6B and 1.7B)."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from ttscli.errors import BackendUnavailableError, CheckpointError
from ttscli.models.base import LoadOptions


def preset_for(spec_id: str) -> str:
    """Registry id (e.g. "qwen3-tts-1.7b-customvoice") -> preset name ("1.7B-CustomVoice")."""
    m = re.search(r"(0\.6b|1\.7b)-(base|customvoice|voicedesign)", spec_id.lower())
    if not m:
        raise CheckpointError(f"{spec_id}: cannot tell the model size/kind for random weights")
    kind = {"base": "Base", "customvoice": "CustomVoice", "voicedesign": "VoiceDesign"}[m.group(2)]
    return f"{m.group(1).upper()}-{kind}"


class ByteTokenizer:
    """Stand-in text tokenizer for random-weight bench: special tokens by name, other text as
    its UTF-8 bytes (ids 0..255), which is the right length scale for timing."""

    def __init__(self, args):
        self.special = {"<|im_start|>": args.im_start_token_id, "<|im_end|>": args.im_end_token_id}
        self._re = re.compile("(" + "|".join(map(re.escape, self.special)) + ")")

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for part in self._re.split(text):
            if part in self.special:
                out.append(self.special[part])
            elif part.startswith("assistant") or part.startswith("user"):
                word = part.split("\n", 1)[0]
                out.append(77091 if word == "assistant" else 872)
                out.extend(part[len(word):].encode())
            else:
                out.extend(part.encode())
        return out


def load_code_decoder(backend: str, model, checkpoint: Path | None, options: LoadOptions):
    from ttscli.lm import MLXCodeDecoder

    if backend == "mlx":
        return MLXCodeDecoder(model.talker, sequential=options.prefill_mode == "sequential")
    if backend == "coreml":
        # The talker converted by `ttscli convert --to coreml`, found by its manifest's source
        # hashes; random weights (bench) build their own package first.
        from ttscli.backends.coreml import require_coreml
        from ttscli.backends.coreml.decoder import CoreMLCodeDecoder, open_code_decoder

        require_coreml()
        if checkpoint is None:
            from ttscli.models.qwen3_tts.coreml_export import build_from_model

            return CoreMLCodeDecoder.open(build_from_model(model))
        return open_code_decoder(checkpoint)
    if backend.startswith("onnx"):
        return load_onnx_decoder(backend, model, checkpoint, options)
    raise BackendUnavailableError(f"unknown code decoder backend {backend!r}; use mlx, coreml or onnx")


def load_onnx_decoder(backend: str, model, checkpoint: Path | None, options: LoadOptions, model_id: str | None = None):
    """Talker + code predictor on onnxruntime (``onnx`` = int8, or ``onnx-f32|int8|int4``),
    from the conversion of ``checkpoint`` in ttscli's cache (built on first use) or, for random
    weights, from the in-memory model."""
    import os

    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.onnx.graph import Quant
    from ttscli.backends.select import split_backend
    from ttscli.models.qwen3_tts.onnx_decoder import open_decoder
    from ttscli.models.qwen3_tts.onnx_export import DEFAULT_PREFILL, PREFILL_ENV, build_from_model, find_or_build

    require_onnxruntime()
    quant = Quant(split_backend(backend)[1])
    folder = build_from_model(model, quant) if checkpoint is None else find_or_build(checkpoint, quant, model_id)
    prefill = os.environ.get(PREFILL_ENV, "").strip().lower() or DEFAULT_PREFILL
    if options.prefill_mode == "sequential" and prefill == "mlx":
        prefill = "onnx"    # bench's sequential variant: the backend's own prefill
    return open_decoder(folder, model, prefill)


def load_pipeline(spec: Any, checkpoint: Path | None, options: LoadOptions):
    """Build the pipeline for a checkpoint folder in its Hugging Face layout (or random weights)."""
    from ttscli.models.qwen3_tts.config import GenerationConfig, preset_config
    from ttscli.models.qwen3_tts.load import check_components, load_model, load_tokenizer
    from ttscli.models.qwen3_tts.model import build_random
    from ttscli.models.qwen3_tts.pipeline import Qwen3TTSPipeline
    from ttscli.codecs.qwen3_12hz import build_random_decoder, load_speech_decoder

    dtype = options.dtype or "float32"
    if options.random_weights:
        preset = preset_for(spec.id)
        model = build_random(preset_config(preset), dtype)
        gen = GenerationConfig.from_dict(dict(getattr(spec, "defaults", {}) or {}))
        tokenizer = ByteTokenizer(model.args)
        decoder = build_random_decoder(dtype)
        checkpoint = None
    else:
        checkpoint = Path(checkpoint)
        model, gen = load_model(checkpoint, dtype)
        tokenizer = load_tokenizer(checkpoint)
        decoder = load_speech_decoder(checkpoint / "speech_tokenizer", dtype)
        check_components(model.args, decoder.args, checkpoint)
    code_decoder = load_code_decoder(options.backend("code_decoder"), model, checkpoint, options)
    pipe = Qwen3TTSPipeline(spec, model, gen, tokenizer, decoder, code_decoder, checkpoint,
                            random_weights=options.random_weights)
    if hasattr(code_decoder, "compiled_frame"):    # onnxruntime runs the talker and the code predictor
        pipe.backends.update(code_decoder=f"onnx-{code_decoder.precision}", code_predictor="onnx")
    return pipe


def bench_components(pipeline, req) -> dict[str, float]:
    """Talker step and code-predictor frame times (ms), measured apart with a sync after each."""
    import mlx.core as mx

    from ttscli.lm import SamplingParams

    talker = pipeline.model.talker
    H = talker.args.hidden_size
    dec = pipeline.code_decoder
    n = int(getattr(req, "prompt_tokens", 200))
    x = mx.random.normal((1, n, H), key=mx.random.key(1)) * 0.1
    mx.eval(dec.prefill(x[:, :8], dec.new_cache()))  # warm-up (compilation, allocation)
    cache = dec.new_cache()
    t = time.perf_counter()
    mx.eval(dec.prefill(x, cache))  # this variant's prefill mode: batched, or one position per call
    prefill_s = time.perf_counter() - t
    step_ms, cp_ms = [], []
    cp = (dec if hasattr(dec, "compiled_frame") else talker.code_predictor).compiled_frame(SamplingParams(0.9, 50, 1.0))
    keys = mx.random.split(mx.random.key(2), 15)
    for i in range(12):
        t = time.perf_counter()
        logits, h = dec.step(x[:, i:i + 1], cache)
        mx.eval(logits, h)
        t1 = time.perf_counter()
        codes, emb = cp(h, talker.embed_codec(mx.array([5])), keys)
        mx.eval(codes, emb)
        t2 = time.perf_counter()
        if i >= 2:
            step_ms.append((t1 - t) * 1e3)
            cp_ms.append((t2 - t1) * 1e3)
    import numpy as np

    from ttscli.models.qwen3_tts.loop import frame_kernels

    from ttscli.lm import MLXCodeDecoder

    kernels = {} if not isinstance(dec, MLXCodeDecoder) else frame_kernels(
        talker, dec, SamplingParams(0.9, 50, 1.0), SamplingParams(0.9, 50, 1.0, 0.0, 1.05), x[:, :16])
    from ttscli.lm.cuda_frame import CodeFrameKernel

    return {"talker_step_ms": float(np.median(step_ms)), "code_predictor_frame_ms": float(np.median(cp_ms)),
            "code_predictor_one_kernel": float(isinstance(cp, CodeFrameKernel)),
            "prefill_tokens": n, "prefill_ms": prefill_s * 1e3, "prefill_tokens_per_s": n / prefill_s, **kernels}


def convert_coreml(*args, **kwargs):
    """`ttscli convert --to coreml` (coremltools is imported only when converting)."""
    from .coreml_export import convert_coreml as export

    return export(*args, **kwargs)

"""Family hooks: build the pipeline (checkpoint or random weights) and the bench's component times."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.models.base import LoadOptions


class ByteTokenizer:
    """Stand-in for random weights (bench): <bos>, special tokens by name, other text as UTF-8
    bytes (the right length scale for timing)."""

    def __init__(self, specials: dict[str, int]):
        self.special = specials
        self._re = re.compile("(" + "|".join(map(re.escape, specials)) + ")")

    def encode(self, text: str) -> list[int]:
        out = [2]
        for part in self._re.split(text):
            out += [self.special[part]] if part in self.special else [1000 + b for b in part.encode()]
        return out


def random_model(dtype: str):
    """The real dimensions with random weights, made one tensor at a time in ``dtype`` so the
    peak is the model itself (never a float32 copy of 2.9 B parameters)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from ttscli.checkpoint import load_strict
    from ttscli.dtypes import to_dtype
    from ttscli.models.breeze_tts.config import ModelArgs, real_config
    from ttscli.models.breeze_tts.load import FLOAT32
    from ttscli.models.breeze_tts.model import BreezeModel

    model = BreezeModel(ModelArgs.from_dict(real_config(), source="real config"))
    dt = to_dtype(dtype)
    # drawing 2.9 B normals takes minutes on a CPU; a drawn pool, tiled from a per-tensor offset,
    # times the same
    pool = mx.random.normal((1 << 20,), key=mx.random.key(0)) * 0.02
    weights = {}
    for i, (k, p) in enumerate(tree_flatten(model.parameters())):
        if p.ndim == 1:
            w = p
        else:
            n = p.size
            w = mx.tile(mx.roll(pool, 7919 * i), -(-n // pool.size))[:n].reshape(p.shape)
        weights[k] = w.astype(mx.float32 if k in FLOAT32 else dt)
        mx.eval(weights[k])
    return load_strict(model, weights, source="random weights")


def load_pipeline(spec: Any, checkpoint: Path | None, options: LoadOptions):
    from ttscli.lm import MLXCodeDecoder
    from ttscli.models.breeze_tts.config import GenerationConfig
    from ttscli.models.breeze_tts.load import check_codec, load_model, load_tokenizer
    from ttscli.models.breeze_tts.pipeline import BreezePipeline
    from ttscli.codecs.qwen3_12hz import build_random_decoder, load_speech_decoder

    backend = options.backend("code_decoder")
    for component, name in options.backends.items():
        if name != "mlx" and not (component == "code_decoder" and name.startswith(("coreml", "onnx"))):
            raise BackendUnavailableError(f"{spec.id} {component}: backend {name!r} is not available "
                                          "(code_decoder: mlx, coreml or onnx; the rest: mlx)")
    if backend.startswith("onnx"):
        # fail before the model loads: a bad precision, a missing onnxruntime
        from ttscli.backends.onnx import require_onnxruntime
        from ttscli.backends.onnx.graph import Quant
        from ttscli.backends.select import split_backend

        require_onnxruntime()
        quant = Quant(split_backend(backend)[1])
        if options.prefill_mode == "sequential":
            raise UsageError(f"{spec.id} on onnxruntime prefills in one run of its graph; --prefill-mode "
                             "sequential is MLX's (drop it or use --code-decoder-backend mlx)")
        if options.dtype not in (None, "float32") and not options.random_weights:
            raise UsageError(f"{spec.id} on onnxruntime computes the backbone and depth decoder in "
                                          f"float32; drop --dtype {options.dtype}")
    code_decoder = None
    if backend == "coreml":
        # the backbone converted by `ttscli convert breeze-tts-2 --to coreml`, found by its manifest's
        # source hashes before anything else loads (a missing or stale conversion: one CheckpointError line)
        from ttscli.backends.coreml import require_coreml
        from ttscli.backends.coreml.decoder import open_code_decoder
        from ttscli.backends.decoder import RowwiseDecoder

        require_coreml()
        if options.random_weights:
            raise BackendUnavailableError(f"{spec.id} on Core ML needs a converted checkpoint (ttscli convert "
                                          f"{spec.id} --to coreml --model-dir DIR); random weights run on mlx")
        code_decoder = RowwiseDecoder(open_code_decoder(Path(checkpoint), options.coreml_compute_units))
    if options.random_weights:
        dtype = options.dtype or "bfloat16"   # 3.5 B parameters: float32 would not fit most machines
        model = random_model(dtype)
        d = dict(getattr(spec, "defaults", {}) or {})
        gen = GenerationConfig.from_dict({k: v for k, v in d.items() if k != "cfg_scale"})
        a = model.args
        names = ["<|AUDIO|>", "<|audio_eos|>"] + [f"[S{i}]" for i in range(10)] + ["<ins_bos>", "<ins_eos>"]
        tokenizer = ByteTokenizer({n: a.audio_token_id + i for i, n in enumerate(names)})
        decoder = build_random_decoder(dtype)
        checkpoint = None
    else:
        checkpoint = Path(checkpoint)
        model, gen = load_model(checkpoint, options.dtype or "float32")
        tokenizer = load_tokenizer(checkpoint, model.args)
        decoder = load_speech_decoder(checkpoint / "audio_tokenizer", options.dtype or "float32")
        check_codec(model.args, decoder.args, checkpoint)
    if backend.startswith("onnx"):
        from ttscli.models.breeze_tts.onnx_decoder import open_decoder
        from ttscli.models.breeze_tts.onnx_export import build_from_model, find_or_build

        folder = build_from_model(model, quant) if checkpoint is None else find_or_build(checkpoint, quant, spec.id)
        code_decoder = open_decoder(folder, model)
    if code_decoder is None:
        code_decoder = MLXCodeDecoder(model, sequential=options.prefill_mode == "sequential")
    pipe = BreezePipeline(spec, model, gen, tokenizer, decoder, code_decoder, checkpoint)
    pipe.backends["code_decoder"] = backend
    if backend.startswith("onnx"):    # onnxruntime runs the backbone and the depth decoder
        pipe.backends.update(code_decoder=f"onnx-{code_decoder.precision}", code_predictor="onnx")
    return pipe


def bench_components(pipeline, req) -> dict[str, float]:
    """Backbone step and depth-decoder frame (15 codebooks) times, measured apart, synced."""
    import mlx.core as mx
    import numpy as np

    from ttscli.lm.sample import SamplingParams, logit_bias, sample

    model, dec = pipeline.model, pipeline.code_decoder
    H = model.args.hidden_size
    n = int(getattr(req, "prompt_tokens", 200))
    x = mx.random.normal((1, n, H), key=mx.random.key(1)).astype(model.lm_head.weight.dtype) * 0.1
    mx.eval(dec.prefill(x[:, :8], dec.new_cache()))
    cache = dec.new_cache()
    t = time.perf_counter()
    mx.eval(dec.prefill(x, cache))
    prefill_s = time.perf_counter() - t
    params = SamplingParams(0.9, 50, 1.0)
    bias = logit_bias(model.args.vocab_size, range(model.args.codebook_size, model.args.vocab_size))[None]
    keys = mx.random.split(mx.random.key(2), 16)
    step_ms, depth_ms = [], []
    depth_frame = getattr(dec, "depth_frame", model.depth_frame)
    for i in range(8):
        t = time.perf_counter()
        logits, h = dec.step(x[:, i:i + 1], cache)
        mx.eval(logits, h)
        t1 = time.perf_counter()
        codes, _ = depth_frame(h, mx.array([5]), lambda z, j: sample(z, params, keys[j], bias=bias))
        mx.eval(codes)
        t2 = time.perf_counter()
        if i >= 2:
            step_ms.append((t1 - t) * 1e3)
            depth_ms.append((t2 - t1) * 1e3)
    return {"backbone_step_ms": float(np.median(step_ms)), "depth_frame_ms": float(np.median(depth_ms)),
            "prefill_tokens": n, "prefill_ms": prefill_s * 1e3, "prefill_tokens_per_s": n / prefill_s}

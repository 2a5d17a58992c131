"""The Qwen3-TTS frame's LM work on onnxruntime: the talker as a code decoder, plus the code
predictor's frame (codebooks 1..15) in the shape of ``CodePredictor.compiled_frame``.

Per predictor step: one graph run (its input ``head`` picks the step's head), the draw, and the codec embedding
looked up in numpy. The draw is the MLX sampler's own, with the same params and PRNG keys,
made in numpy (:mod:`ttscli.backends.onnx.sample`: one MLX call per frame makes the 15 keys'
random numbers) so no step waits on MLX; were the installed MLX to draw in a way that module
does not reproduce, each step calls the MLX sampler instead. Nothing here holds request
state (caches are created per request and per frame), so several requests may run at once.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli.backends.onnx.decoder import OnnxCodeDecoder
from ttscli.backends.onnx.manifest import component, read_manifest
from ttscli.backends.onnx import sample as np_sample
from ttscli.backends.onnx.runtime import OnnxLM
from ttscli.lm.sample import SamplingParams, sample

from .onnx_export import CODE_DECODER, CODE_PREDICTOR


class OnnxFramePredictor:
    def __init__(self, lm: OnnxLM, embeddings: list[np.ndarray]):
        """``embeddings``: ``codec_embedding[j].weight`` for codebooks 1..15 (talker width)."""
        self.lm = lm
        self.embeddings = embeddings
        self.groups = len(embeddings)
        self.vocab = int(embeddings[0].shape[0])
        # False: MLX's sampler per code (one MLX call and a host sync each), the numpy draw's reference
        self.draws_in_numpy = True

    def frame(self, hidden: mx.array, c0_embed: mx.array, params: SamplingParams,
              keys: mx.array | None) -> tuple[mx.array, mx.array]:
        """``CodePredictor.frame`` for batch 1: codes ``[1, 15]`` and the 16 codes' summed embedding."""
        h = np.asarray(hidden.astype(mx.float32)).reshape(1, -1)
        e0 = np.asarray(c0_embed.astype(mx.float32)).reshape(1, -1)
        cache = self.lm.new_cache()
        x = np.stack([h, e0], axis=1)
        total = e0.astype(np.float32).copy()
        codes = []
        in_numpy = params.greedy or (keys is not None and self.draws_in_numpy)
        rows = None if params.greedy or not in_numpy else np_sample.noise(keys, self.vocab)
        for j in range(self.groups):
            logits = self.lm.run(x, cache, ("logits",), head=j)[0]
            if in_numpy:
                code = np_sample.sample_row(logits, params, None if rows is None else rows[j])
            else:
                code = int(sample(mx.array(logits), params, None if keys is None else keys[j]).item())
            codes.append(code)
            e = self.embeddings[j][code]
            total += e
            x = e.reshape(1, 1, -1)
        return mx.array(np.array([codes], np.int32)), mx.array(total)

    def compiled_frame(self, params: SamplingParams) -> Callable:
        if params.greedy:
            return lambda h, e: self.frame(h, e, params, None)
        return lambda h, e, k: self.frame(h, e, params, k)


class Qwen3OnnxDecoder(OnnxCodeDecoder):
    """The talker on onnxruntime with the code predictor's frame beside it (the loop asks the
    code decoder for ``compiled_frame`` when it has one)."""

    def __init__(self, talker: OnnxLM, predictor: OnnxFramePredictor, precision: str, **kw):
        super().__init__(talker, "logits", **kw)
        self.predictor = predictor
        self.precision = precision

    def compiled_frame(self, params: SamplingParams) -> Callable:
        return self.predictor.compiled_frame(params)


def open_decoder(folder: Path, model, prefill: str) -> Qwen3OnnxDecoder:
    """The two graphs converted into ``folder``, with the MLX model's codec embeddings (and its
    talker for an MLX prefill)."""
    m = read_manifest(folder)
    talker = OnnxLM(folder, component(m, CODE_DECODER, folder))
    pred_lm = OnnxLM(folder, component(m, CODE_PREDICTOR, folder))
    emb = [np.asarray(e.weight.astype(mx.float32)) for e in model.talker.code_predictor.model.codec_embedding]
    return Qwen3OnnxDecoder(talker, OnnxFramePredictor(pred_lm, emb), m.get("precision", "?"),
                            mlx_model=model.talker if prefill == "mlx" else None, prefill=prefill)

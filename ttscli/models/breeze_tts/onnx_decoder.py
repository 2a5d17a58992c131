"""The Breeze frame's LM work on onnxruntime: the backbone as a code decoder (one row per call,
CFG's branches each with their own cache) and the depth decoder's frame (codebooks 1..15) in
the shape of ``BreezeModel.depth_frame``, which the frame loop takes from the code decoder when
it has one.

Per depth step: one graph run per row (the input ``head`` picks codebook k's head), CFG's
guidance in numpy, the family's own sampler (``pick``, MLX, the same keys as on MLX) and the
next code's row of the audio table looked up in numpy. Caches are made per request and per
frame; the sessions hold no request state.
"""
from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli.backends.decoder import RowwiseDecoder, to_numpy
from ttscli.backends.onnx.decoder import OnnxCodeDecoder
from ttscli.backends.onnx.manifest import component, read_manifest
from ttscli.backends.onnx.runtime import OnnxLM

from .onnx_export import CODE_DECODER, DEPTH_DECODER


class OnnxDepthDecoder:
    def __init__(self, lm: OnnxLM, table: np.ndarray, vocab: int, num_codebooks: int):
        """``table``: the audio table ``[num_codebooks * vocab, H]`` (codebook k's id c at row
        k * vocab + c), float32."""
        self.lm = lm
        self.table = table
        self.vocab = vocab
        self.num_codebooks = num_codebooks
        # CFG's two rows (one length: the depth stack starts afresh each frame) as one batch of a
        # run; False: a run per row, each with its own cache (the reference for the batch)
        self.rows_in_one_run = True

    def frame(self, hidden, c0, pick, cfg_scale: float | None = None) -> tuple[mx.array, list[mx.array]]:
        """:meth:`BreezeModel.depth_frame`: ``hidden [B, H]`` (CFG: conditional, unconditional),
        ``c0 [1]``, ``pick(logits [1, V], k) -> id [1]``; codes ``[1, 15]`` and each codebook's
        (guided) logits."""
        h = to_numpy(hidden)
        rows = h.shape[0]
        e = self.table[int(np.asarray(c0).reshape(-1)[0])]
        x = np.stack([h, np.broadcast_to(e, h.shape)], axis=1)          # [rows, 2, H]
        # a batch of rows in one run, or a run per row (then a "batch" is a row)
        batches = [slice(0, rows)] if self.rows_in_one_run else [slice(r, r + 1) for r in range(rows)]
        caches = [self.lm.new_cache() for _ in batches]
        codes, logits = [], []
        for k in range(1, self.num_codebooks):
            z = np.concatenate([self.lm.run(x[b], c, ("logits",), head=k - 1)[0] for b, c in zip(batches, caches)])
            if cfg_scale is not None:
                z = z[1:2] + np.float32(cfg_scale) * (z[0:1] - z[1:2])
            z = mx.array(z)
            c = pick(z, k)
            codes.append(c)
            logits.append(z)
            if k + 1 < self.num_codebooks:
                x = np.broadcast_to(self.table[int(c.item()) + k * self.vocab], (rows, 1, h.shape[1]))
        return mx.stack(codes, axis=1), logits


class BreezeOnnxDecoder(RowwiseDecoder):
    """The backbone on onnxruntime, a row per call, with the depth decoder's frame beside it."""

    def __init__(self, backbone: OnnxCodeDecoder, depth: OnnxDepthDecoder, precision: str):
        super().__init__(backbone)
        self.depth = depth
        self.precision = precision

    def depth_frame(self, hidden, c0, pick, cfg_scale: float | None = None):
        return self.depth.frame(hidden, c0, pick, cfg_scale)


def open_decoder(folder: Path, model) -> BreezeOnnxDecoder:
    """The two graphs converted into ``folder``, with the MLX model's audio table."""
    m = read_manifest(folder)
    backbone = OnnxCodeDecoder(OnnxLM(folder, component(m, CODE_DECODER, folder)))
    a = model.args
    table = np.asarray(model.audio_table.weight.astype(mx.float32))
    depth = OnnxDepthDecoder(OnnxLM(folder, component(m, DEPTH_DECODER, folder)), table, a.vocab_size,
                             a.num_codebooks)
    return BreezeOnnxDecoder(backbone, depth, m.get("precision", "?"))

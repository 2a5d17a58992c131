"""Mimi's encoder (the encoder half of transformers' ``MimiModel``): a mono 24 kHz waveform ->
codebook indices per frame (12.5 Hz for the published model).

SEANet (seanet.py, 25 Hz) -> a causal transformer (transformer.py) -> a stride-2 conv
(``downsample``) -> the split RVQ (quantizer.py). Attributes are named as the checkpoint's
tensors below the encoder's prefix (``encoder.``, ``encoder_transformer.``, ``downsample.``,
``quantizer.``), so published weights load without renaming; the codec that ships a Mimi encoder
(codecs/qwen3_12hz) reads its own config file and weight layout.
"""
from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from ttscli.checkpoint import load_strict
from ttscli.errors import AudioInputError

from .config import MimiArgs
from .quantizer import SplitResidualVectorQuantizer
from .seanet import CausalConv1d, SEANetEncoder
from .transformer import Transformer


class MimiEncoder(nn.Module):
    """``quantizer=False``: the continuous encoder alone (a Kyutai Mimi whose LM reads latents,
    Pocket TTS, ships no codebooks): :meth:`hidden` is its output."""

    def __init__(self, args: MimiArgs, quantizer: bool = True):
        super().__init__()
        self.args = args
        self.encoder = SEANetEncoder(args)
        self.encoder_transformer = Transformer(args)
        self.downsample = CausalConv1d(args.hidden_size, args.latent_dim or args.hidden_size, args.downsample_kernel,
                                       stride=args.downsample_stride, bias=False, pad_mode="replicate")
        if quantizer:
            self.quantizer = SplitResidualVectorQuantizer(args)

    def hidden(self, wav: mx.array, chunk_hops: int | None = 16) -> mx.array:
        """``wav [B, N]`` -> latent frames ``[B, T, hidden]`` (12.5 Hz), the quantizer input.

        ``chunk_hops``: SEANet chunk length in 25 Hz frames (None: whole clip at once; same result)."""
        hop = math.prod(self.args.upsampling_ratios)
        x = self.encoder(wav[..., None], chunk=None if chunk_hops is None else chunk_hops * hop)
        x = self.encoder_transformer(x)
        return self.downsample(x)

    def encode(self, wav_24k, num_quantizers: int) -> np.ndarray:
        """Codes ``[T, num_quantizers]`` int32 of one mono 24 kHz waveform (numpy or MLX)."""
        wav = np.asarray(wav_24k, dtype=np.float32) if not isinstance(wav_24k, mx.array) else wav_24k
        if wav.ndim != 1 or wav.shape[0] == 0:
            raise AudioInputError("reference audio must be a non-empty mono waveform")
        h = self.hidden(mx.array(wav).astype(mx.float32)[None])[0]
        return np.array(self.quantizer.encode(h, num_quantizers).astype(mx.int32))

    @classmethod
    def random(cls, args: MimiArgs, seed: int = 0):
        """The encoder at ``args``' dimensions with deterministic random weights, for bench (its
        cost does not depend on the values)."""
        mx.random.seed(seed)
        model = cls(args)

        def uniform(shape, std):  # uniform draws are ~3x cheaper than normals on the CPU; same variance
            return mx.random.uniform(-std * math.sqrt(3.0), std * math.sqrt(3.0), shape)

        params = []
        for key, value in tree_flatten(model.parameters()):
            if key.endswith(("cluster_usage", "initialized")) or "layernorm.weight" in key:
                params.append((key, mx.ones(value.shape)))
            elif key.endswith("layer_scale.scale"):
                params.append((key, mx.full(value.shape, 0.1)))
            elif key.endswith("embed_sum"):
                params.append((key, uniform(value.shape, 1.0)))
            elif value.ndim >= 2:
                params.append((key, uniform(value.shape, math.sqrt(1.0 / math.prod(value.shape[1:])))))
            else:
                params.append((key, uniform(value.shape, 0.02)))
        return load_strict(model, dict(params), source="random weights")

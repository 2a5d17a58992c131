"""Mimi's split residual vector quantizer (``quantizer.*``): one semantic and N-1 acoustic
levels, each half projecting the same input, greedy nearest codeword on the running residual.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from ttscli.nn.conv import Conv1d

from .config import MimiArgs


class EuclideanCodebook(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.initialized = mx.ones((1,))
        self.cluster_usage = mx.ones((size,))
        self.embed_sum = mx.zeros((size, dim))

    def embed(self) -> mx.array:
        return self.embed_sum / mx.maximum(self.cluster_usage, 1e-5)[:, None]


class VectorQuantization(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.codebook = EuclideanCodebook(size, dim)


class ResidualVectorQuantizer(nn.Module):
    def __init__(self, args: MimiArgs, num_quantizers: int):
        super().__init__()
        vq_dim = args.vector_quantization_hidden_dimension
        self.layers = [VectorQuantization(args.codebook_size, args.codebook_dim) for _ in range(num_quantizers)]
        if vq_dim != args.hidden_size:
            self.input_proj = Conv1d(args.hidden_size, vq_dim, 1, bias=False)
            self.output_proj = Conv1d(vq_dim, args.hidden_size, 1, bias=False)

    def encode(self, x: mx.array, n: int) -> mx.array:
        """``x [T, hidden]`` -> codes ``[T, n]``: greedy nearest codeword on the running residual."""
        if "input_proj" in self:
            x = x @ self.input_proj.weight[:, :, 0].T
        codes = []
        for layer in self.layers[:n]:
            embed = layer.codebook.embed()
            # argmin |x - e|^2 == argmin (|e|^2 - 2 x.e): the |x|^2 term is the same for every codeword.
            score = mx.sum(embed * embed, axis=-1) - 2.0 * (x @ embed.T)
            idx = mx.argmin(score, axis=-1)
            codes.append(idx)
            x = x - embed[idx]
        return mx.stack(codes, axis=-1)


class SplitResidualVectorQuantizer(nn.Module):
    def __init__(self, args: MimiArgs):
        super().__init__()
        self.num_semantic = args.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = ResidualVectorQuantizer(args, args.num_semantic_quantizers)
        self.acoustic_residual_vector_quantizer = ResidualVectorQuantizer(
            args, args.num_quantizers - args.num_semantic_quantizers)

    def encode(self, x: mx.array, n: int) -> mx.array:
        sem = self.semantic_residual_vector_quantizer.encode(x, self.num_semantic)
        ac = self.acoustic_residual_vector_quantizer.encode(x, n - self.num_semantic)
        return mx.concatenate([sem, ac], axis=-1)

"""PL-BERT: an ALBERT encoder whose one layer is applied ``num_hidden_layers`` times.

Names follow Hugging Face's AlbertModel (``bert.embeddings.*``, ``bert.encoder.albert_layer_groups.0.
albert_layers.0.*``). Batch 1, every token attended (Kokoro never pads inside a chunk).
"""
from __future__ import annotations

import math

import mlx.core as mx
from mlx import nn

from .config import PLBertArgs
from .modules import Linear


class LayerNorm(nn.Module):
    def __init__(self, dims: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = mx.ones((dims,))
        self.bias = mx.zeros((dims,))

    def __call__(self, x: mx.array) -> mx.array:
        return mx.fast.layer_norm(x, self.weight, self.bias, self.eps)


def gelu_new(x: mx.array) -> mx.array:
    """The tanh approximation (Hugging Face's ``gelu_new``, ORT's FastGelu)."""
    return 0.5 * x * (1.0 + mx.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class Embeddings(nn.Module):
    def __init__(self, a: PLBertArgs):
        super().__init__()
        self.word_embeddings = nn.Embedding(a.vocab_size, a.embedding_size)
        self.position_embeddings = nn.Embedding(a.max_position_embeddings, a.embedding_size)
        self.token_type_embeddings = nn.Embedding(a.type_vocab_size, a.embedding_size)
        self.LayerNorm = LayerNorm(a.embedding_size, a.layer_norm_eps)

    def __call__(self, tokens: mx.array) -> mx.array:
        t = tokens.shape[0]
        x = (self.word_embeddings(tokens) + self.position_embeddings.weight[:t]
             + self.token_type_embeddings.weight[0])
        return self.LayerNorm(x)


class Attention(nn.Module):
    def __init__(self, a: PLBertArgs):
        super().__init__()
        h = a.hidden_size
        self.heads = a.num_attention_heads
        self.query, self.key, self.value, self.dense = (Linear(h, h) for _ in range(4))
        self.LayerNorm = LayerNorm(h, a.layer_norm_eps)

    def __call__(self, x: mx.array) -> mx.array:
        t, h = x.shape
        d = h // self.heads

        def split(y):
            return y.reshape(t, self.heads, d).transpose(1, 0, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        ctx = mx.fast.scaled_dot_product_attention(q[None], k[None], v[None], scale=1.0 / math.sqrt(d))[0]
        ctx = ctx.transpose(1, 0, 2).reshape(t, h)
        return self.LayerNorm(x + self.dense(ctx))


class AlbertLayer(nn.Module):
    def __init__(self, a: PLBertArgs):
        super().__init__()
        self.attention = Attention(a)
        self.ffn = Linear(a.hidden_size, a.intermediate_size)
        self.ffn_output = Linear(a.intermediate_size, a.hidden_size)
        self.full_layer_layer_norm = LayerNorm(a.hidden_size, a.layer_norm_eps)

    def __call__(self, x: mx.array) -> mx.array:
        x = self.attention(x)
        return self.full_layer_layer_norm(x + self.ffn_output(gelu_new(self.ffn(x))))


class LayerGroup(nn.Module):
    def __init__(self, a: PLBertArgs):
        super().__init__()
        self.albert_layers = [AlbertLayer(a)]


class Encoder(nn.Module):
    def __init__(self, a: PLBertArgs):
        super().__init__()
        self.layers = a.num_hidden_layers
        self.embedding_hidden_mapping_in = Linear(a.embedding_size, a.hidden_size)
        self.albert_layer_groups = [LayerGroup(a)]

    def __call__(self, x: mx.array) -> mx.array:
        x = self.embedding_hidden_mapping_in(x)
        layer = self.albert_layer_groups[0].albert_layers[0]
        for _ in range(self.layers):
            x = layer(x)
        return x


class CustomAlbert(nn.Module):
    def __init__(self, a: PLBertArgs):
        super().__init__()
        self.embeddings = Embeddings(a)
        self.encoder = Encoder(a)

    def __call__(self, tokens: mx.array) -> mx.array:
        """``tokens [T]`` -> ``[T, hidden]``."""
        return self.encoder(self.embeddings(tokens))

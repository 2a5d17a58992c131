"""Mimi's transformers (``encoder_transformer.*``, ``decoder_transformer.*``): causal
self-attention layers with LayerNorm, a GELU MLP, LayerScale and RoPE.

transformers' sliding window (``MimiConfig.sliding_window``) is not applied, as in its
eager/SDPA attention; Kyutai's Mimi applies its window (``MimiArgs.attention_window``), and a
stream (:class:`WindowCache`) keeps only the keys that window still reaches. Exact (erf) GELU runs
in numpy.
"""
from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ttscli.errors import CheckpointError
from ttscli.nn import Attention
from ttscli.nn.fastmath import gelu_tanh

from .config import MimiArgs


# Numerical Recipes erfcc coefficients: erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0,
# fractional error < 1.2e-7 everywhere.
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
         -0.82215223, 0.17087277)


def gelu_erf(x: mx.array) -> mx.array:
    """Exact (erf) GELU, x/2 * erfc(-x/sqrt2), evaluated by numpy: MLX's CPU erf costs ~50 ns per
    element (2.5x slower than this for the 8 x [T, 2048] MLP activations), and is less accurate in the
    negative tail."""
    a = np.asarray(x)
    z = np.abs(a) * np.float32(1.0 / math.sqrt(2.0))
    t = 0.5 * z
    t += 1.0
    np.reciprocal(t, out=t)
    p = np.full_like(t, _ERFC[-1])
    for c in _ERFC[-2::-1]:
        p *= t
        p += c
    z *= z
    np.subtract(p, z, out=p)
    np.exp(p, out=p)
    p *= t  # erfc(|x|/sqrt2)
    np.subtract(2.0, p, out=p, where=a > 0)  # erfc(-x/sqrt2) for x > 0
    p *= a
    p *= 0.5
    return mx.array(p)


_ACTS = {"gelu": gelu_erf, "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh, "relu": nn.relu,
         "silu": nn.silu}


class LayerScale(nn.Module):
    def __init__(self, dims: int, init: float = 0.01):
        super().__init__()
        self.scale = mx.full((dims,), init)

    def __call__(self, x: mx.array) -> mx.array:
        return x * self.scale


class MLP(nn.Module):
    def __init__(self, args: MimiArgs):
        super().__init__()
        self.fc1 = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.fc2 = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)
        if args.hidden_act not in _ACTS:
            raise CheckpointError(f"Mimi: unsupported hidden_act {args.hidden_act!r}")
        self.act = _ACTS[args.hidden_act]

    def __call__(self, x: mx.array) -> mx.array:
        return self.fc2(self.act(self.fc1(x)))


class TransformerLayer(nn.Module):
    def __init__(self, args: MimiArgs):
        super().__init__()
        self.self_attn = Attention(args.hidden_size, args.num_attention_heads, args.num_key_value_heads,
                                   args.head_dim, rope_theta=args.rope_theta, bias=args.attention_bias,
                                   qk_norm=False)
        self.mlp = MLP(args)
        self.input_layernorm = nn.LayerNorm(args.hidden_size, eps=args.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(args.hidden_size, eps=args.norm_eps)
        self.self_attn_layer_scale = LayerScale(args.hidden_size)
        self.mlp_layer_scale = LayerScale(args.hidden_size)

    def __call__(self, x: mx.array, mask, cache: "WindowCache | None" = None) -> mx.array:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), mask=mask, cache=cache))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class WindowCache:
    """One layer's keys/values of a stream, trimmed to the last ``window - 1`` positions after
    each call (all of them when ``window`` is None): what the next queries can still see.
    ``offset`` counts every position seen (the RoPE position of the next one)."""

    def __init__(self, window: int | None):
        self.window = window
        self.offset = 0
        self.keys: mx.array | None = None
        self.values: mx.array | None = None

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self.keys is not None:
            keys = mx.concatenate([self.keys, keys], axis=2)
            values = mx.concatenate([self.values, values], axis=2)
        self.offset += keys.shape[2] - (0 if self.keys is None else self.keys.shape[2])
        keep = keys.shape[2] if self.window is None else min(keys.shape[2], self.window - 1)
        self.keys, self.values = keys[:, :, keys.shape[2] - keep:], values[:, :, keys.shape[2] - keep:]
        return keys, values


def window_mask(length: int, keys: int, window: int | None):
    """``length`` queries over ``keys`` keys that end with them: causal, and within ``window``
    positions when set (True = visible); None/"causal" where the plain masks say the same."""
    if window is None or keys <= window and length == keys:
        return None if length == 1 else "causal"
    q = mx.arange(keys - length, keys)[:, None]
    k = mx.arange(keys)[None, :]
    return (k <= q) & (q - k < window)


class Transformer(nn.Module):
    def __init__(self, args: MimiArgs):
        super().__init__()
        self.window = args.attention_window
        self.layers = [TransformerLayer(args) for _ in range(args.num_hidden_layers)]

    def new_cache(self) -> list[WindowCache]:
        return [WindowCache(self.window) for _ in self.layers]

    def __call__(self, x: mx.array, cache: list[WindowCache] | None = None) -> mx.array:
        """``x [B, T, hidden]``; with ``cache`` (:meth:`new_cache`) x continues a stream."""
        # transformers builds a plain causal mask here: MimiConfig.sliding_window is not applied by
        # its create_causal_mask (checked against goldens with a window shorter than the clip).
        past = 0 if cache is None or cache[0].keys is None else cache[0].keys.shape[2]
        mask = window_mask(x.shape[1], past + x.shape[1], self.window)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, None if cache is None else cache[i])
        return x

"""The decoder's pre-transformer: 8 sliding-window (72 frames) causal layers with layer scale.

A query at frame i attends to frames j with ``i - window < j <= i`` (transformers'
sliding-window mask, which upstream applies in every layer). So the output at frame i depends
on the inputs of frames ``i - layers*(window-1) .. i`` (568 frames for the released model),
not only on the last 72.

Two caches, both owned by the caller:

* ``window`` (default): each layer keeps the keys/values of its last ``window - 1`` frames.
  Any split of a clip into chunks attends to exactly what a one-shot decode attends to.
* ``capacity=N``: a fixed number of KV slots per layer (the semantics of a fixed-size state,
  e.g. 256 slots, about 20 s). When a new frame finds the cache full, the cache is reset and
  re-primed: the last ``reprime_frames`` frames are re-decoded as context (their outputs, and so
  their audio, are discarded; positions restart at 0, which RoPE cannot tell apart) and then
  the new frames go in. Never clamped.

  Re-decoding must start from each layer's own input, which the cache keeps for the last
  ``reprime_frames`` frames: re-running only the stack's input would rebuild layer l's keys from
  frames whose own context was cut away, and the output at frame i depends on inputs as far
  back as ``layers*(window-1)`` frames, more than 256 slots hold for the released model
  (with random weights at the released dimensions the error was of the order of the signal
  itself; docs/benchmarks.md#reprime-real-dims). Per layer, ``reprime_frames >= window - 1``
  rebuilds exactly the keys/values a sliding-window decode attends to, so a re-primed stream
  equals the one-shot decode; fewer frames would change the audio and are refused.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from ttscli.nn import MLP, Attention, RMSNorm

from .config import DecoderArgs


class LayerKV:
    """Keys/values of one layer: the frames a later query may still see, and their positions."""

    __slots__ = ("keys", "values", "offset", "keep")

    def __init__(self, keep: int | None):
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.offset = 0                     # position of the next frame (RoPE offset)
        self.keep = keep                    # frames kept after an update; None keeps all

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def update_and_fetch(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array]:
        if self.keys is not None:
            k = mx.concatenate([self.keys, k], axis=2)
            v = mx.concatenate([self.values, v], axis=2)
        self.offset += k.shape[2] - self.length
        if self.keep is None:
            self.keys, self.values = k, v
        else:
            self.keys, self.values = k[:, :, -self.keep:], v[:, :, -self.keep:]
        return k, v


class TransformerCache:
    """Per-layer KV state of one stream, plus the re-prime context of a fixed capacity."""

    def __init__(self, args: DecoderArgs, capacity: int | None = None, reprime_frames: int | None = None):
        self.window = args.sliding_window
        self.num_layers = args.num_hidden_layers
        self.capacity = capacity
        self.reprime_frames = self.window - 1 if reprime_frames is None else reprime_frames
        if capacity is not None:
            if self.reprime_frames < self.window - 1:
                raise ValueError(f"a re-prime context of {self.reprime_frames} frames would change the audio: "
                                 f"the decoder attends to the last {self.window - 1} frames of every layer")
            if capacity <= self.reprime_frames:
                raise ValueError(f"decoder KV capacity {capacity} must exceed the re-prime context "
                                 f"{self.reprime_frames}")
        self.reprimes = 0
        # Each layer's input for the last reprime_frames frames, [1, n, hidden]: the re-prime context.
        self.history: list[mx.array | None] = [None] * self.num_layers
        self.layers = self._fresh()

    def _fresh(self) -> list[LayerKV]:
        keep = None if self.capacity is not None else self.window - 1
        return [LayerKV(keep) for _ in range(self.num_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length

    @property
    def offset(self) -> int:
        return self.layers[0].offset

    @property
    def full(self) -> bool:
        return self.capacity is not None and self.length >= self.capacity

    def reset(self) -> None:
        self.layers = self._fresh()

    def remember(self, layer: int, h: mx.array) -> None:
        if self.capacity is None:
            return
        past = self.history[layer]
        h = h if past is None else mx.concatenate([past, h], axis=1)
        self.history[layer] = h[:, -self.reprime_frames:]

    def state(self) -> list[mx.array]:
        """Arrays to evaluate with a chunk's output, so the next chunk starts from data, not graphs."""
        kv = [a for layer in self.layers for a in (layer.keys, layer.values) if a is not None]
        return kv + [h for h in self.history if h is not None]


def sliding_mask(queries: int, keys: int, window: int):
    """Query i (the last ``queries`` of ``keys`` positions) sees key j iff i - window < j <= i."""
    if queries == 1 and keys <= window:
        return None
    past = keys - queries
    qi = mx.arange(past, keys)[:, None]
    kj = mx.arange(keys)[None, :]
    return (kj <= qi) & (kj > qi - window)


class LayerScale(nn.Module):
    def __init__(self, dims: int):
        super().__init__()
        self.scale = mx.zeros((dims,))

    def __call__(self, x: mx.array) -> mx.array:
        return self.scale * x


class TransformerLayer(nn.Module):
    def __init__(self, args: DecoderArgs):
        super().__init__()
        self.self_attn = Attention(args.hidden_size, args.num_attention_heads, args.num_key_value_heads,
                                   args.head_dim, args.rope_theta, args.rms_norm_eps,
                                   bias=args.attention_bias, qk_norm=False)
        self.mlp = MLP(args.hidden_size, args.intermediate_size)
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(args.hidden_size)
        self.mlp_layer_scale = LayerScale(args.hidden_size)

    def __call__(self, x: mx.array, mask, cache: LayerKV | None) -> mx.array:
        h = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), mask, cache))
        return h + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(h)))


class DecoderTransformer(nn.Module):
    """``pre_transformer``: input_proj (latent -> hidden), layers, norm, output_proj (-> latent)."""

    def __init__(self, args: DecoderArgs):
        super().__init__()
        self.args = args
        self.input_proj = nn.Linear(args.latent_dim, args.hidden_size)
        self.layers = [TransformerLayer(args) for _ in range(args.num_hidden_layers)]
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.output_proj = nn.Linear(args.hidden_size, args.latent_dim)

    def make_cache(self, capacity: int | None = None, reprime_frames: int | None = None) -> TransformerCache:
        return TransformerCache(self.args, capacity, reprime_frames)

    def _forward(self, x: mx.array, cache: TransformerCache | None) -> mx.array:
        n = x.shape[1]
        past = 0 if cache is None else cache.length
        mask = sliding_mask(n, past + n, self.args.sliding_window)
        h = self.input_proj(x)
        for i, layer in enumerate(self.layers):
            if cache is not None:
                cache.remember(i, h)
            h = layer(h, mask, None if cache is None else cache.layers[i])
        return self.output_proj(self.norm(h))

    def _reprime(self, cache: TransformerCache) -> None:
        """Reset a full cache and rebuild every layer's keys/values from its remembered inputs."""
        cache.reset()
        n = cache.history[0].shape[1]
        mask = sliding_mask(n, n, self.args.sliding_window)
        for layer, h, kv in zip(self.layers, cache.history, cache.layers):
            # Only the keys/values stored in kv are kept; the attention output is never evaluated.
            layer.self_attn(layer.input_layernorm(h), mask, kv)
        cache.reprimes += 1

    def __call__(self, x: mx.array, cache: TransformerCache | None = None) -> mx.array:
        """x ``[1, n, latent]`` -> ``[1, n, latent]``; frames continue the stream held in ``cache``."""
        if cache is None or cache.capacity is None:
            return self._forward(x, cache)
        outs = []
        while x.shape[1]:
            if cache.full:
                self._reprime(cache)
            room = cache.capacity - cache.length
            piece, x = x[:, :room], x[:, room:]
            outs.append(self._forward(piece, cache))
        return outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=1)

"""Deliberately wrong variants of the speech decoder, shared by tests that must catch them."""
from __future__ import annotations

from ttscli.codecs.qwen3_12hz.transformer import sliding_mask


def input_only_reprime(transformer, cache) -> None:
    """``DecoderTransformer._reprime`` as it must not be: re-run only the stack's input frames,
    so after the reset every layer but the first rebuilds its keys from truncated context."""
    h = cache.history[0]                                    # the first layer's input = the stack's input
    cache.reset()
    mask = sliding_mask(h.shape[1], h.shape[1], transformer.args.sliding_window)
    for layer, kv in zip(transformer.layers, cache.layers):
        h = layer(h, mask, kv)
    cache.reprimes += 1

"""What codec LMs share: the decoder-only LM (Qwen3 / Llama blocks, RoPE variants), per-request
KV caches, the code-decoder protocol and samplers. Nothing here imports a model family.

Names resolve on first use, so ``ttscli.lm.config`` (pure data) and ``ttscli.lm.rope``'s numpy
part stay importable without loading MLX (the Core ML export and light commands use them).
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_WHERE = {
    "LMArgs": "config", "RopeArgs": "config",
    "KVCache": "cache", "ConcatCache": "cache", "make_cache": "cache",
    "DecoderLM": "model", "DecoderLayer": "model", "create_causal_mask": "model",
    "CodeDecoder": "decoder", "MLXCodeDecoder": "decoder", "graph_primitives": "decoder",
    "fuse_projections": "model",
    "SamplingParams": "sample", "KeyStream": "sample", "logit_bias": "sample",
}
# The draw function ``sample`` is imported from ttscli.lm.sample: as a package attribute its
# name is the submodule's.
__all__ = ["CodeDecoder", "ConcatCache", "DecoderLM", "DecoderLayer", "KVCache", "KeyStream", "LMArgs",
           "MLXCodeDecoder", "RopeArgs", "SamplingParams", "create_causal_mask", "fuse_projections",
           "graph_primitives", "logit_bias", "make_cache"]

if TYPE_CHECKING:
    from ttscli.lm.cache import ConcatCache, KVCache, make_cache
    from ttscli.lm.config import LMArgs, RopeArgs
    from ttscli.lm.decoder import CodeDecoder, MLXCodeDecoder, graph_primitives
    from ttscli.lm.model import DecoderLayer, DecoderLM, create_causal_mask, fuse_projections
    from ttscli.lm.sample import KeyStream, SamplingParams, logit_bias


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'ttscli.lm' has no attribute {name!r}")
    return getattr(import_module(f"ttscli.lm.{where}"), name)

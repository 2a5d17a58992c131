"""The code decoder: the causal LM of a codec-LM TTS as its frame loop sees it.

A family's loop talks to a :class:`CodeDecoder`, so the LM can run on MLX
(:class:`MLXCodeDecoder`) or on another backend (Core ML) while embeddings, per-frame helpers
and sampling stay where they are.  Caches are opaque objects owned by one request.

Two kinds of frame come out of the same contract. A discrete-code LM's head scores its code
vocabulary (``logits [B, V]``) and a token sampler (:mod:`ttscli.lm.sample`) draws the code. A
continuous-latent LM (Pocket TTS) has a stop head (``logits [B, 1]``, the EOS logit) and draws
its latent from ``hidden`` with its own sampler (a flow head turning noise into the latent), as
the code sampler draws from logits: the decoder returns what every backend computes the same
way (the transformer, its heads), the loop keeps the random draws. :data:`LATENT_HEAD` names
that width-1 head.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import mlx.core as mx


# V of a continuous-latent LM's logits: its one stop (EOS) logit; the latent comes from hidden
LATENT_HEAD = 1


@runtime_checkable
class CodeDecoder(Protocol):
    def new_cache(self) -> Any: ...

    def prefill(self, embeds: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        """``embeds [B, T, H]`` -> (logits ``[B, V]``, post-norm hidden ``[B, H]``) of the last
        position: V codes, or :data:`LATENT_HEAD` (the stop logit) for a continuous-latent LM,
        whose sampler reads the latent's condition from the hidden."""
        ...

    def step(self, embed: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        """One position ``[B, 1, H]`` (a code's or a latent's embedding) -> (logits ``[B, V]``,
        hidden ``[B, H]``), as :meth:`prefill`."""
        ...


class LMHeadModel(Protocol):
    """What :class:`MLXCodeDecoder` wraps: an MLX LM with its output head."""

    def new_cache(self) -> Any: ...

    def __call__(self, embeds: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        """Logits and post-norm hidden state of the last position of ``embeds``."""
        ...

    def step_parts(self) -> tuple[Any, Any]:
        """The decoder stack (a :class:`ttscli.lm.model.DecoderLM`) and the head (an ``nn.Linear``)
        that ``__call__`` runs: what the one-kernel decode step (ttscli.lm.cuda_step) takes."""
        ...


class MLXCodeDecoder:
    """An MLX LM as a code decoder. ``sequential=True`` prefills one position per call, syncing
    after each (the baseline bench compares batched prefill with, and a parity check).

    ``compiled=True`` (the default on a GPU) fuses the q/k/v and gate/up projections and runs
    each decode step as one :func:`mx.compile` trace over the cache's fixed-capacity storage
    (:class:`ttscli.lm.cache.SlotCache`): a step's shapes change only when the cache grows by a
    block, so the trace replays as a short fixed kernel sequence.  A decode step is launch-bound
    on a GPU (a 0.6B talker step's ~1 GB of weight reads take a fraction of the time its
    hundreds of kernel launches do).  The CPU keeps the plain path its goldens were taken with.
    """

    # a compiled decode step as one CUDA kernel (ttscli.lm.cuda_step) where the kernel takes the
    # model's ``step_parts()`` (float32, at most 4 rows, plain shared-LM layers)
    step_kernel: bool = True

    def __init__(self, model: LMHeadModel, sequential: bool = False, compiled: bool | None = None):
        from ttscli.nn.fastmath import on_cpu

        self.model = model
        self.sequential = sequential
        self.compiled = (not on_cpu()) if compiled is None else compiled
        self._step = None
        if self.compiled:
            from ttscli.lm.model import fuse_projections

            fuse_projections(model)
            # traces taken before fusing (a code predictor's frame) baked the separate projections
            for _, m in model.named_modules():
                if hasattr(m, "reset_compiled"):
                    m.reset_compiled()
            self._step = mx.compile(self._slot_step)

    def _slot_step(self, embed: mx.array, pos: mx.array, keys: list, values: list):
        from ttscli.lm.cache import SlotCache

        cache = [SlotCache(k, v, pos) for k, v in zip(keys, values)]
        logits, hidden = self.model(embed, cache)
        return logits, hidden, [c.keys for c in cache], [c.values for c in cache]

    def new_cache(self) -> Any:
        return self.model.new_cache()

    def prefill(self, embeds: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        if not self.sequential:
            return self.model(embeds, cache)
        out = None
        for i in range(embeds.shape[1]):
            out = self.model(embeds[:, i:i + 1], cache)
            mx.eval(out, [c.state for c in cache])
        return out

    def _step_kernel(self, rows: int):
        if not (self.step_kernel and self.compiled):
            return None
        # kept on the model: a decoder made per utterance (Chatterbox's T3) stacks the weights once
        kept = self.model.__dict__.setdefault("_ttscli_step_kernels", {})
        if rows not in kept:
            from ttscli.lm import cuda_step

            lm, head = self.model.step_parts()
            kept[rows] = None if cuda_step.unsupported(lm, head, rows) else cuda_step.LMStepKernel(lm, head)
        return kept[rows]

    def step(self, embed: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        from ttscli.lm.cache import KVCache

        if (self._step is None or embed.shape[1] != 1 or not cache
                or not all(type(c) is KVCache and c.keys is not None for c in cache)):
            return self.model(embed, cache)
        for c in cache:
            c.reserve(1, c.keys, c.values)
        kernel = self._step_kernel(embed.shape[0])
        if kernel is not None and cache[0].keys.dtype == mx.float32:
            return kernel(embed[:, 0], cache)
        keys, values = [c.keys for c in cache], [c.values for c in cache]
        # drop the cache's references first, so the step's writes can reuse the old storage
        for c in cache:
            c.keys = c.values = None
        logits, hidden, keys, values = self._step(embed, mx.array(cache[0].offset, mx.int32), keys, values)
        for c, k, v in zip(cache, keys, values):
            c.keys, c.values = k, v
            c.offset += 1
        return logits, hidden


# Primitives that only describe a view of their input: no kernel runs for them on a GPU.
_VIEWS = {"Broadcast", "Reshape", "Transpose", "Slice", "AsStrided", "ExpandDims", "Squeeze", "Split",
          "StopGradient", "Depends"}


def graph_primitives(*outputs: mx.array) -> dict[str, int]:
    """Size of the lazy graph behind ``outputs`` (not yet evaluated), as MLX will run it.

    MLX does not count kernel launches; the primitive nodes of the graph after :func:`mx.compile`
    fusion are the closest figure it exposes: each non-view primitive is one kernel launch on a
    GPU (a few, such as sorts or big reductions, launch two or three), and each costs the same
    host-side scheduling on any device.  Returns ``{"primitives", "kernels"}`` (all nodes, and the
    nodes that are not views).
    """
    import os
    import re
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".dot")
    os.close(fd)
    try:
        mx.export_to_dot(path, *outputs)
        with open(path) as f:
            labels = re.findall(r'label ="([^"]*)", shape=rectangle', f.read())
    finally:
        os.unlink(path)
    return {"primitives": len(labels), "kernels": sum(lb not in _VIEWS for lb in labels)}

"""A converted LM graph as a code decoder: ``new_cache() / prefill(embeds, cache) /
step(embed, cache) -> (logits, hidden)``, the protocol the codec-LM frame loops drive.

Prefill runs on onnxruntime, or, when an MLX model of the same LM is given
(``prefill="mlx"``), as one MLX batched forward whose K/V cache is then copied into the
onnxruntime buffers ("handed over"): both store keys after RoPE and q/k norm, in the same
``[1, kv_heads, positions, head_dim]`` layout. Which is faster depends on the CPU and the
prompt length (README, "CPU backend", has the figures; onnxruntime is the default).

Arrays come back as ``mx.array`` when the input was one, else numpy. A cache belongs to one
request; the session itself holds no request state, so several requests may run at once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ttscli.errors import UsageError

from .manifest import component, read_manifest
from .runtime import LMCache, OnnxLM

CODE_DECODER = "code_decoder"
PREFILL = ("onnx", "mlx")


def to_numpy(x) -> np.ndarray:
    if type(x).__module__.startswith("mlx"):
        import mlx.core as mx

        x = x.astype(mx.float32)   # numpy has no bfloat16
    return np.asarray(x, dtype=np.float32)


def like(a: np.ndarray, ref):
    if type(ref).__module__.startswith("mlx"):
        import mlx.core as mx

        return mx.array(a)
    return a


class OnnxCodeDecoder:
    def __init__(self, lm: OnnxLM, head: str = "logits", mlx_model: Any = None, prefill: str = "onnx"):
        """``lm``: the loaded graph; ``head``: its logits output; ``mlx_model``: the same LM on MLX
        (``new_cache()`` and ``__call__(embeds, cache) -> (logits, hidden)``) for ``prefill="mlx"``."""
        if prefill not in PREFILL:
            raise UsageError(f"prefill must be one of {', '.join(PREFILL)}, not {prefill!r}")
        if prefill == "mlx" and mlx_model is None:
            raise UsageError("prefill='mlx' needs the MLX model of the same LM")
        self.lm = lm
        self.head = head
        self.mlx_model = mlx_model
        self.prefill_on = prefill
        self.hidden_size = lm.hidden_size

    @classmethod
    def open(cls, folder: Path, name: str = CODE_DECODER, manifest: dict | None = None, **kw) -> OnnxCodeDecoder:
        manifest = manifest or read_manifest(folder)
        entry = component(manifest, name, folder)
        return cls(OnnxLM(folder, entry), entry["heads"][0], **kw)

    def new_cache(self) -> LMCache:
        return self.lm.new_cache()

    def prefill(self, embeds, cache: LMCache):
        """``embeds [1, L, H]`` -> (logits ``[1, V]``, hidden ``[1, H]``) of the last position."""
        if embeds.shape[1] < 1:
            raise ValueError("prefill needs at least one position")
        if self.prefill_on == "mlx" and cache.offset == 0:
            return self._prefill_mlx(embeds, cache)
        logits, hidden = self.lm.run(to_numpy(embeds), cache, (self.head, "hidden"))
        return like(logits, embeds), like(hidden, embeds)

    def _prefill_mlx(self, embeds, cache: LMCache):
        import mlx.core as mx

        mcache = self.mlx_model.new_cache()
        logits, hidden = self.mlx_model(embeds if isinstance(embeds, mx.array) else mx.array(embeds), mcache)
        n = mcache[0].offset
        self.lm.ensure(cache, n)
        for i, c in enumerate(mcache):
            k, v = c.state
            cache.keys[i][:, :, :n] = np.asarray(k.astype(mx.float32))
            cache.values[i][:, :, :n] = np.asarray(v.astype(mx.float32))
        cache.offset = n
        if isinstance(embeds, mx.array):
            return logits.astype(mx.float32), hidden.astype(mx.float32)
        return to_numpy(logits), to_numpy(hidden)

    def step(self, embed, cache: LMCache):
        """One position ``[1, 1, H]`` or ``[1, H]`` -> (logits ``[1, V]``, hidden ``[1, H]``)."""
        x = to_numpy(embed).reshape(1, 1, -1)
        logits, hidden = self.lm.run(x, cache, (self.head, "hidden"))
        return like(logits, embed), like(hidden, embed)

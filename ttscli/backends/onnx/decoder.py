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

from ttscli.backends.decoder import CODE_DECODER, ConvertedCodeDecoder, to_numpy
from ttscli.errors import UsageError

from .manifest import RECORD
from .runtime import LMCache, OnnxLM

__all__ = ["CODE_DECODER", "PREFILL", "OnnxCodeDecoder"]

PREFILL = ("onnx", "mlx")


class OnnxCodeDecoder(ConvertedCodeDecoder):
    record = RECORD

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
    def from_entry(cls, folder: Path, entry: dict, **kw) -> OnnxCodeDecoder:
        return cls(OnnxLM(folder, entry), entry["heads"][0], **kw)

    def new_cache(self) -> LMCache:
        return self.lm.new_cache()

    def prefill(self, embeds, cache: LMCache):
        if self.prefill_on == "mlx" and cache.offset == 0 and embeds.shape[1] >= 1:
            return self._prefill_mlx(embeds, cache)
        return super().prefill(embeds, cache)

    def _prefill(self, x: np.ndarray, cache: LMCache) -> tuple[np.ndarray, np.ndarray]:
        return tuple(self.lm.run(x, cache, (self.head, "hidden")))

    def _step(self, x: np.ndarray, cache: LMCache) -> tuple[np.ndarray, np.ndarray]:
        return tuple(self.lm.run(x.reshape(x.shape[0], 1, -1), cache, (self.head, "hidden")))

    def _prefill_mlx(self, embeds, cache: LMCache):
        import mlx.core as mx

        mcache = self.mlx_model.new_cache()
        logits, hidden = self.mlx_model(embeds if isinstance(embeds, mx.array) else mx.array(embeds), mcache)
        n = mcache[0].offset
        self.lm.ensure(cache, n, embeds.shape[0])
        for i, c in enumerate(mcache):
            k, v = c.state
            cache.keys[i][:, :, :n] = np.asarray(k.astype(mx.float32))
            cache.values[i][:, :, :n] = np.asarray(v.astype(mx.float32))
        cache.offset = n
        if isinstance(embeds, mx.array):
            return logits.astype(mx.float32), hidden.astype(mx.float32)
        return to_numpy(logits), to_numpy(hidden)

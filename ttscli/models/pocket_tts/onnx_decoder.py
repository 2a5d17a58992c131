"""The flow LM on onnxruntime (``--backend flow_lm=onnx-f32|onnx-int8|onnx-int4``).

:class:`FlowOnnxDecoder` is a code decoder (``new_cache / prefill / step -> (EOS logit,
hidden)``) over ``flow_lm.onnx`` (onnx_export.py), and adds :meth:`~FlowOnnxDecoder.frame`: one
run gives the EOS logit, the hidden and the next latent from the noise given. Prefill and plain
steps feed zero noise and drop the latent (one graph: a second one without the flow head would
double the cache's bindings for a head that costs a few percent of a step).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ttscli.backends.decoder import like, to_numpy
from ttscli.backends.onnx.decoder import OnnxCodeDecoder
from ttscli.backends.onnx.runtime import LMCache, OnnxLM

OUTPUTS = ("eos_logit", "hidden", "latent")


class FlowOnnxDecoder(OnnxCodeDecoder):
    def __init__(self, lm: OnnxLM, precision: str):
        super().__init__(lm, "eos_logit")
        self.precision = precision
        self.latent_dim = int(lm.entry["latent_dim"])
        self.flow_steps = int(lm.entry.get("flow_steps", 1))

    def _run(self, x: np.ndarray, cache: LMCache, noise: np.ndarray | None) -> list[np.ndarray]:
        if noise is None:
            noise = np.zeros((x.shape[0], self.latent_dim), np.float32)
        return self.lm.run(x, cache, OUTPUTS, inputs={"noise": noise.reshape(x.shape[0], -1)})

    def _prefill(self, x: np.ndarray, cache: LMCache) -> tuple[np.ndarray, np.ndarray]:
        return tuple(self._run(x, cache, None)[:2])

    def _step(self, x: np.ndarray, cache: LMCache) -> tuple[np.ndarray, np.ndarray]:
        return tuple(self._run(x.reshape(x.shape[0], 1, -1), cache, None)[:2])

    def cache_from(self, state) -> LMCache:
        """A cache holding a voice state (per layer keys and values ``[1, heads, T, head_dim]``,
        keys rotated: what the graph's attention stores)."""
        cache = self.new_cache()
        n = int(state[0][0].shape[2]) if state else 0
        self.lm.ensure(cache, n)
        for i, (k, v) in enumerate(state):
            cache.keys[i][:, :, :n] = to_numpy(k)
            cache.values[i][:, :, :n] = to_numpy(v)
        cache.offset = n
        return cache

    def state_of(self, cache: LMCache) -> list[tuple[np.ndarray, np.ndarray]]:
        """The cache's positions as a voice state (copies: the buffers keep being written)."""
        n = cache.offset
        return [(k[:, :, :n].copy(), v[:, :, :n].copy()) for k, v in zip(cache.keys, cache.values)]

    def frame(self, embed, cache: LMCache, noise):
        """One frame: ``embed [B, 1, H]`` (the previous latent's embedding) and ``noise [B,
        latent]`` -> (EOS logit ``[B, 1]``, hidden ``[B, H]``, the flow head's latent ``[B,
        latent]``), in the kind of array ``embed`` is."""
        x = to_numpy(embed)
        eos, hidden, latent = self._run(x.reshape(x.shape[0], 1, -1), cache, to_numpy(noise))
        return like(eos, embed), like(hidden, embed), like(latent, embed)


def open_decoder(folder: Path) -> FlowOnnxDecoder:
    """The flow LM graph converted into ``folder``."""
    from ttscli.backends.onnx.manifest import component, read_manifest

    from .onnx_export import COMPONENT

    m = read_manifest(folder)
    return FlowOnnxDecoder(OnnxLM(folder, component(m, COMPONENT, folder)), m.get("precision", "?"))


def load_decoder(backend: str, flow_lm, latent_dim: int, folder: Path | None,
                 model_id: str | None = None) -> FlowOnnxDecoder:
    """``onnx`` (int8) or ``onnx-f32|int8|int4``: the conversion of the checkpoint's language
    ``folder`` in ttscli's cache (built on first use) or, for random weights (``folder`` None),
    of the in-memory flow LM."""
    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.onnx.graph import Quant
    from ttscli.backends.select import split_backend

    from .onnx_export import build_from_model, find_or_build

    require_onnxruntime()
    quant = Quant(split_backend(backend)[1])
    out = build_from_model(flow_lm, latent_dim, quant) if folder is None else find_or_build(folder, quant, model_id)
    return open_decoder(out)

"""IndexTTS2's semantic GPT on Core ML (``--backend code_decoder=coreml``, macOS 15+).

The GPT-2 stack (``gpt.h.*``, ``gpt.ln_f``), then ``final_norm`` and ``mel_head`` (with its bias),
as one stateful package of the shared Core ML LM export in its LayerNorm / tanh-GELU block style
without rotary positions; GPT-2's names are mapped onto the export's as for onnxruntime
(:func:`~ttscli.models.indextts2.onnx_gpt.stack_weights`). The prompt's embeddings (conditioning,
text and code tables with their learned positions), the sampler, the beam bookkeeping and the
latent pass S2Mel reads stay on MLX; :class:`SemanticGPT` only swaps the forward and the cache
(:class:`CoreMLGPT`).

A package runs one row: each beam is its own Core ML state, and a beam reorder copies the moved
beams' KV caches from state to state (``read_state`` / ``write_state``), so a reorder costs a read
and a write of each moved beam's whole cache.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from ttscli.backends.coreml.convert import convert_code_decoder, export_code_decoder

from .onnx_gpt import COMPONENT, GPT2_BLOCK, SOURCE_FILES, gpt_params, lm_args, stack_weights

__all__ = ["CAPACITY", "CoreMLGPT", "attach", "convert_coreml", "export_coreml"]

FAMILY = "indextts2"
FILE = "gpt.mlpackage"
# KV positions of one segment: the 34 conditioning rows, upstream's 120 text tokens a segment
# (framed), the start code and upstream's 1500 codes at most (max_mel_tokens); the fp16 keys and
# values of the 24 layers x 20 heads x 64 are then 252 MB per beam
CAPACITY = 2048
STATES = ("key_cache", "value_cache")


def export_gpt(gpt, out_dir: Path, *, model_id: str, source: dict, capacity: int = CAPACITY,
               weights_8bit: bool = False, precision: str = "float16") -> dict:
    """``gpt.mlpackage`` and the manifest naming it into ``out_dir``, from a loaded GPT's weights."""
    from ttscli.backends.coreml.weights import as_float32

    params = gpt_params(gpt)
    args = lm_args(gpt)
    stack = stack_weights({k.removeprefix("gpt."): v for k, v in params.items() if k.startswith("gpt.")},
                          args.num_hidden_layers)
    norm = (as_float32(params["final_norm.weight"]), as_float32(params["final_norm.bias"]), float(gpt.final_norm.eps))
    return export_code_decoder((args, stack, as_float32(params["mel_head.weight"])), out_dir, FILE, model_id=model_id,
                               family=FAMILY, source=source, capacity=capacity, weights_8bit=weights_8bit,
                               precision=precision, style=GPT2_BLOCK, head_bias=as_float32(params["mel_head.bias"]),
                               head_norm=norm)


def export_coreml(checkpoint: Path, out_dir: Path, *, model_id: str, capacity: int = CAPACITY,
                  weights_8bit: bool = False, precision: str = "float16") -> dict:
    """The package of ``checkpoint``'s gpt.pth, its hash in the manifest."""
    from ttscli.backends.coreml.manifest import source_files
    from ttscli.models.indextts2.config import read_args
    from ttscli.models.indextts2.load import load_unified_voice

    checkpoint = Path(checkpoint)
    gpt, _ = load_unified_voice(checkpoint, read_args(checkpoint), dtype="float32")
    record = {"checkpoint": str(checkpoint.resolve()), "files": source_files(checkpoint, SOURCE_FILES)}
    return export_gpt(gpt, out_dir, model_id=model_id, source=record, capacity=capacity, weights_8bit=weights_8bit,
                      precision=precision)


def convert_coreml(spec, checkpoint: Path, out_dir: Path, *, capacity: int = CAPACITY, quantize: bool = False,
                   q_bits: int = 8, q_group_size: int | None = None, weights_8bit: bool = False,
                   dtype: str | None = None, progress: Callable[..., None] | None = None, **_unused) -> None:
    """``ttscli convert indextts2 --to coreml [-q]`` (``capacity``: :data:`CAPACITY`)."""
    convert_code_decoder(export_coreml, spec, checkpoint, out_dir, "the semantic GPT", capacity=capacity,
                         quantize=quantize, q_bits=q_bits, weights_8bit=weights_8bit, dtype=dtype, progress=progress)


class CoreMLGPT:
    """The package driven as :class:`SemanticGPT` drives its MLX stack: a cache per request (a
    list of one-row caches, one per beam), ``embeds [B, T, D]`` in, the last position's
    ``(logits [B, V], hidden [B, D])`` out (MLX arrays), and beam rows reordered in place. Each
    row runs through ``decoder``, the package as the shared code decoder (one row per call)."""

    def __init__(self, decoder):
        self.decoder = decoder            # a CoreMLCodeDecoder
        self.capacity = decoder.capacity

    def new_cache(self) -> list:
        return [self.decoder.new_cache()]

    def __call__(self, embeds, cache: list):
        import mlx.core as mx

        from ttscli.backends.coreml.decoder import ensure_fits
        from ttscli.backends.decoder import to_numpy

        x = to_numpy(embeds)
        if x.shape[0] != len(cache):
            raise ValueError(f"{x.shape[0]} rows for a cache of {len(cache)}")
        logits, hidden = [], []
        for rows, c in zip(x, cache):
            ensure_fits(c, rows.shape[0], "semantic GPT", "conditioning, text and codes",
                        "--backend code_decoder=mlx")
            lg, h = self.decoder.prefill(rows[None], c)
            logits.append(lg[0])
            hidden.append(h[0])
        return mx.array(np.stack(logits)), mx.array(np.stack(hidden))

    def select_rows(self, cache: list, rows: list[int]) -> None:
        """Row ``i`` of the cache becomes a copy of row ``rows[i]``: rows that stay put keep their
        state; each moved row's caches are read first, then written into the destination's state."""
        from ttscli.backends.coreml.decoder import CoreMLCache

        moved = [(i, r) for i, r in enumerate(rows) if i >= len(cache) or r != i]
        taken = {r: ([cache[r].state.read_state(s) for s in STATES], cache[r].offset) for _, r in moved}
        out = list(cache[: len(rows)]) + [None] * (len(rows) - len(cache))
        for i, r in moved:
            state = cache[i].state if i < len(cache) else self.decoder.new_cache().state
            values, offset = taken[r]
            for name, value in zip(STATES, values):
                state.write_state(name, value)
            out[i] = CoreMLCache(state, self.capacity, offset)
        cache[:] = out


def attach(gpt, checkpoint: Path, compute_units: str = "all") -> str:
    """Run ``gpt``'s decoding from its Core ML package (converted from ``checkpoint``, found by the
    manifest's source hashes); returns ``"coreml"``. The MLX stack stays for the latent pass
    S2Mel reads."""
    from ttscli.backends.coreml.decoder import open_code_decoder

    gpt.decoder = CoreMLGPT(open_code_decoder(Path(checkpoint), compute_units, COMPONENT))
    return "coreml"

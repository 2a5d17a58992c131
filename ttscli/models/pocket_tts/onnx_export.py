"""Pocket TTS's flow LM on onnxruntime: one graph per frame, ``flow_lm.onnx``.

The shared decoder-LM graph (ttscli.backends.onnx.graph) in Kyutai's block style (LayerNorm,
tanh-GELU MLP, RoPE on adjacent pairs) with the KV cache passed in and out, and a tail of this
family's own: the EOS head (``eos_logit [B, 1]``) and the flow head's single LSD step from the
``noise [B, latent]`` input to the next latent (``latent [B, latent]``). The noise comes in, so
a frame equals MLX's for the same draw. One step is the model's default (``sampler_decode_steps``
1): its two time conditions (s = 0, t = 1) are constants, folded into one vector at export. The
text table, the latent and voice projections and Mimi stay on MLX.

Conversions live in ttscli's cache (``paths.converted_dir(MODEL, "onnx-<precision>")``), found
by the sha256 of model.safetensors; a missing or stale one is built on first use.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from ttscli.backends.onnx.convert import RANDOM_SOURCE, build_from_params, convert_hook, mlx_params
from ttscli.backends.onnx.convert import find_or_build as shared_find_or_build
from ttscli.backends.onnx.export import checkpoint_record, export_components, export_lm, layout_is
from ttscli.backends.onnx.graph import Builder, Quant

from .config import FlowLMArgs
from .stack import KYUTAI, flow_lm_weights, lm_args, stack_weights, time_embedding

FAMILY = "pocket_tts"
COMPONENT = "flow_lm"
FILE = "flow_lm.onnx"
SOURCE_FILES = ("model.safetensors",)
GRAPH_LAYOUT = 1
# RoPE table length: the longest voice + text + frames one cache holds (upstream's model runs
# 1000 positions; a built-in voice takes ~125 and a 200-character chunk ~60 tokens + 300 frames)
MAX_POSITIONS = 2048


def flow_tail(w: Mapping[str, np.ndarray], a: FlowLMArgs, latent_dim: int):
    """The graph's tail on ``hidden``: the EOS head and one LSD step of the flow head."""

    def tail(b: Builder, hidden: str) -> tuple[list, list]:
        from onnx import TensorProto, helper

        b.linear(hidden, w["out_eos.weight"], w["out_eos.bias"], "out_eos", out="eos_logit")
        f = "flow_net."
        times = (time_embedding(w, f + "time_embed.0.", 0.0) + time_embedding(w, f + "time_embed.1.", 1.0)) / 2
        y = b.linear(hidden, w[f + "cond_embed.weight"], w[f + "cond_embed.bias"] + times, f + "cond_embed")
        silu_y = b.node("Mul", [y, b.node("Sigmoid", [y])[0]])[0]
        x = b.linear("noise", w[f + "input_proj.weight"], w[f + "input_proj.bias"], f + "input_proj")
        for i in range(a.flow_depth):
            x = res_block(b, w, f"{f}res_blocks.{i}.", x, silu_y, a.flow_dim)
        p = f + "final_layer."
        mod = b.linear(silu_y, w[p + "adaLN_modulation.1.weight"], w[p + "adaLN_modulation.1.bias"],
                       p + "adaLN_modulation.1")
        shift, scale = b.node("Split", [mod, b.const(p + "split", np.array([a.flow_dim] * 2, np.int64))], 2, axis=-1)
        h = b.node("LayerNormalization", [x, b.const(p + "ones", np.ones(a.flow_dim, np.float32)),
                                          b.const(p + "zeros", np.zeros(a.flow_dim, np.float32))],
                   epsilon=1e-6, axis=-1)[0]
        flow = b.linear(modulate(b, h, shift, scale), w[p + "linear.weight"], w[p + "linear.bias"], p + "linear")
        b.node("Add", ["noise", flow], ["latent"])
        batch = ["batch", latent_dim]
        return ([helper.make_tensor_value_info("noise", TensorProto.FLOAT, batch)],
                [helper.make_tensor_value_info("eos_logit", TensorProto.FLOAT, ["batch", 1]),
                 helper.make_tensor_value_info("latent", TensorProto.FLOAT, batch)])

    return tail


def modulate(b: Builder, x: str, shift: str, scale: str) -> str:
    return b.node("Add", [b.node("Add", [x, b.node("Mul", [x, scale])[0]])[0], shift])[0]


def res_block(b: Builder, w: Mapping[str, np.ndarray], p: str, x: str, silu_y: str, dim: int) -> str:
    """``x + gate * mlp(modulate(LayerNorm(x), shift, scale))`` (upstream's ResBlock)."""
    mod = b.linear(silu_y, w[p + "adaLN_modulation.1.weight"], w[p + "adaLN_modulation.1.bias"],
                   p + "adaLN_modulation.1")
    shift, scale, gate = b.node("Split", [mod, b.const(p + "split", np.array([dim] * 3, np.int64))], 3, axis=-1)
    h = b.node("LayerNormalization", [x, b.const(p + "in_ln.weight", np.asarray(w[p + "in_ln.weight"], np.float32)),
                                      b.const(p + "in_ln.bias", np.asarray(w[p + "in_ln.bias"], np.float32))],
               epsilon=1e-6, axis=-1)[0]
    h = b.linear(modulate(b, h, shift, scale), w[p + "mlp.0.weight"], w[p + "mlp.0.bias"], p + "mlp.0")
    h = b.node("Mul", [h, b.node("Sigmoid", [h])[0]])[0]
    h = b.linear(h, w[p + "mlp.2.weight"], w[p + "mlp.2.bias"], p + "mlp.2")
    return b.node("Add", [x, b.node("Mul", [gate, h])[0]])[0]


def export_flow_lm(source, a: FlowLMArgs, latent_dim: int, out_dir: Path, quant: Quant, *, model_id: str,
                   source_record: dict, progress: Callable[..., None] | None = None) -> dict:
    """``flow_lm.onnx`` + manifest into ``out_dir`` from a weight source with the published names."""
    def build(folder: Path) -> dict:
        w = flow_lm_weights(source)
        entry = export_lm(lm_args(a), stack_weights(w, a), folder, FILE, heads={}, max_positions=MAX_POSITIONS,
                          quant=quant, style=KYUTAI, tail=flow_tail(w, a, latent_dim))
        return {**entry, "heads": ["eos_logit"], "latent_dim": latent_dim, "flow_steps": 1}

    return export_components(out_dir, [(COMPONENT, "flow LM step (transformer, EOS and flow heads)", build)],
                             model_id=model_id, family=FAMILY, precision=quant.precision, source=source_record,
                             layout=GRAPH_LAYOUT, progress=progress)


def export_checkpoint(checkpoint: Path, out_dir: Path, quant: Quant, *, model_id: str,
                      progress: Callable[..., None] | None = None) -> dict:
    from ttscli.backends.coreml.weights import SafeTensors

    from .load import language_dir, read_args

    folder = language_dir(Path(checkpoint))
    args = read_args(folder)
    return export_flow_lm(SafeTensors(folder / SOURCE_FILES[0]), args.flow_lm, args.latent_dim, out_dir, quant,
                          model_id=model_id, source_record=checkpoint_record(folder, SOURCE_FILES),
                          progress=progress)


convert_onnx = convert_hook(export_checkpoint)


def find_or_build(checkpoint: Path, quant: Quant, model_id: str | None = None) -> Path:
    """The folder converted from ``checkpoint`` (its language folder) at this precision
    (ttscli's cache, by source hashes; built once when missing or stale)."""
    return shared_find_or_build(checkpoint, quant, export_checkpoint, model_id, accept=layout_is(FAMILY, GRAPH_LAYOUT))


def build_from_model(flow_lm, latent_dim: int, quant: Quant) -> Path:
    """The graph of an in-memory flow LM (random weights at the real size for ``bench
    --random-weights``), cached by a fingerprint of its weights."""
    params = mlx_params(flow_lm, lambda k: True, prefix="flow_lm.")
    return build_from_params(params, quant, f"{FAMILY}/{GRAPH_LAYOUT}", lambda src, tmp: export_flow_lm(
        src, flow_lm.args, latent_dim, tmp, quant, model_id="random weights", source_record=RANDOM_SOURCE))

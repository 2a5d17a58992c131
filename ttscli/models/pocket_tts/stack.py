"""The flow LM's tensors as the converted-LM exports (ONNX graph, Core ML program) read them:
the transformer under the shared stack's names in Kyutai's block style, and the flow head's
constant time conditioning."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ttscli.backends.blocks import Style
from ttscli.lm.config import LMArgs, RopeArgs

from .config import FlowLMArgs

KYUTAI = Style("layer", "gelu_tanh", rope_interleaved=True)
# the stack's tensors: ours (flow_lm.transformer.layers.N.*) -> the shared graph's (layers.N.*)
LAYER_NAMES = {"norm1": "input_layernorm", "norm2": "post_attention_layernorm",
               "self_attn.out_proj": "self_attn.o_proj", "linear1": "mlp.up_proj", "linear2": "mlp.down_proj"}


def lm_args(a: FlowLMArgs) -> LMArgs:
    return LMArgs(hidden_size=a.d_model, num_hidden_layers=a.num_layers, num_attention_heads=a.num_heads,
                  intermediate_size=a.feedforward, rms_norm_eps=1e-5, rope=RopeArgs(theta=float(a.max_period)))


def stack_weights(w: Mapping[str, np.ndarray], a: FlowLMArgs) -> dict[str, np.ndarray]:
    """The transformer and ``out_norm`` under the shared graph's names; ``in_proj`` split into
    q, k and v (its rows are [q, k, v], each ``d_model``)."""
    out = {"norm.weight": w["out_norm.weight"], "norm.bias": w["out_norm.bias"]}
    for i in range(a.num_layers):
        src, dst = f"transformer.layers.{i}.", f"layers.{i}."
        q, k, v = np.split(w[src + "self_attn.in_proj.weight"], 3, axis=0)
        out.update({dst + "self_attn.q_proj.weight": q, dst + "self_attn.k_proj.weight": k,
                    dst + "self_attn.v_proj.weight": v})
        for ours, theirs in LAYER_NAMES.items():
            for kind in ("weight", "bias"):
                if f"{src}{ours}.{kind}" in w:
                    out[f"{dst}{theirs}.{kind}"] = w[f"{src}{ours}.{kind}"]
    return out


def time_embedding(w: Mapping[str, np.ndarray], prefix: str, t: float) -> np.ndarray:
    """``flow_net.time_embed[i](t)`` for a constant t, in float64: cos/sin features, MLP, the
    flow head's variance norm (unbiased variance, not centred)."""
    f = np.asarray(w[prefix + "freqs"], np.float64) * t
    x = np.concatenate([np.cos(f), np.sin(f)])
    x = x @ np.asarray(w[prefix + "mlp.0.weight"], np.float64).T + w[prefix + "mlp.0.bias"]
    x = x / (1 + np.exp(-x))
    x = x @ np.asarray(w[prefix + "mlp.2.weight"], np.float64).T + w[prefix + "mlp.2.bias"]
    return x * w[prefix + "mlp.3.alpha"] / np.sqrt(np.var(x, ddof=1) + 1e-5)


def flow_lm_weights(source, prefix: str = "flow_lm.") -> dict[str, np.ndarray]:
    """The flow LM's tensors (less the text table and the voice / latent projections, which
    stay on MLX) as float32 numpy, by their names under ``prefix``."""
    skip = ("conditioner.", "speaker_proj_weight", "input_linear.", "bos_", "emb_")
    return {k[len(prefix):]: np.asarray(source.get(k), np.float32) for k in source.keys()
            if k.startswith(prefix) and not k[len(prefix):].startswith(skip)}

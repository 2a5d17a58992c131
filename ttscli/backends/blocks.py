"""The flavours of decoder block the converted-LM exports build (ONNX graph, Core ML program),
and the tensors each reads: one description, so a family names its block once for both."""
from __future__ import annotations

from dataclasses import dataclass

from ttscli.errors import UsageError
from ttscli.lm.config import LMArgs, stack_shapes

NORMS = ("rms", "layer")
MLPS = ("swiglu", "gelu_tanh")


@dataclass(frozen=True)
class Style:
    """The block's flavour. Qwen3 / Llama: RMSNorm, SwiGLU, rotate-half RoPE (the default).
    Kyutai's (``Style("layer", "gelu_tanh", rope_interleaved=True)``): LayerNorm with a bias
    (``*_layernorm.bias``, ``norm.bias``), ``down(gelu_tanh(up(x)))``, RoPE on pairs (2i, 2i+1)."""

    norm: str = "rms"
    mlp: str = "swiglu"
    rope_interleaved: bool = False

    def __post_init__(self):
        if self.norm not in NORMS or self.mlp not in MLPS:
            raise UsageError(f"block style: norm one of {NORMS}, mlp one of {MLPS}; not {self.norm!r}, {self.mlp!r}")


def style_shapes(args: LMArgs, style: "Style") -> dict[str, tuple[int, ...]]:
    """The tensors a stack of this style reads: :func:`stack_shapes`, less the gate of a plain
    MLP, plus LayerNorm biases."""
    need = stack_shapes(args)
    if style.mlp != "swiglu":
        need = {k: v for k, v in need.items() if ".mlp.gate_proj." not in k}
    if style.norm == "layer":
        need.update({k[:-len("weight")] + "bias": v for k, v in need.items() if k.endswith("norm.weight")
                     and "_norm." not in k})
    return need

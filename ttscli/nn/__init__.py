"""Shared MLX layers: norms, RoPE, attention (GQA, optional q/k-norm), gated MLPs."""
from ttscli.nn.layers import (  # noqa: F401
    MLP,
    Attention,
    RMSNorm,
    RoPE,
)

"""Shared MLX layers: norms, RoPE, attention (GQA, optional q/k-norm), gated MLPs, decoder blocks."""
from ttscli.nn.layers import (  # noqa: F401
    MLP,
    Attention,
    DecoderLayer,
    RMSNorm,
    apply_rope,
    conv_weights_to_mlx,
    create_causal_mask,
)

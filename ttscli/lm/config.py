"""Arguments of a decoder-only LM (Qwen3 / Llama blocks), read from a Hugging Face config dict.

Pure data, no MLX: the Core ML export reads the same arguments.  Both spellings of the RoPE
settings are accepted: ``rope_theta`` + ``rope_scaling`` (transformers 4.x) and
``rope_parameters`` (transformers 5, where the theta moved inside).  A setting this package
cannot honour (another RoPE scaling, another activation, partial rotary) is an error naming it,
never a silent fallback to plain RoPE.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from ttscli.errors import CheckpointError

ROPE_TYPES = ("default", "llama3", "mrope", "longrope", "none")


@dataclass(frozen=True)
class RopeArgs:
    """Rotary embedding settings (rotate-half layout, as Qwen/Llama checkpoints use).

    ``default``: inv_freq = theta^(-2i/d).  ``llama3``: the default frequencies rescaled by
    wavelength band (``factor``, ``low_freq_factor``, ``high_freq_factor``,
    ``original_max_position_embeddings``).  ``mrope``: multimodal sections, the rotary pairs
    split among temporal/height/width position rows by ``mrope_section`` (contiguous blocks,
    or round-robin when ``mrope_interleaved``); its frequencies are the default ones.
    """

    theta: float = 10000.0
    type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    mrope_section: tuple[int, ...] | None = None
    mrope_interleaved: bool = False
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    max_position_embeddings: int = 0

    def __post_init__(self):
        if self.type not in ROPE_TYPES:
            raise CheckpointError(f"RoPE type {self.type!r} is not supported (supported: {', '.join(ROPE_TYPES)})")
        if self.type == "mrope" and not self.mrope_section:
            raise CheckpointError("RoPE type 'mrope' needs mrope_section")
        if self.type == "llama3" and not (self.factor > 0 and self.high_freq_factor > self.low_freq_factor > 0
                                          and self.original_max_position_embeddings > 0):
            raise CheckpointError(f"llama3 RoPE scaling has invalid factors: factor={self.factor}, "
                                  f"low_freq_factor={self.low_freq_factor}, high_freq_factor={self.high_freq_factor}, "
                                  f"original_max_position_embeddings={self.original_max_position_embeddings}")
        if self.type == "longrope" and not (self.short_factor and self.long_factor
                                            and len(self.short_factor) == len(self.long_factor)):
            raise CheckpointError("longrope RoPE scaling needs short_factor and long_factor of one length")

    @property
    def extended(self) -> bool:
        """LongRoPE past its original context: the long factors and a cos/sin scaling apply."""
        return self.type == "longrope" and self.max_position_embeddings > self.original_max_position_embeddings

    def attention_factor(self) -> float:
        """What the rotation multiplies q and k by (LongRoPE's cos/sin scaling past the original
        context), 1 otherwise: attention logits grow by its square."""
        if not self.extended:
            return 1.0
        orig = self.original_max_position_embeddings
        return math.sqrt(1 + math.log(self.max_position_embeddings / orig) / math.log(orig))

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> "RopeArgs":
        """From a Hugging Face text config: ``rope_parameters`` if present, else ``rope_scaling``."""
        params = config.get("rope_parameters")
        scaling = dict(params if isinstance(params, dict) else config.get("rope_scaling") or {})
        theta = scaling.get("rope_theta", config.get("rope_theta", 10000.0))
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        section = scaling.get("mrope_section")
        if kind == "mrope":      # the older spelling: transformers treats it as default + sections
            kind = "default"
        if kind == "default" and section:
            kind = "mrope"
        partial = scaling.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
        if partial != 1.0:
            raise CheckpointError(f"partial_rotary_factor {partial} is not supported (only full rotary)")
        if kind not in ROPE_TYPES:
            raise CheckpointError(f"RoPE scaling {kind!r} is not supported (supported: {', '.join(ROPE_TYPES)})")
        kw: dict[str, Any] = {"theta": float(theta), "type": kind}
        if kind == "llama3":
            try:
                kw.update(factor=float(scaling["factor"]), low_freq_factor=float(scaling["low_freq_factor"]),
                          high_freq_factor=float(scaling["high_freq_factor"]),
                          original_max_position_embeddings=int(scaling["original_max_position_embeddings"]))
            except KeyError as e:
                raise CheckpointError(f"llama3 RoPE scaling is missing {e.args[0]!r}") from e
        if kind == "longrope":
            try:
                kw.update(short_factor=tuple(float(f) for f in scaling["short_factor"]),
                          long_factor=tuple(float(f) for f in scaling["long_factor"]),
                          original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
                          max_position_embeddings=int(config["max_position_embeddings"]))
            except KeyError as e:
                raise CheckpointError(f"longrope RoPE scaling is missing {e.args[0]!r}") from e
        if kind == "mrope":
            kw.update(mrope_section=tuple(int(s) for s in section),
                      mrope_interleaved=bool(scaling.get("mrope_interleaved", scaling.get("interleaved", False))))
        return cls(**kw)


@dataclass
class LMArgs:
    """One decoder stack. ``qk_norm``: per-head RMSNorm on q and k (Qwen3), none for Llama.

    ``attention_bias``: biases on q, k, v and o; ``qkv_bias``: on q, k and v only (Qwen2).
    ``residual_scale`` multiplies each sublayer's output before it joins the residual stream:
    MiniCPM's muP depth scaling ``scale_depth / sqrt(num_hidden_layers)``; 1 elsewhere.
    """

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    vocab_size: int | None = None
    attention_bias: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    rope: RopeArgs = field(default_factory=RopeArgs)
    max_position_embeddings: int | None = None
    residual_scale: float = 1.0

    def __post_init__(self):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(f"num_attention_heads ({self.num_attention_heads}) is not a multiple of "
                                  f"num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise CheckpointError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.rope.mrope_section and 2 * sum(self.rope.mrope_section) != self.head_dim:
            raise CheckpointError(f"mrope_section {list(self.rope.mrope_section)} does not cover head_dim "
                                  f"{self.head_dim} (twice its sum must equal it)")

    @classmethod
    def from_hf(cls, config: dict[str, Any], qk_norm: bool | None = None) -> "LMArgs":
        """From a Hugging Face Qwen3 / Llama (text) config dict; unknown keys are ignored.

        ``qk_norm`` defaults to what ``model_type`` says (``qwen3*``: yes, otherwise no); a
        family whose config has no telling ``model_type`` passes it. ``model_type`` ``qwen2``
        sets ``qkv_bias`` (transformers' Qwen2 always biases q, k and v, never o).
        """
        act = config.get("hidden_act", "silu")
        if act != "silu":
            raise CheckpointError(f"hidden_act {act!r} is not supported (the MLP is SwiGLU: silu)")
        if qk_norm is None:
            qk_norm = str(config.get("model_type", "")).startswith("qwen3")
        names = {f.name for f in fields(cls)} - {"rope", "qk_norm", "qkv_bias"}
        kw = {k: v for k, v in config.items() if k in names and v is not None}
        kw["qkv_bias"] = config.get("model_type") == "qwen2"
        try:
            return cls(**kw, qk_norm=qk_norm, rope=RopeArgs.from_hf(config))
        except TypeError as e:
            raise CheckpointError(f"LM config: missing or invalid field ({e})") from e

    @property
    def kv_groups(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads


def stack_shapes(args: LMArgs) -> dict[str, tuple[int, ...]]:
    """Every tensor of a decoder stack, by its name relative to the stack (HF names), with its shape:
    what the Core ML and ONNX exports of the stack read."""
    h, hd, inter = args.hidden_size, args.head_dim, args.intermediate_size
    q, kv = args.num_attention_heads * hd, args.num_key_value_heads * hd
    out: dict[str, tuple[int, ...]] = {"norm.weight": (h,)}
    for i in range(args.num_hidden_layers):
        p = f"layers.{i}."
        out.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                    p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                    p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                    p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                    p + "mlp.down_proj.weight": (h, inter)})
        if args.qk_norm:
            out.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
        if args.attention_bias or args.qkv_bias:
            out.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                        p + "self_attn.v_proj.bias": (kv,)})
        if args.attention_bias:
            out[p + "self_attn.o_proj.bias"] = (h,)
        if args.mlp_bias:
            out.update({p + "mlp.gate_proj.bias": (inter,), p + "mlp.up_proj.bias": (inter,),
                        p + "mlp.down_proj.bias": (h,)})
    return out

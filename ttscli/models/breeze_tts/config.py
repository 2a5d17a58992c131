"""Breeze TTS 2 configuration, read from the checkpoint's own config.json.

The file nests one object per component: ``backbone_config`` (a Qwen3 stack),
``depth_decoder_config`` (a Llama stack with llama3 RoPE), ``text_encoder_config`` (T5Gemma2 text
encoder) and ``codec_config`` (only its ``codebook_size`` is read: ids from there up to
``vocab_size`` are reserved). The top level also carries ``rope_theta``, ``rope_scaling``,
``rms_norm_eps`` and ``max_position_embeddings``: upstream's backbone never reads them (it is
built from ``backbone_config`` alone), so neither do we.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ttscli.config import BaseArgs
from ttscli.errors import CheckpointError
from ttscli.lm import LMArgs
from ttscli.lm.rope import default_inv_freq

LAYER_TYPES = ("sliding_attention", "full_attention")


@dataclass
class TextEncoderArgs(BaseArgs):
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    layer_types: list[str]
    hidden_activation: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    query_pre_attn_scalar: float = 256
    sliding_window: int = 4096
    eoi_token_index: int = 256000
    attn_logit_softcapping: float | None = None
    rope_parameters: dict | None = None
    rope_scaling: dict | None = None
    model_type: str = "t5gemma2_text"

    def __post_init__(self):
        if self.hidden_activation not in ("gelu_pytorch_tanh", "gelu_tanh"):
            raise CheckpointError(f"text_encoder_config.hidden_activation {self.hidden_activation!r} is not "
                                  "supported (the T5Gemma2 encoder uses gelu_pytorch_tanh)")
        bad = sorted(set(self.layer_types) - set(LAYER_TYPES))
        if bad or len(self.layer_types) != self.num_hidden_layers:
            raise CheckpointError(f"text_encoder_config.layer_types must list {self.num_hidden_layers} entries of "
                                  f"{' / '.join(LAYER_TYPES)}, got {self.layer_types}")
        if self.attn_logit_softcapping is not None:
            raise CheckpointError("text_encoder_config.attn_logit_softcapping is set; Breeze's encoder has none")

    def rope(self, layer_type: str):
        """Inverse frequencies of one layer kind. As upstream's T5Gemma2 shim: sliding layers
        default to theta 1e4 and full layers to 1e6, ``rope_parameters`` overrides per kind and
        a legacy ``rope_scaling`` updates the full layers; ``linear`` divides by ``factor``."""
        params = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                  "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}}
        for k, v in (self.rope_parameters or {}).items():
            params[k] = dict(v) if v is not None else {"rope_type": "default"}
        if self.rope_scaling:
            params["full_attention"].update(self.rope_scaling)
        p = params[layer_type]
        kind = p.get("rope_type", "default")
        theta = float(p.get("rope_theta", 10000.0 if layer_type == "sliding_attention" else 1000000.0))
        f = default_inv_freq(theta, self.head_dim)
        if kind == "linear":
            return f / float(p["factor"])
        if kind != "default":
            raise CheckpointError(f"text_encoder_config: RoPE type {kind!r} for {layer_type} is not supported "
                                  "(default, linear)")
        return f


@dataclass
class ModelArgs(BaseArgs):
    backbone_config: dict
    depth_decoder_config: dict
    text_encoder_config: TextEncoderArgs
    codec_config: dict = field(default_factory=dict)
    model_type: str = "breeze"
    backbone_model_type: str = "qwen3"
    num_codebooks: int = 16
    vocab_size: int = 2051
    hidden_size: int = 2048
    audio_embed_size: int | None = None
    text_vocab_size: int = 262158
    audio_token_id: int = 262144
    audio_eos_token_id: int = 262145
    codebook_pad_token_id: int = 2050
    codebook_eos_token_id: int = 0
    tie_codebooks_embeddings: bool = True
    text_encoder_proj_type: str = "linear"
    text_encoder_feature_layer_idx: Any = -1

    def __post_init__(self):
        def refuse(what):
            raise CheckpointError(f"config.json: {what}")

        if self.model_type != "breeze":
            refuse(f"model_type is {self.model_type!r}, not 'breeze'")
        if self.backbone_model_type != "qwen3":
            refuse(f"backbone_model_type {self.backbone_model_type!r} is not supported (Breeze TTS 2 uses qwen3)")
        if self.text_encoder_proj_type != "linear":
            refuse(f"text_encoder_proj_type {self.text_encoder_proj_type!r} is not supported (linear)")
        if self.text_encoder_feature_layer_idx not in (-1, [-1], (-1,)):
            refuse("text_encoder_feature_layer_idx other than -1 (the last hidden state) is not supported")
        if not self.tie_codebooks_embeddings:
            refuse("tie_codebooks_embeddings is false: the backbone's audio table is not stored")
        if self.audio_embed_size is None:
            self.audio_embed_size = self.hidden_size
        if self.audio_embed_size != self.hidden_size:
            refuse("audio_embed_size differs from hidden_size (audio_embeds_projector is not supported)")
        if self.backbone.hidden_size != self.hidden_size:
            refuse(f"backbone_config.hidden_size {self.backbone.hidden_size} != hidden_size {self.hidden_size}")
        d = self.depth_decoder_config
        if d.get("backbone_hidden_size", self.hidden_size) != self.hidden_size:
            refuse("depth_decoder_config.backbone_hidden_size differs from hidden_size "
                   "(backbone_hidden_state_projector is not supported)")
        if d.get("num_codebooks", self.num_codebooks) != self.num_codebooks or \
                d.get("vocab_size", self.vocab_size) != self.vocab_size:
            refuse("depth_decoder_config num_codebooks / vocab_size differ from the top level")
        if not 0 < self.codebook_size <= self.vocab_size:
            refuse(f"codec_config.codebook_size {self.codebook_size} is not within vocab_size {self.vocab_size}")

    @property
    def codebook_size(self) -> int:
        """Real codes are [0, codebook_size); ids up to vocab_size are reserved (masked)."""
        return int(self.codec_config.get("codebook_size", self.vocab_size - 3))

    @property
    def eos_id(self) -> int:
        """The backbone's extra EOS class (lm_head has vocab_size + 1 rows)."""
        return self.vocab_size

    @property
    def backbone(self) -> LMArgs:
        return LMArgs.from_hf(self.backbone_config, qk_norm=True)

    @property
    def depth(self) -> LMArgs:
        return LMArgs.from_hf(self.depth_decoder_config, qk_norm=False)

    @property
    def max_positions(self) -> int:
        return int(self.backbone_config.get("max_position_embeddings", 40960))


def real_config() -> dict:
    """BreezeBlue/Breeze-TTS-2's config.json values (random-weight bench at the real size)."""
    layers = ["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(26)]
    return {
        "model_type": "breeze", "backbone_model_type": "qwen3", "num_codebooks": 16, "vocab_size": 2051,
        "hidden_size": 2048, "audio_embed_size": 2048, "text_vocab_size": 262158,
        "audio_token_id": 262144, "audio_eos_token_id": 262145,
        "backbone_config": {"model_type": "qwen3", "hidden_size": 2048, "num_hidden_layers": 28,
                            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                            "intermediate_size": 6144, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                            "max_position_embeddings": 40960},
        "depth_decoder_config": {"num_hidden_layers": 12, "hidden_size": 1024, "num_attention_heads": 8,
                                 "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 8192,
                                 "rms_norm_eps": 1e-5, "rope_theta": 500000,
                                 "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
                                                  "low_freq_factor": 0.001953125, "high_freq_factor": 0.0078125,
                                                  "original_max_position_embeddings": 16},
                                 "max_position_embeddings": 33, "vocab_size": 2051, "num_codebooks": 16,
                                 "backbone_hidden_size": 2048, "audio_embed_size": 2048},
        "text_encoder_config": {"model_type": "t5gemma2_text", "num_hidden_layers": 26, "hidden_size": 1152,
                                "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                                "intermediate_size": 6912, "vocab_size": 262158, "layer_types": layers,
                                "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256, "sliding_window": 512,
                                "eoi_token_index": 256000,
                                "rope_parameters": {
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                    "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0}}},
        "codec_config": {"codebook_size": 2048, "sampling_rate": 24000},
    }


@dataclass
class GenerationConfig(BaseArgs):
    """generation_config.json plus upstream's runtime defaults (top-k 50, top-p 1, penalty 1.1)."""

    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    depth_decoder_temperature: float = 0.9
    depth_decoder_top_k: int = 50
    depth_decoder_top_p: float = 1.0
    repetition_penalty: float = 1.1
    max_new_tokens: int = 750
    do_sample: bool = True

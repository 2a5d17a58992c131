"""VoxCPM2's config.json: the MiniCPM-4 ``lm_config`` and the local stacks derived from it.

Upstream builds four MiniCPM stacks from one ``lm_config``: the base LM as written, the residual
LM with ``residual_lm_num_layers`` layers, no vocabulary and (``residual_lm_no_rope``) no RoPE,
and the local encoder / DiT with the widths of ``encoder_config`` / ``dit_config``.  Each becomes
a shared :class:`ttscli.lm.LMArgs`; muP (``use_mup``) is its ``residual_scale`` and the text
embedding's ``scale_emb``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ttscli.codecs.audiovae import AudioVAEArgs
from ttscli.config import BaseArgs
from ttscli.errors import CheckpointError
from ttscli.lm.config import LMArgs, RopeArgs


@dataclass
class LocalArgs(BaseArgs):
    hidden_dim: int = 1024
    ffn_dim: int = 4096
    num_heads: int = 16
    num_layers: int = 4
    kv_channels: int | None = None
    mean_mode: bool = False
    dit_mean_mode: bool = False


@dataclass
class ModelArgs(BaseArgs):
    lm_config: dict = field(default_factory=dict)
    patch_size: int = 4
    feat_dim: int = 64
    residual_lm_num_layers: int = 8
    residual_lm_no_rope: bool = False
    scalar_quantization_latent_dim: int = 512
    scalar_quantization_scale: int = 9
    encoder_config: dict = field(default_factory=dict)
    dit_config: dict = field(default_factory=dict)
    audio_vae_config: dict = field(default_factory=dict)
    max_length: int = 8192

    def __post_init__(self):
        for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                    "num_key_value_heads", "vocab_size", "rms_norm_eps"):
            if key not in self.lm_config:
                raise CheckpointError(f"config.json: lm_config has no {key!r}")
        self.encoder = LocalArgs.from_dict(self.encoder_config, where="encoder_config.")
        self.dit = LocalArgs.from_dict(self.dit_config, where="dit_config.")
        if self.dit.mean_mode or self.dit.dit_mean_mode:
            raise CheckpointError("config.json: dit_config mean_mode is not supported (off in the released VoxCPM2)")
        self.vae = AudioVAEArgs.from_dict(self.audio_vae_config, where="audio_vae_config.")
        if self.vae.latent_dim != self.feat_dim:
            raise CheckpointError(f"config.json: audio_vae_config.latent_dim {self.vae.latent_dim} != feat_dim "
                                  f"{self.feat_dim}")

    @property
    def use_mup(self) -> bool:
        return bool(self.lm_config.get("use_mup", True))

    @property
    def scale_emb(self) -> float:
        """What the text embedding is multiplied by (muP), 1 without muP."""
        return float(self.lm_config.get("scale_emb", 1.0)) if self.use_mup else 1.0

    def _stack(self, layers: int, hidden: int, ffn: int, heads: int, kv_channels: int | None,
               vocab: int | None, rope: bool) -> LMArgs:
        c = dict(self.lm_config)
        c.update(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=ffn, num_attention_heads=heads,
                 head_dim=kv_channels or hidden // heads, vocab_size=vocab)
        a = LMArgs.from_hf(c, qk_norm=False)
        if not rope:
            a = replace(a, rope=RopeArgs(type="none"))
        scale = float(c.get("scale_depth", 1.0)) / math.sqrt(layers) if self.use_mup else 1.0
        return replace(a, residual_scale=scale)

    def base_lm(self) -> LMArgs:
        c = self.lm_config
        return self._stack(c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"],
                           c["num_attention_heads"], c.get("kv_channels"), c["vocab_size"], True)

    def residual_lm(self) -> LMArgs:
        c = self.lm_config
        return self._stack(self.residual_lm_num_layers, c["hidden_size"], c["intermediate_size"],
                           c["num_attention_heads"], c.get("kv_channels"), None, not self.residual_lm_no_rope)

    def local(self, a: LocalArgs) -> LMArgs:
        return self._stack(a.num_layers, a.hidden_dim, a.ffn_dim, a.num_heads, a.kv_channels, None, True)

    @classmethod
    def read(cls, config: dict[str, Any], source: str = "config.json") -> "ModelArgs":
        return cls.from_dict(config, source=source)

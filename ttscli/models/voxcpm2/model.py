"""The top module: its parameter tree is the checkpoint's ``model.safetensors`` plus the
AudioVAE (``audiovae.pth``) under ``audio_vae``."""
from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn

from ttscli.codecs.audiovae import AudioVAE
from ttscli.lm.model import DecoderLM
from ttscli.models.voxcpm2.config import ModelArgs
from ttscli.models.voxcpm2.local import LocEnc, UnifiedCFM


class ScalarQuantizationLayer(nn.Module):
    """The LM's hidden through a tanh bottleneck rounded to ``scale`` levels per side."""

    def __init__(self, dim: int, latent: int, scale: int):
        super().__init__()
        self.in_proj = nn.Linear(dim, latent)
        self.out_proj = nn.Linear(latent, dim)
        self.scale = scale

    def __call__(self, h: mx.array) -> mx.array:
        return self.out_proj(mx.round(mx.tanh(self.in_proj(h)) * self.scale) / self.scale)


class VoxCPM2(nn.Module):
    # the base and residual LMs' onnxruntime graphs (onnx_lm.attach) or Core ML packages
    # (coreml_export.attach), run in their place by the patch loop (generate.stacks)
    converted_stacks = None

    def __init__(self, a: ModelArgs):
        super().__init__()
        self.args = a
        h = a.lm_config["hidden_size"]
        self.base_lm = DecoderLM(a.base_lm())
        self.residual_lm = DecoderLM(a.residual_lm(), embed_tokens=False)
        self.feat_encoder = LocEnc(a.local(a.encoder), a.feat_dim)
        self.feat_decoder = UnifiedCFM(a.local(a.dit), a.feat_dim)
        self.fsq_layer = ScalarQuantizationLayer(h, a.scalar_quantization_latent_dim, a.scalar_quantization_scale)
        self.enc_to_lm_proj = nn.Linear(a.encoder.hidden_dim, h)
        self.lm_to_dit_proj = nn.Linear(h, a.dit.hidden_dim)
        self.res_to_dit_proj = nn.Linear(h, a.dit.hidden_dim)
        self.fusion_concat_proj = nn.Linear(2 * h, h)
        self.stop_proj = nn.Linear(h, h)
        self.stop_head = nn.Linear(h, 2, bias=False)
        self.audio_vae = AudioVAE(a.vae)

    def use_converted_stacks(self, make: Callable[[], tuple]) -> None:
        """From now on the patch loop runs the stacks ``make()`` builds (base, residual) in the MLX
        stacks' place. Their layers are freed first (the text embedding and final norms stay), so
        the weights never sit in memory twice while the converted copies load."""
        for stack in (self.base_lm, self.residual_lm):
            stack.layers = []
        mx.clear_cache()
        object.__setattr__(self, "converted_stacks", make())

    def embed_patches(self, feats: mx.array) -> mx.array:
        """Latent patches ``[B, T, P, D]`` -> LM inputs ``[B, T, H]``."""
        return self.enc_to_lm_proj(self.feat_encoder(feats))

    def stop(self, lm_hidden: mx.array) -> mx.array:
        """Stop logits ``[B, 2]`` (index 1: stop) of the LM hidden before a patch's step."""
        return self.stop_head(nn.silu(self.stop_proj(lm_hidden)))

    def dit_condition(self, lm_hidden: mx.array, residual_hidden: mx.array) -> mx.array:
        return mx.concatenate([self.lm_to_dit_proj(lm_hidden), self.res_to_dit_proj(residual_hidden)], axis=-1)

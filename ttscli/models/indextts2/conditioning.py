"""IndexTTS2's speaker and emotion conditioners: ``gpt.pth``'s ``conditioning_encoder``,
``perceiver_encoder``, ``emo_conditioning_encoder``, ``emo_perceiver_encoder``, ``emovec_layer``
and ``emo_layer`` (upstream ``UnifiedVoice.get_conditioning`` / ``get_emovec`` / ``merge_emovec``).
The eight-weight emotion-vector blend is emotion.py's.

Input: normalised w2v-BERT 2.0 features ``[B, T, feature_width]`` (50 Hz, layer 17). The speaker
side is a Conformer (frame rate halved) and a 32-latent perceiver -> ``[B, 32, model_dim]``; the
emotion side a smaller Conformer and a 1-latent perceiver at the feature width, then
``emovec_layer`` (feature width -> model_dim) and ``emo_layer`` -> ``[B, model_dim]``.

Every frame is attended: upstream passes the feature width (1024) as each reference's length,
which masks nothing for its <= 15 s (<= 750 frame) references, so a batch here is rows of one
length. ``feature_width`` stands in for the 1024 upstream hard-codes (tiny test checkpoints
narrow it); published configs have no such key.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import mlx.core as mx
from mlx import nn

from ttscli.checkpoint import load_strict
from ttscli.config import BaseArgs
from ttscli.errors import CheckpointError
from ttscli.nn.conformer import ConformerEncoder, sinusoid_table
from ttscli.nn.init import random_weights
from ttscli.nn.perceiver import PerceiverResampler

# the gpt.pth tensors that belong to the conditioners (the rest is the LM's)
CONDITIONER_PREFIXES = ("conditioning_encoder.", "perceiver_encoder.", "emo_conditioning_encoder.",
                        "emo_perceiver_encoder.", "emovec_layer.", "emo_layer.")
FEATURE_WIDTH = 1024          # w2v-BERT 2.0's hidden size, hard-coded upstream
NUM_LATENTS = 32              # UnifiedVoice's condition_num_latent
CNN_MODULE_KERNEL = 15        # ConformerEncoder's default, which UnifiedVoice keeps


@dataclass
class ConditionArgs(BaseArgs):
    """``config.yaml``'s ``gpt.condition_module`` / ``gpt.emo_condition_module`` (all required,
    as upstream indexes every key)."""
    output_size: int
    linear_units: int
    attention_heads: int
    num_blocks: int
    input_layer: str
    perceiver_mult: int


# the published sizes (IndexTTS-2's config.yaml)
SPEAKER_CONDITION = ConditionArgs(output_size=512, linear_units=2048, attention_heads=8, num_blocks=6,
                                  input_layer="conv2d2", perceiver_mult=2)
EMOTION_CONDITION = ConditionArgs(output_size=512, linear_units=1024, attention_heads=4, num_blocks=4,
                                  input_layer="conv2d2", perceiver_mult=2)
MODEL_DIM = 1280


def _encoder(a: ConditionArgs, feature_width: int, where: str) -> ConformerEncoder:
    if a.input_layer != "conv2d2":
        raise CheckpointError(f"config.yaml: gpt.{where}.input_layer is {a.input_layer!r}; "
                              "only 'conv2d2' (IndexTTS2's) is implemented")
    return ConformerEncoder(feature_width, a.output_size, a.attention_heads, a.linear_units, a.num_blocks,
                            cnn_module_kernel=CNN_MODULE_KERNEL)


class Conditioners(nn.Module):
    """The conditioner half of ``UnifiedVoice``; parameters named as in ``gpt.pth``."""

    def __init__(self, condition: ConditionArgs = SPEAKER_CONDITION, emo_condition: ConditionArgs = EMOTION_CONDITION,
                 model_dim: int = MODEL_DIM, feature_width: int = FEATURE_WIDTH, num_latents: int = NUM_LATENTS):
        super().__init__()
        c, e = condition, emo_condition
        self.conditioning_encoder = _encoder(c, feature_width, "condition_module")
        self.perceiver_encoder = PerceiverResampler(model_dim, dim_context=c.output_size, ff_mult=c.perceiver_mult,
                                                    heads=c.attention_heads, num_latents=num_latents)
        self.emo_conditioning_encoder = _encoder(e, feature_width, "emo_condition_module")
        self.emo_perceiver_encoder = PerceiverResampler(feature_width, dim_context=e.output_size,
                                                        ff_mult=e.perceiver_mult, heads=e.attention_heads,
                                                        num_latents=1)
        self.emovec_layer = nn.Linear(feature_width, model_dim)
        self.emo_layer = nn.Linear(model_dim, model_dim)

    def conditioning(self, feat: mx.array) -> mx.array:
        """Speaker latents (upstream ``get_conditioning``): ``[B, T, F]`` -> ``[B, 32, model_dim]``."""
        return self.perceiver_encoder(self.conditioning_encoder(feat))

    def emovec(self, feat: mx.array) -> mx.array:
        """Emotion vector (upstream ``get_emovec``): ``[B, T, F]`` -> ``[B, model_dim]``."""
        e = self.emo_perceiver_encoder(self.emo_conditioning_encoder(feat))[:, 0]
        return self.emo_layer(self.emovec_layer(e))

    def merge_emovec(self, spk_feat: mx.array, emo_feat: mx.array, alpha: float = 1.0) -> mx.array:
        """Upstream ``merge_emovec``: ``base + alpha (emo - base)``, base the speaker reference's
        emotion vector, emo the emotion reference's -> ``[B, model_dim]``."""
        base = self.emovec(spk_feat)
        return base + alpha * (self.emovec(emo_feat) - base)


def conditioner_weights(weights: Mapping) -> dict[str, mx.array]:
    """The conditioners' tensors of a ``gpt.pth`` state dict (numpy or MLX), as MLX arrays."""
    return {k: mx.array(v) for k, v in weights.items() if k.startswith(CONDITIONER_PREFIXES)}


def load_conditioners(weights: Mapping, condition: ConditionArgs = SPEAKER_CONDITION,
                      emo_condition: ConditionArgs = EMOTION_CONDITION, model_dim: int = MODEL_DIM,
                      feature_width: int = FEATURE_WIDTH, *, source: str = "gpt.pth", dtype=None) -> Conditioners:
    """:class:`Conditioners` from a ``gpt.pth`` state dict: its tensors under
    :data:`CONDITIONER_PREFIXES` must be exactly the module's (missing, unexpected or mis-shaped
    ones named in one CheckpointError); tensors under other prefixes are left to the LM."""
    module = Conditioners(condition, emo_condition, model_dim, feature_width)
    return load_strict(module, conditioner_weights(weights), source=source, dtype=dtype,
                       keep_dtype=lambda k: k.endswith("pos_enc.pe"))


def random_conditioners(condition: ConditionArgs = SPEAKER_CONDITION, emo_condition: ConditionArgs = EMOTION_CONDITION,
                        model_dim: int = MODEL_DIM, feature_width: int = FEATURE_WIDTH, *, seed: int = 0,
                        dtype=None) -> Conditioners:
    """:class:`Conditioners` at the given (default: published) size with random weights
    (``ttscli.nn.init.random_weights``); the position tables are the sinusoid upstream saves."""
    def rule(name: str, w: mx.array, normal: mx.array) -> mx.array:
        if name.endswith("pos_enc.pe"):
            return mx.array(sinusoid_table(w.shape[1], w.shape[2])[None])
        return w

    module = Conditioners(condition, emo_condition, model_dim, feature_width)
    return random_weights(module, seed=seed, dtype=dtype, rule=rule, keep_float32=lambda k: k.endswith("pos_enc.pe"))


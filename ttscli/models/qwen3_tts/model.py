"""Top-level Qwen3-TTS module whose parameter tree is exactly ``model.safetensors``.

``talker.*`` is :class:`~ttscli.models.qwen3_tts.talker.Talker`; Base checkpoints add
``speaker_encoder.*`` (ECAPA-TDNN, implemented in ``speaker_encoder.py``).  Loading is strict:
missing, unexpected and mis-shaped tensors raise :class:`CheckpointError` naming them.
"""
from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ttscli.checkpoint import load_strict, shapes
from ttscli.models.qwen3_tts.config import ModelArgs, preset_config
from ttscli.models.qwen3_tts.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig
from ttscli.models.qwen3_tts.talker import Talker
from ttscli.nn.init import random_weights


class Qwen3TTSModel(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.talker = Talker(args.talker_config)
        if args.is_base:
            self.speaker_encoder = SpeakerEncoder(SpeakerEncoderConfig.from_dict(
                args.speaker_encoder_config or {}, where="speaker_encoder_config."))

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        return shapes(dict(tree_flatten(self.parameters())))

    def load_checkpoint_weights(self, weights: dict[str, mx.array], dtype, source: str) -> None:
        load_strict(self, dict(weights), dtype=dtype, source=source)
        self.talker.code_predictor.reset_compiled()


def build_random(config: dict[str, Any] | str, dtype: str = "float32", seed: int = 0) -> Qwen3TTSModel:
    """A model at the dimensions of ``config`` (a config.json dict or a preset name such as
    ``"0.6B-Base"``, see :data:`~ttscli.models.qwen3_tts.config.PRESETS`) with random weights
    (:func:`ttscli.nn.init.random_weights`).

    For speed measurements only: weights are scaled so activations stay finite, not meaningful.
    """
    cfg = preset_config(config) if isinstance(config, str) else config
    return random_weights(Qwen3TTSModel(ModelArgs.from_dict(cfg)), seed=seed, dtype=dtype)

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

from ttscli.checkpoint import shapes, weight_problems
from ttscli.errors import CheckpointError
from ttscli.models.qwen3_tts.config import ModelArgs, preset_config
from ttscli.models.qwen3_tts.talker import Talker

_DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


def to_dtype(name: str | None) -> mx.Dtype:
    name = name or "float32"
    if name not in _DTYPES:
        raise CheckpointError(f"unknown dtype {name!r}; use one of {', '.join(_DTYPES)}")
    return _DTYPES[name]


def _speaker_encoder_module():
    """The speaker encoder class pair, or None while that module is not in the tree yet."""
    try:
        from ttscli.models.qwen3_tts import speaker_encoder as se
    except ModuleNotFoundError as e:
        if e.name and e.name.endswith("speaker_encoder"):
            return None
        raise
    return se


def speaker_encoder_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """PyTorch-layout shapes of every ``speaker_encoder.*`` tensor for a config (ECAPA-TDNN
    defaults of the reference config class filled in).  Used to validate a Base checkpoint
    strictly when the MLX speaker encoder module is not available."""
    c = dict(mel_dim=128, enc_dim=1024, enc_channels=[512, 512, 512, 512, 1536],
             enc_kernel_sizes=[5, 3, 3, 3, 1], enc_attention_channels=128, enc_res2net_scale=8,
             enc_se_channels=128)
    c.update({k: v for k, v in cfg.items() if k in c})
    ch, ks, scale = c["enc_channels"], c["enc_kernel_sizes"], c["enc_res2net_scale"]
    out: dict[str, tuple[int, ...]] = {}

    def conv(name, o, i, k):
        out[f"speaker_encoder.{name}.weight"] = (o, i, k)
        out[f"speaker_encoder.{name}.bias"] = (o,)

    conv("blocks.0.conv", ch[0], c["mel_dim"], ks[0])
    for b in range(1, len(ch) - 1):
        conv(f"blocks.{b}.tdnn1.conv", ch[b], ch[b - 1], 1)
        w = ch[b] // scale
        for r in range(scale - 1):
            conv(f"blocks.{b}.res2net_block.blocks.{r}.conv", w, w, ks[b])
        conv(f"blocks.{b}.tdnn2.conv", ch[b], ch[b], 1)
        conv(f"blocks.{b}.se_block.conv1", c["enc_se_channels"], ch[b], 1)
        conv(f"blocks.{b}.se_block.conv2", ch[b], c["enc_se_channels"], 1)
    conv("mfa.conv", ch[-1], sum(ch[1:-1]), ks[-1])
    conv("asp.tdnn.conv", c["enc_attention_channels"], ch[-1] * 3, 1)
    conv("asp.conv", ch[-1], c["enc_attention_channels"], 1)
    conv("fc", c["enc_dim"], ch[-1] * 2, 1)
    return out


class Qwen3TTSModel(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.talker = Talker(args.talker_config)
        # Raw (validated) speaker-encoder tensors, kept only while its module is unavailable.
        object.__setattr__(self, "pending_speaker_encoder", None)
        if args.is_base:
            se = _speaker_encoder_module()
            if se is not None:
                self.speaker_encoder = se.SpeakerEncoder(
                    se.SpeakerEncoderConfig.from_dict(args.speaker_encoder_config or {}))

    @property
    def has_speaker_encoder(self) -> bool:
        return "speaker_encoder" in self

    def sanitize(self, weights: dict[str, mx.array]) -> dict[str, mx.array]:
        """Checkpoint names already match the module tree; only the speaker encoder's conv
        layout (PyTorch [out, in, k]) is converted, by that module's own ``sanitize``."""
        if self.has_speaker_encoder and hasattr(self.speaker_encoder, "sanitize"):
            se = {k[len("speaker_encoder."):]: v for k, v in weights.items() if k.startswith("speaker_encoder.")}
            rest = {k: v for k, v in weights.items() if not k.startswith("speaker_encoder.")}
            rest.update({f"speaker_encoder.{k}": v for k, v in self.speaker_encoder.sanitize(se).items()})
            return rest
        return weights

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = {k: tuple(v.shape) for k, v in tree_flatten(self.parameters())}
        if self.args.is_base and not self.has_speaker_encoder:
            shapes.update(speaker_encoder_shapes(self.args.speaker_encoder_config or {}))
        return shapes

    def load_checkpoint_weights(self, weights: dict[str, mx.array], dtype: mx.Dtype, source: str) -> None:
        weights = self.sanitize(dict(weights))
        problems = weight_problems(self.expected_shapes(), shapes(weights))
        if problems:
            raise CheckpointError(f"{source}: " + "; ".join(problems))
        own = [(k, v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) else v)
               for k, v in weights.items() if not (k.startswith("speaker_encoder.") and not self.has_speaker_encoder)]
        self.load_weights(own, strict=True)
        if self.args.is_base and not self.has_speaker_encoder:
            object.__setattr__(self, "pending_speaker_encoder",
                               {k: v for k, v in weights.items() if k.startswith("speaker_encoder.")})
        self.talker.code_predictor.reset_compiled()
        mx.eval(self.parameters())


def build_random(config: dict[str, Any] | str, dtype: str = "float32", seed: int = 0) -> Qwen3TTSModel:
    """A model at the dimensions of ``config`` (a config.json dict or a preset name such as
    ``"0.6B-Base"``, see :data:`~ttscli.models.qwen3_tts.config.PRESETS`) with random weights.

    For speed measurements only: weights are scaled so activations stay finite, not meaningful.
    """
    cfg = preset_config(config) if isinstance(config, str) else config
    mx.random.seed(seed)
    model = Qwen3TTSModel(ModelArgs.from_dict(cfg))
    dt = to_dtype(dtype)
    model.update(_cast_tree(model.parameters(), dt))
    mx.eval(model.parameters())
    return model


def _cast_tree(tree, dt):
    from mlx.utils import tree_map

    return tree_map(lambda p: p.astype(dt), tree)

"""ModelArgs for a Qwen3-TTS (12 Hz) checkpoint: root ``config.json`` and ``generation_config.json``.

Values always come from the checkpoint's files: the upstream class defaults differ from the
shipped configs (e.g. codec EOS, number of code groups), so nothing here falls back to them
silently.  Read by the shared reader (:class:`ttscli.config.BaseArgs`): unknown keys ignored.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscli.config import BaseArgs, read_json
from ttscli.errors import CheckpointError


@dataclass(kw_only=True)
class _DecoderStackArgs(BaseArgs):
    """What the talker and the code predictor (two Qwen3 decoder stacks) both read."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    head_dim: int | None = None
    rope_theta: float = 1000000.0
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    num_code_groups: int = 16

    def __post_init__(self):
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads


@dataclass(kw_only=True)
class CodePredictorArgs(_DecoderStackArgs):
    pass


@dataclass(kw_only=True)
class TalkerArgs(_DecoderStackArgs):
    text_vocab_size: int
    text_hidden_size: int
    code_predictor_config: CodePredictorArgs
    codec_eos_token_id: int
    codec_pad_id: int
    codec_bos_id: int
    codec_think_id: int
    codec_nothink_id: int
    codec_think_bos_id: int
    codec_think_eos_id: int
    rope_scaling: dict | None = None
    hidden_act: str = "silu"
    codec_language_id: dict[str, int] = field(default_factory=dict)
    spk_id: dict[str, int] = field(default_factory=dict)
    spk_is_dialect: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelArgs(BaseArgs):
    talker_config: TalkerArgs
    tts_model_type: str                      # "base" | "custom_voice" | "voice_design"
    tts_model_size: str                      # "0b6" | "1b7"
    im_start_token_id: int
    im_end_token_id: int
    tts_pad_token_id: int
    tts_bos_token_id: int
    tts_eos_token_id: int
    tokenizer_type: str = "qwen3_tts_tokenizer_12hz"
    assistant_token_id: int | None = None
    speaker_encoder_config: dict | None = None
    model_type: str = "qwen3_tts"

    def __post_init__(self):
        if self.model_type != "qwen3_tts":
            raise CheckpointError(f"config.json: model_type is {self.model_type!r}, expected 'qwen3_tts'")
        if self.tokenizer_type != "qwen3_tts_tokenizer_12hz":
            raise CheckpointError(f"config.json: tokenizer_type {self.tokenizer_type!r} is not supported "
                                  "(only the 12 Hz family)")
        if self.tts_model_type not in ("base", "custom_voice", "voice_design"):
            raise CheckpointError(f"config.json: unknown tts_model_type {self.tts_model_type!r}")
        scaling = self.talker_config.rope_scaling or {}
        if scaling.get("rope_type", scaling.get("type", "default")) != "default":
            raise CheckpointError(f"config.json: talker rope_scaling {scaling} is not supported")

    @property
    def is_base(self) -> bool:
        return self.tts_model_type == "base"

    @property
    def supports_instruct(self) -> bool:
        # The reference wrapper drops instruct on 0.6B CustomVoice; VoiceDesign requires it.
        return self.tts_model_type == "voice_design" or (
            self.tts_model_type == "custom_voice" and self.tts_model_size not in ("0b6",))

    @property
    def speakers(self) -> list[str]:
        return sorted(self.talker_config.spk_id)

    @property
    def languages(self) -> list[str]:
        return ["auto"] + sorted(k for k in self.talker_config.codec_language_id if "dialect" not in k)


@dataclass
class GenerationConfig(BaseArgs):
    """``generation_config.json``; defaults are the reference wrapper's hard fallbacks."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    max_new_tokens: int = 2048

    @classmethod
    def from_file(cls, path: Path) -> "GenerationConfig":
        return cls.from_dict(read_json(path), source=str(path)) if path.exists() else cls()


# --- real configurations (values of the published config.json files), for random-weight bench ---

_LANGS = {"chinese": 2055, "english": 2050, "german": 2053, "italian": 2070, "portuguese": 2071,
          "spanish": 2054, "japanese": 2058, "korean": 2064, "french": 2061, "russian": 2069}
_CV_LANGS = dict(_LANGS, beijing_dialect=2074, sichuan_dialect=2062)
_SPK = {"serena": 3066, "vivian": 3065, "uncle_fu": 3010, "ryan": 3061, "aiden": 2861,
        "ono_anna": 2873, "sohee": 2864, "eric": 2875, "dylan": 2878}
_DIALECT = dict({k: False for k in _SPK}, eric="sichuan_dialect", dylan="beijing_dialect")


def preset_config(name: str) -> dict[str, Any]:
    """config.json dict of a published model: "0.6B-Base", "1.7B-Base", "0.6B-CustomVoice",
    "1.7B-CustomVoice" or "1.7B-VoiceDesign"."""
    size, _, kind = name.partition("-")
    kinds = {"Base": "base", "CustomVoice": "custom_voice", "VoiceDesign": "voice_design"}
    if size not in ("0.6B", "1.7B") or kind not in kinds or (kind == "VoiceDesign" and size == "0.6B"):
        raise ValueError(f"unknown preset {name!r}")
    big = size == "1.7B"
    hidden = 2048 if big else 1024
    cp = dict(vocab_size=2048, hidden_size=1024, intermediate_size=3072, num_hidden_layers=5,
              num_attention_heads=16, num_key_value_heads=8, head_dim=128, rope_theta=1000000,
              rms_norm_eps=1e-6, num_code_groups=16, attention_bias=False, rope_scaling=None)
    talker = dict(
        hidden_size=hidden, intermediate_size=6144 if big else 3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=3072,
        text_vocab_size=151936, text_hidden_size=2048, rope_theta=1000000,
        rope_scaling={"interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default", "type": "default"},
        rms_norm_eps=1e-6, attention_bias=False, num_code_groups=16, hidden_act="silu",
        max_position_embeddings=32768, code_predictor_config=cp,
        codec_eos_token_id=2150, codec_pad_id=2148, codec_bos_id=2149, codec_think_id=2154,
        codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157,
        codec_language_id=_CV_LANGS if kind == "CustomVoice" else _LANGS,
        spk_id=_SPK if kind == "CustomVoice" else {},
        spk_is_dialect=_DIALECT if kind == "CustomVoice" else {})
    cfg = dict(architectures=["Qwen3TTSForConditionalGeneration"], model_type="qwen3_tts",
               tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="1b7" if big else "0b6",
               tts_model_type=kinds[kind], assistant_token_id=77091, im_start_token_id=151644,
               im_end_token_id=151645, tts_pad_token_id=151671, tts_bos_token_id=151672,
               tts_eos_token_id=151673, talker_config=talker)
    if kind == "Base":
        cfg["speaker_encoder_config"] = {"enc_dim": hidden, "sample_rate": 24000}
    return copy.deepcopy(cfg)


PRESETS = ("0.6B-Base", "1.7B-Base", "0.6B-CustomVoice", "1.7B-CustomVoice", "1.7B-VoiceDesign")

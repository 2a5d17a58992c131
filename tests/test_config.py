"""The one config reader (ttscli/config.py: BaseArgs) and the configs built on it."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ttscli.config import BaseArgs
from ttscli.errors import CheckpointError

FIX = Path(__file__).resolve().parent / "fixtures"


@dataclass
class Inner(BaseArgs):
    width: int
    ratios: list[int] = field(default_factory=lambda: [2, 2])


@dataclass
class Outer(BaseArgs):
    inner: Inner
    theta: float = 10000.0
    name: str = "x"
    head_dim: int | None = None
    flag: bool = False
    table: dict[str, int] = field(default_factory=dict)


def test_unknown_keys_are_ignored_and_nested_objects_read():
    cfg = {"inner": {"width": 8, "ratios": [4, 5], "new_field": 1}, "theta": 1000000, "something_new": [1],
           "table": {"a": 1}}
    o = Outer.from_dict(cfg)
    assert o == Outer(inner=Inner(width=8, ratios=[4, 5]), theta=1000000, table={"a": 1})
    o.inner.ratios.append(6)
    assert cfg["inner"]["ratios"] == [4, 5]  # the args do not alias the dict they came from


@pytest.mark.parametrize("cfg, phrase", [
    ({"inner": {"width": "8"}}, "inner.width should be int, got '8'"),
    ({"inner": {"width": 8.0}}, "inner.width should be int, got 8.0"),
    ({"inner": {"width": True}}, "inner.width should be int, got True"),
    ({"inner": {"width": 8, "ratios": [4, "5"]}}, "inner.ratios should be list[int], got [4, '5']"),
    ({"inner": {"width": 8}, "theta": "big"}, "theta should be float, got 'big'"),
    ({"inner": {"width": 8}, "head_dim": 6.5}, "head_dim should be int | None, got 6.5"),
    ({"inner": {"width": 8}, "flag": 1}, "flag should be bool, got 1"),
    ({"inner": {"width": 8}, "table": {"a": "b"}}, "table should be dict[str, int], got {'a': 'b'}"),
    ({"inner": [8]}, "inner should be an object, got [8]"),
    ({"inner": {}}, "inner.width is missing"),
    ({}, "inner is missing"),
])
def test_a_wrong_or_missing_field_is_named_with_the_file(cfg, phrase):
    with pytest.raises(CheckpointError) as e:
        Outer.from_dict(cfg, source="m/config.json")
    assert str(e.value) == f"m/config.json: {phrase}"


def test_from_file_names_the_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"inner": {"width": "wide"}}))
    with pytest.raises(CheckpointError, match=f"{p}: inner.width should be int"):
        Outer.from_file(p)
    p.write_text("{not json")
    with pytest.raises(CheckpointError, match="not readable JSON"):
        Outer.from_file(p)
    with pytest.raises(CheckpointError, match="is missing"):
        Outer.from_file(tmp_path / "absent.json")


def test_a_section_with_fields_from_the_top_level():
    cfg = {"inner_config": {"width": 3}, "ratios": [7], "other": 1}
    assert Inner.from_section(cfg, "inner_config", ("ratios",)) == Inner(width=3, ratios=[7])
    with pytest.raises(CheckpointError, match="c.json: ratios should be list"):
        Inner.from_section({"inner_config": {"width": 3}, "ratios": 7}, "inner_config", ("ratios",), source="c.json")


# --- the configs built on it, read from the published layouts in tests/fixtures ----------------

def test_qwen3_configs_in_their_published_layout():
    from ttscli.models.qwen3_tts.config import GenerationConfig, ModelArgs
    from ttscli.models.qwen3_tts.speaker_encoder import SpeakerEncoderConfig
    from ttscli.codecs.qwen3_12hz.config import DecoderArgs
    from ttscli.codecs.qwen3_12hz.encoder import EncoderArgs

    root = FIX / "qwen3_tts" / "tiny-base"
    raw = json.loads((root / "config.json").read_text())
    args = ModelArgs.from_file(root / "config.json")
    t, cp = args.talker_config, args.talker_config.code_predictor_config
    assert (t.hidden_size, t.num_hidden_layers, t.codec_eos_token_id) == (
        raw["talker_config"]["hidden_size"], raw["talker_config"]["num_hidden_layers"],
        raw["talker_config"]["codec_eos_token_id"])
    assert cp.vocab_size == raw["talker_config"]["code_predictor_config"]["vocab_size"]
    assert t.head_dim == raw["talker_config"].get("head_dim", t.hidden_size // t.num_attention_heads)
    spk = SpeakerEncoderConfig.from_dict(raw["speaker_encoder_config"])
    assert spk.enc_dim == raw["speaker_encoder_config"]["enc_dim"]
    gen = GenerationConfig.from_file(root / "generation_config.json")
    assert gen.top_k == json.loads((root / "generation_config.json").read_text())["top_k"]

    st = FIX / "qwen3_tts" / "tokenizer" / "config.json"
    st_raw = json.loads(st.read_text())
    dec = DecoderArgs.from_tokenizer_config(st)
    assert dec.num_quantizers == st_raw["decoder_config"]["num_quantizers"]
    assert dec.output_sample_rate == st_raw["output_sample_rate"]
    enc_raw = json.loads((FIX / "qwen3_tts" / "tokenizer_enc" / "config.json").read_text())
    enc = EncoderArgs.from_config(enc_raw)
    assert enc.encoder_valid_num_quantizers == enc_raw["encoder_valid_num_quantizers"]
    assert enc.hidden_size == enc_raw["encoder_config"]["hidden_size"]


def test_qwen3_config_errors_name_the_nested_field():
    from ttscli.models.qwen3_tts.config import ModelArgs

    raw = json.loads((FIX / "qwen3_tts" / "tiny-customvoice" / "config.json").read_text())
    raw["talker_config"]["code_predictor_config"]["num_hidden_layers"] = "5"
    with pytest.raises(CheckpointError, match="talker_config.code_predictor_config.num_hidden_layers should be int"):
        ModelArgs.from_dict(raw)
    del raw["talker_config"]["codec_eos_token_id"]
    raw["talker_config"]["code_predictor_config"]["num_hidden_layers"] = 5
    with pytest.raises(CheckpointError, match="talker_config.codec_eos_token_id is missing"):
        ModelArgs.from_dict(raw)


def test_piper_args_ignore_unknown_keys():
    from ttscli.models.piper.model import ModelArgs

    a = ModelArgs.from_dict({"n_vocab": 100, "resblock_dilation_sizes": [[1, 3], [2, 6]], "new": 1})
    assert a.n_vocab == 100 and a.resblock_dilation_sizes == [[1, 3], [2, 6]] and a.sample_rate == 22050
    with pytest.raises(CheckpointError, match="resblock_dilation_sizes should be list"):
        ModelArgs.from_dict({"resblock_dilation_sizes": [1, 3]})

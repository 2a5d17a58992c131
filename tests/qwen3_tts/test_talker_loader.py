"""Strict loading, config errors, and real-dimension layouts."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import mlx.core as mx
import pytest

from ttscli.errors import CheckpointError
from ttscli.models.qwen3_tts.config import ModelArgs, preset_config
from ttscli.models.qwen3_tts.load import load_model, load_tokenizer
from ttscli.models.qwen3_tts.model import Qwen3TTSModel

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts"


def copy(tmp_path, name="tiny-customvoice") -> Path:
    d = tmp_path / name
    shutil.copytree(FIX / name, d)
    return d


def test_missing_unexpected_misshaped_are_named(tmp_path):
    d = copy(tmp_path)
    w = mx.load(str(d / "model.safetensors"))
    assert w["talker.codec_head.weight"].dtype == mx.bfloat16  # published on-disk dtype
    del w["talker.model.norm.weight"]
    w["talker.extra.weight"] = mx.zeros((2,), mx.bfloat16)
    w["talker.codec_head.weight"] = w["talker.codec_head.weight"][:-1]
    mx.save_safetensors(str(d / "model.safetensors"), w, metadata={"format": "pt"})
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    msg = str(e.value)
    assert "talker.model.norm.weight" in msg and "talker.extra.weight" in msg and "talker.codec_head.weight" in msg


def test_config_and_file_errors(tmp_path):
    d = copy(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["tokenizer_type"] = "qwen3_tts_tokenizer_25hz"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="25hz"):
        load_model(d)
    (d / "vocab.json").unlink()
    with pytest.raises(CheckpointError, match="vocab.json"):
        load_tokenizer(d)
    (d / "model.safetensors").unlink()
    (d / "config.json").write_text(json.dumps(preset_config("0.6B-Base")))
    with pytest.raises(CheckpointError, match="model.safetensors is missing"):
        load_model(d)


@pytest.mark.parametrize("preset,tensors,params", [("0.6B-Base", 478, 914_643_008),
                                                   ("1.7B-CustomVoice", 404, 1_916_676_352)])
def test_real_dimension_layout(preset, tensors, params):
    # Figures from the published 0.6B-Base (spec/LAYOUT.md); 1.7B adds small_to_mtp_projection.
    shapes = Qwen3TTSModel(ModelArgs.from_dict(preset_config(preset))).expected_shapes()
    assert len(shapes) == tensors and sum(math.prod(s) for s in shapes.values()) == params
    assert shapes["talker.model.layers.0.self_attn.q_proj.weight"] == (2048, 1024 if "0.6B" in preset else 2048)
    assert ("talker.code_predictor.small_to_mtp_projection.weight" in shapes) == ("1.7B" in preset)

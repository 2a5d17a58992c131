"""RoPE variants against goldens from transformers 4.57.3 and the qwen-tts 0.1.1 talker
(scripts/goldens/lm_rope.py -> tests/fixtures/lm/rope.npz)."""
from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import CheckpointError
from ttscli.lm.config import LMArgs, RopeArgs
from ttscli.lm.rope import angles, inv_freq, make_rope, mrope_rows

GOLD = np.load(Path(__file__).resolve().parents[1] / "fixtures" / "lm" / "rope.npz")

LLAMA3 = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0}
CASES = {  # as in scripts/goldens/lm_rope.py: head_dim, HF config
    "default_qwen3": (128, {"rope_theta": 1000000.0}),
    "default_small": (16, {"rope_theta": 10000.0}),
    "llama3_t3": (64, {"rope_theta": 500000.0, "rope_scaling": dict(
        LLAMA3, factor=8.0, original_max_position_embeddings=8192)}),
    "llama3_32": (128, {"rope_theta": 500000.0, "rope_scaling": dict(
        LLAMA3, factor=32.0, original_max_position_embeddings=8192)}),
    "llama3_tiny": (32, {"rope_theta": 10000.0, "rope_scaling": dict(
        LLAMA3, factor=4.0, original_max_position_embeddings=256)}),
}
TALKER_SCALING = {"mrope_section": [24, 20, 20], "rope_type": "default", "type": "default"}


def rotate(x: np.ndarray, ang: np.ndarray) -> np.ndarray:
    """Rotate-half RoPE in float64 with explicit angles ``[..., L, d/2]``."""
    half = x.shape[-1] // 2
    cos, sin = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def mlx_rope(r: RopeArgs, head_dim: int, x: np.ndarray, offset: int) -> np.ndarray:
    return np.array(make_rope(r, head_dim)(mx.array(x), offset))


@pytest.mark.parametrize("case", sorted(CASES))
def test_inverse_frequencies_match_transformers(case):
    head_dim, cfg = CASES[case]
    r = RopeArgs.from_hf(cfg)
    np.testing.assert_allclose(inv_freq(r, head_dim), GOLD[f"{case}_inv_freq"], rtol=2e-6)


@pytest.mark.parametrize("case", sorted(CASES))
def test_mlx_rotation_matches_transformers(case):
    """The applied rotation (mx.fast.rope; llama3 through ``freqs=``), past position 3000."""
    head_dim, cfg = CASES[case]
    x, pos, want = GOLD[f"{case}_x"], GOLD[f"{case}_pos"][0], GOLD[f"{case}_out"]
    r = RopeArgs.from_hf(cfg)
    got = mlx_rope(r, head_dim, x, int(pos[0]))
    # float32 angles near 3000 rad carry ~2e-4 rad of rounding on both sides
    np.testing.assert_allclose(got, want, atol=2e-3)
    np.testing.assert_allclose(rotate(x, angles(r, head_dim, pos)), want, atol=2e-3)


def test_llama3_scaling_changes_the_rotation():
    """Guard that the llama3 goldens can tell scaled from unscaled frequencies."""
    head_dim, cfg = CASES["llama3_t3"]
    plain = RopeArgs(theta=cfg["rope_theta"])
    x, pos = GOLD["llama3_t3_x"], GOLD["llama3_t3_pos"][0]
    assert np.abs(mlx_rope(plain, head_dim, x, int(pos[0])) - GOLD["llama3_t3_out"]).max() > 0.1
    f, f0 = inv_freq(RopeArgs.from_hf(cfg), head_dim), inv_freq(plain, head_dim)
    assert (f == f0).any() and (f < f0).any()     # short wavelengths kept, long ones scaled


@pytest.mark.parametrize("layout", ["interleaved", "contiguous"])
def test_mrope_sections_match_the_qwen3_tts_talker(layout):
    """Three distinct position rows: each rotary pair reads the row its section says."""
    r = RopeArgs.from_hf({"rope_theta": 1000000.0,
                          "rope_scaling": dict(TALKER_SCALING, interleaved=layout == "interleaved")})
    assert r.type == "mrope" and r.mrope_interleaved == (layout == "interleaved")
    key = f"mrope_{layout}"
    x, pos, want = GOLD[f"{key}_x"], GOLD[f"{key}_pos"], GOLD[f"{key}_out"]
    np.testing.assert_allclose(rotate(x, angles(r, 128, pos)), want, atol=1e-4)
    # and the rows really differ here, so the sections are exercised
    assert np.abs(rotate(x, angles(r, 128, pos[0])) - want).max() > 0.1


@pytest.mark.parametrize("layout", ["interleaved", "contiguous"])
def test_mrope_with_equal_rows_is_plain_rope(layout):
    """What the talker gets in TTS: three equal rows. The upstream rotation then equals plain 1-D
    RoPE at the same theta, which is what our MLX stack applies (position = cache offset)."""
    r = RopeArgs.from_hf({"rope_theta": 1000000.0,
                          "rope_scaling": dict(TALKER_SCALING, interleaved=layout == "interleaved")})
    key = f"mrope_{layout}_same"
    x, pos, want = GOLD[f"{key}_x"], GOLD[f"{key}_pos"], GOLD[f"{key}_out"]
    assert (pos == pos[0]).all()
    got = mlx_rope(r, 128, x, int(pos[0, 0, 0]))
    np.testing.assert_allclose(got, want, atol=1e-4)
    np.testing.assert_allclose(got, mlx_rope(RopeArgs(theta=1000000.0), 128, x, int(pos[0, 0, 0])), atol=0)


def test_mrope_rows_layouts():
    inter = RopeArgs(type="mrope", mrope_section=(24, 20, 20), mrope_interleaved=True)
    rows = mrope_rows(inter, 128)
    assert list(rows[:7]) == [0, 1, 2, 0, 1, 2, 0] and list(rows[60:]) == [0, 0, 0, 0]
    assert np.bincount(rows).tolist() == [24, 20, 20]
    contig = mrope_rows(RopeArgs(type="mrope", mrope_section=(24, 20, 20)), 128)
    assert contig.tolist() == [0] * 24 + [1] * 20 + [2] * 20


def test_config_forms():
    t5 = RopeArgs.from_hf({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                               "original_max_position_embeddings": 8192}})
    t4 = RopeArgs.from_hf(dict(CASES["llama3_t3"][1]))
    assert t4 == t5 and t4.type == "llama3" and t4.theta == 500000.0
    assert RopeArgs.from_hf({}) == RopeArgs()
    legacy = RopeArgs.from_hf({"rope_theta": 1e6, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})
    assert legacy.type == "mrope" and legacy.mrope_section == (16, 24, 24) and not legacy.mrope_interleaved
    a = LMArgs.from_hf({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "intermediate_size": 96, "rope_scaling": None})
    assert not a.qk_norm and a.head_dim == 16 and a.kv_groups == 2 and a.rope == RopeArgs()
    assert LMArgs.from_hf({"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
                           "num_attention_heads": 4, "intermediate_size": 96}).qk_norm


@pytest.mark.parametrize("cfg, match", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192}}, "invalid factors"),
])
def test_unsupported_rope_is_an_error(cfg, match):
    with pytest.raises(CheckpointError, match=match):
        RopeArgs.from_hf(cfg)


def test_bad_lm_config_is_an_error():
    base = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96}
    with pytest.raises(CheckpointError, match="hidden_act"):
        LMArgs.from_hf(dict(base, hidden_act="gelu"))
    with pytest.raises(CheckpointError, match="multiple"):
        LMArgs.from_hf(dict(base, num_key_value_heads=3))
    with pytest.raises(CheckpointError, match="mrope_section"):
        LMArgs.from_hf(dict(base, rope_scaling={"mrope_section": [2, 2, 2]}))
    with pytest.raises(CheckpointError, match="missing or invalid"):
        LMArgs.from_hf({"hidden_size": 64})

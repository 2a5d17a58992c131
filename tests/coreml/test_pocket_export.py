"""Pocket TTS's flow LM as Core ML packages (ttscli convert pocket-tts --to coreml) on the tiny
checkpoint, built and saved here, their saved MIL programs run in float32 by the numpy
interpreter against MLX: the step (Kyutai's block: LayerNorm, tanh-GELU, adjacent-pair RoPE)
position by position, and the EOS and flow heads from the same noise."""
from pathlib import Path

import numpy as np
import pytest
from mil_interp import InterpretedModel

import ttscli  # noqa: F401  (BLAS preload before mlx)

mx = pytest.importorskip("mlx.core")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "pocket_tts" / "tiny"
POSITIONS = 12


def test_flow_lm_packages_match_mlx(tmp_path):
    from ttscli.models.pocket_tts.coreml_export import export_coreml
    from ttscli.models.pocket_tts.flow_lm import lsd_decode
    from ttscli.models.pocket_tts.load import load_model

    m = export_coreml(FIX, tmp_path, model_id="pocket-tts", capacity=16, precision="float32")
    step_entry, heads_entry = m["components"]["flow_lm"], m["components"]["flow_heads"]
    assert step_entry["style"] == {"norm": "layer", "mlp": "gelu_tanh", "rope_interleaved": True}
    assert [f["name"] for f in heads_entry["inputs"]] == ["hidden", "noise"]
    assert sorted(f["name"] for f in heads_entry["outputs"]) == ["eos_logit", "latent"]

    lm = load_model(FIX).flow_lm
    x = np.random.default_rng(0).standard_normal((1, POSITIONS, lm.args.d_model)).astype(np.float32)
    cache = lm.new_cache()
    ref = [lm(mx.array(x[:, i:i + 1]), cache) for i in range(POSITIONS)]

    step = InterpretedModel(tmp_path / step_entry["path"], fp16=False)
    heads = InterpretedModel(tmp_path / heads_entry["path"], fp16=False)
    state = step.new_state()
    noise = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    for i, (eos, hidden) in enumerate(ref):
        got = step.predict({"inputs_embeds": x[:, i:i + 1], "position": np.array([i], np.int32)}, state)["hidden"]
        np.testing.assert_allclose(got, np.array(hidden), atol=1e-4, rtol=0)
        out = heads.predict({"hidden": got, "noise": noise})
        np.testing.assert_allclose(out["eos_logit"], np.array(eos), atol=1e-4, rtol=0)
        latent = np.array(lsd_decode(lm.flow_net, hidden, mx.array(noise), 1))
        np.testing.assert_allclose(out["latent"], latent, atol=1e-4, rtol=0)

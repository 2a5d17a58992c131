"""Checkpoint layouts besides the int8 graph: a torch-named safetensors folder (mlx-community's
layout, weight norm stored as g/v, mlx-audio's LSTM names and channels-last convs) loads to the
same model, and its voices folder to the same voices."""
import json

import numpy as np
import pytest

from ttscli.errors import CheckpointError


def _as_published(weights: dict) -> dict:
    out = {}
    for k, v in weights.items():
        v = np.asarray(v, np.float32)
        if k.endswith(".weight") and v.ndim == 3 and ("conv" in k or "ups." in k or "cnn." in k or "asr_res" in k):
            norm = np.sqrt((v.astype(np.float64) ** 2).sum(axis=(1, 2), keepdims=True))
            out[k[:-len("weight")] + "weight_g"] = norm.astype(np.float32)
            out[k[:-len("weight")] + "weight_v"] = v
            if k.endswith("decode.0.conv1.weight"):
                out[k[:-len("weight")] + "weight_v"] = np.ascontiguousarray(v.transpose(0, 2, 1))  # channels-last
        elif k.startswith("text_encoder.lstm.weight_ih_l0_reverse"):
            out["text_encoder.lstm.Wx_backward"] = v
        else:
            out[k] = v
    return out


@pytest.mark.slow
def test_torch_named_safetensors_folder(kokoro_model, kokoro_ckpt, tmp_path):
    from mlx.utils import tree_flatten
    from safetensors.numpy import save_file

    from ttscli.models.kokoro.load import load_model, load_voices

    ours = {k: np.array(v) for k, v in tree_flatten(kokoro_model.parameters())}
    folder = tmp_path / "Kokoro-82M-bf16"
    (folder / "voices").mkdir(parents=True)
    save_file(_as_published(ours), str(folder / "kokoro-v1_0.safetensors"))
    (folder / "config.json").write_text(json.dumps({"vocab": {"a": 43}}))
    voice = load_voices(kokoro_ckpt)["jf_alpha"]
    save_file({"voice": voice[:, None, :]}, str(folder / "voices" / "jf_alpha.safetensors"))
    model = load_model(folder, tmp_path / "cache")
    got = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    assert set(got) == set(ours)
    assert all(np.isfinite(v).all() for v in got.values())
    worst = max(float(np.max(np.abs(got[k] - ours[k]))) for k in ours)
    assert worst < 1e-5
    assert np.array_equal(load_voices(folder)["jf_alpha"], voice)


def test_a_missing_tensor_is_named(kokoro_model, tmp_path):
    from mlx.utils import tree_flatten
    from safetensors.numpy import save_file

    from ttscli.models.kokoro.load import load_model

    ours = {k: np.array(v) for k, v in tree_flatten(kokoro_model.parameters())}
    ours.pop("predictor.F0_proj.bias")
    folder = tmp_path / "broken"
    folder.mkdir()
    save_file(ours, str(folder / "kokoro.safetensors"))
    with pytest.raises(CheckpointError, match="missing 1: predictor.F0_proj.bias"):
        load_model(folder, tmp_path / "cache")

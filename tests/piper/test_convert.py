"""ONNX initializers -> our tensor names, strict checks, and the converted-weights cache."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from ttscli.errors import CheckpointError
from ttscli.models.base import LoadOptions
from ttscli.models.piper import convert as conv_mod
from ttscli.models.piper import load_pipeline
from ttscli.models.piper.convert import read_onnx_weights


def test_every_joe_tensor_maps(voice_dir):
    weights, convs = read_onnx_weights(voice_dir / "en_US-joe-medium.onnx")
    # names recovered through consuming nodes
    assert weights["enc_p.emb.weight"].shape == (256, 192)                  # exported as "sid"
    assert weights["flow.flows.0.enc.in_layers.0.weight"].shape == (384, 192, 5)   # onnx::Conv_*
    assert "dp.flows.0.logs" in weights                                      # folded exp(-logs)
    assert weights["dec.ups.0.weight"].shape == (256, 128, 16)               # ConvTranspose [in,out,K]
    assert convs["dec.resblocks.2.convs.1"]["dilations"] == [12]
    assert not any(k.startswith(("onnx::", "/")) for k in weights)


def test_converted_config(converted):
    cfg = json.loads((converted / "config.json").read_text())
    a = cfg["args"]
    assert (a["n_heads"], a["window_size"], a["n_layers"]) == (2, 4, 6)
    assert a["upsample_rates"] == [8, 8, 4] and a["resblock_dilation_sizes"] == [[1, 2], [2, 6], [3, 12]]
    assert a["sample_rate"] == 22050 and a["noise_w"] == 0.8
    assert cfg["phoneme_id_map"]["^"] == [1]


def _tiny_onnx(path, extra_init=None):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(4, 2, 3), "onnx::Conv_7")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "flow.flows.0.enc.in_layers.0.bias")
    inits = [w, b] + ([extra_init] if extra_init is not None else [])
    node = helper.make_node("Conv", ["x", "onnx::Conv_7", "flow.flows.0.enc.in_layers.0.bias"], ["y"],
                            name="/flow/flows.0/enc/in_layers.0/Conv", pads=[1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_unreadable_names_go_through_the_consuming_node(tmp_path):
    weights, _ = read_onnx_weights(_tiny_onnx(tmp_path / "t.onnx"))
    w = weights["flow.flows.0.enc.in_layers.0.weight"]
    assert w.shape == (4, 2, 3)                                              # ONNX's [out, in, K] kept
    assert w[1, 0, 2] == 1 * 6 + 0 * 3 + 2


def test_unmapped_initializer_is_named(tmp_path):
    from onnx import numpy_helper
    extra = numpy_helper.from_array(np.ones((10, 10), np.float32), "onnx::Mystery_99")
    with pytest.raises(CheckpointError, match="onnx::Mystery_99"):
        read_onnx_weights(_tiny_onnx(tmp_path / "t.onnx", extra))


def test_misshaped_tensor_is_named(model):
    from mlx.utils import tree_flatten
    import mlx.core as mx

    weights = dict(tree_flatten(model.parameters()))
    weights["dec.conv_post.weight"] = mx.zeros((1, 5, 32))
    del weights["enc_p.proj.bias"]
    with pytest.raises(CheckpointError, match=r"dec\.conv_post\.weight.*|enc_p\.proj\.bias"):
        model.load_weights_strict(weights)


def test_interrupted_conversion_leaves_nothing(voice_dir, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr("safetensors.numpy.save_file", boom)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        conv_mod.convert_onnx(voice_dir / "en_US-joe-medium.onnx", out)
    assert list(tmp_path.iterdir()) == []


def test_cache_converted_once_reused_and_rebuilt(voice_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path))
    calls = []
    real = conv_mod.convert_onnx
    monkeypatch.setattr("ttscli.models.piper.load.convert_onnx",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    spec = SimpleNamespace(id="piper-joe", cache_id="piper-joe", sample_rate=22050, defaults={})
    mlx = LoadOptions(backends={"vits": "mlx"})       # the converted cache serves the MLX VITS
    load_pipeline(spec, voice_dir, mlx)
    load_pipeline(spec, voice_dir, mlx)
    assert len(calls) == 1
    cache = tmp_path / "converted" / "piper-joe" / "mlx"
    (cache / "model.safetensors").write_bytes(b"garbage")                  # corrupt -> rebuilt
    load_pipeline(spec, voice_dir, mlx)
    assert len(calls) == 2
    cfg = json.loads((cache / "config.json").read_text())
    cfg["source"]["size"] += 1                                             # stale -> rebuilt
    (cache / "config.json").write_text(json.dumps(cfg))
    pipe = load_pipeline(spec, voice_dir, mlx)
    assert len(calls) == 3 and pipe.sample_rate == 22050

"""Qwen3-TTS on onnxruntime against the upstream goldens of the tiny fixtures (qwen-tts 0.1.1,
tests/fixtures/parity) and against the MLX frame; `ttscli convert --to onnx`, its cache and
rebuild on a changed checkpoint; the backend names and their errors."""
import json
import shutil
from pathlib import Path

import pytest
from clitools import by_name, only_line

import ttscli  # noqa: F401  (BLAS preload before mlx)

pytest.importorskip("onnxruntime")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "parity"
LOGITS = "prefill logits vs golden (cosine)"
GREEDY = "greedy frames vs golden (all 16 codes)"


def scale(ck: Path, key: str, factor: float) -> None:
    import mlx.core as mx

    w = mx.load(str(ck / "model.safetensors"))
    w[key] = (w[key].astype(mx.float32) * factor).astype(w[key].dtype)
    mx.save_safetensors(str(ck / "model.safetensors"), w)


@pytest.mark.parametrize("prefill", ["onnx", "mlx"])
def test_float32_matches_upstream_goldens(run_cli, prefill):
    p = run_cli("parity", "qwen3-tts-0.6b-base", "--model-dir", FIX / "qwen3-tiny-base",
                "--golden", FIX / "qwen3-tiny-base.npz", "--code-decoder-backend", "onnx-f32", "--json", "-q",
                env={"TTSCLI_ONNX_PREFILL": prefill})
    assert p.returncode == 0, p.err
    checks = by_name(json.loads(p.stdout)["checks"])
    assert checks[LOGITS]["value"] >= 0.99999
    assert checks[GREEDY]["value"] == checks[GREEDY]["threshold"] == 20.0


def test_against_onnx_every_precision(run_cli):
    p = run_cli("parity", "qwen3-tts-1.7b-customvoice", "--model-dir", FIX / "qwen3-tiny-customvoice",
                "--against", "onnx", "--json", "-q")
    assert p.returncode == 0, p.err
    checks = by_name(json.loads(p.stdout)["checks"])
    f32 = checks["prefill logits mlx vs onnx-float32 (cosine)"]
    assert f32["value"] >= 0.99999
    assert checks["greedy frames mlx vs onnx-float32 (all 16 codes)"]["value"] == 20.0
    assert checks["prefill logits mlx vs onnx-int8 (cosine)"]["value"] >= 0.999
    assert "prefill logits mlx vs onnx-int4 (cosine)" in checks


def test_golden_fails_on_a_perturbed_talker(run_cli, tmp_path):
    """The check can fail: a perturbed talker layer (rebuilt graphs, same goldens) is caught."""
    ck = tmp_path / "ck"
    shutil.copytree(FIX / "qwen3-tiny-base", ck)
    scale(ck, "talker.model.layers.1.mlp.down_proj.weight", 1.5)
    p = run_cli("parity", "qwen3-tts-0.6b-base", "--model-dir", ck, "--golden", FIX / "qwen3-tiny-base.npz",
                "--code-decoder-backend", "onnx-f32", "--json", "-q", env={"TTSCLI_ONNX_PREFILL": "onnx"})
    assert p.returncode == 1
    assert not by_name(json.loads(p.stdout)["checks"])[LOGITS]["passed"]


def test_convert_cache_and_rebuild(tmp_path, monkeypatch):
    """`convert --to onnx -q --q-bits 4` writes the manifest with source hashes; the pipeline
    finds it by those hashes, and a changed checkpoint is rebuilt rather than served stale."""
    from ttscli.backends.onnx.graph import Quant
    from ttscli.backends.onnx.manifest import read_manifest
    from ttscli.convert import ConvertRequest, convert
    from ttscli.models.qwen3_tts.onnx_export import find_or_build
    from ttscli.registry import load_registry

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    ck = tmp_path / "ck"
    shutil.copytree(FIX / "qwen3-tiny-base", ck)
    out = convert(ConvertRequest("qwen3-tts-0.6b-base", "onnx", quantize=True, q_bits=4, model_dir=ck),
                  load_registry(), note=lambda s: None)
    assert out.name == "onnx-int4"
    m = read_manifest(out)
    assert set(m["components"]) == {"code_decoder", "code_predictor"}
    assert m["components"]["code_predictor"]["heads"] == ["logits"]
    assert m["components"]["code_predictor"]["head_select"] == {"input": "head", "count": 15}
    assert m["components"]["code_decoder"]["block_size"] == 32 and m["precision"] == "int4"
    assert find_or_build(ck, Quant("int4", 32)) == out
    stamp = (out / "manifest.json").stat().st_mtime_ns
    (ck / "model.safetensors").write_bytes((ck / "model.safetensors").read_bytes() + b"")  # same bytes
    assert find_or_build(ck, Quant("int4", 32)) == out and (out / "manifest.json").stat().st_mtime_ns == stamp
    scale(ck, "talker.codec_head.weight", 2.0)
    rebuilt = find_or_build(ck, Quant("int4", 32), "qwen3-tts-0.6b-base")
    assert rebuilt == out and read_manifest(out)["source"]["files"] != m["source"]["files"]


def test_bad_backend_and_convert_options(run_cli):
    p = run_cli("speak", "hi", "-m", "qwen3-tts-0.6b-base", "--code-decoder-backend", "onnx-int2", "-o", "x.wav")
    assert p.returncode != 0 and "Traceback" not in p.err
    p = run_cli("convert", "qwen3-tts-0.6b-base", "--to", "onnx", "--dtype", "float16",
                "--model-dir", FIX / "qwen3-tiny-base", "-o", "out")
    assert p.returncode != 0 and "float32" in only_line(p.err)
    from ttscli.backends.select import split_backend
    from ttscli.errors import UsageError

    assert split_backend("onnx") == ("onnx", "int8") and split_backend("ONNX-F32") == ("onnx", "float32")
    with pytest.raises(UsageError, match="f32, int8 or int4"):
        split_backend("onnx-int2")
    with pytest.raises(UsageError, match="only onnx"):
        split_backend("mlx-int8")


@pytest.mark.parametrize("params", [(0.9, 50, 1.0), (1.0, 0, 0.8), (0.9, 0, 1.0, 0.05)])
def test_frame_draws_what_the_mlx_sampler_draws(tmp_path, monkeypatch, params):
    """The predictor frame on onnxruntime draws its 15 codes in numpy; with the MLX sampler per
    step instead (same logits, same keys) every frame's codes and summed embedding are the same."""
    import mlx.core as mx
    import numpy as np

    from ttscli.backends.onnx.graph import Quant
    from ttscli.lm.sample import SamplingParams
    from ttscli.models.qwen3_tts.load import load_model
    from ttscli.models.qwen3_tts.onnx_decoder import open_decoder
    from ttscli.models.qwen3_tts.onnx_export import find_or_build

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    ck = FIX / "qwen3-tiny-base"
    model, _ = load_model(ck, "float32")
    pred = open_decoder(find_or_build(ck, Quant("float32")), model, prefill="onnx").predictor
    assert pred.draws_in_numpy
    p = SamplingParams(*params)
    H = model.talker.args.hidden_size
    for f in range(6):
        h, e = (mx.random.normal((1, H), key=mx.random.key(10 * f + i)) for i in (1, 2))
        keys = mx.random.split(mx.random.key(100 + f), 15)
        codes, total = pred.frame(h, e, p, keys)
        pred.draws_in_numpy = False
        want, want_total = pred.frame(h, e, p, keys)
        pred.draws_in_numpy = True
        assert np.array_equal(np.asarray(codes), np.asarray(want))
        assert np.array_equal(np.asarray(total), np.asarray(want_total))

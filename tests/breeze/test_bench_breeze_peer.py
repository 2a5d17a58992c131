"""benchmarks/bench_breeze_peer.py at tiny dimensions: ttscli's timed passes run the loop's own
frames, the JSON carries every figure, bad options are one line; the mlx-audio side where
mlx-audio 0.6.2 is importable (a scratch venv, never a ttscli dependency)."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_breeze_peer.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_breeze_peer", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def prompts(cfg, n=12, instruction=4):
    x = mx.random.normal((1, n, cfg["hidden_size"]), key=mx.random.key(3)) * 0.1
    return x, x[:, instruction:]


def test_split_pass_runs_the_loops_frames(bench):
    cfg = bench.bench_config(tiny=True)
    model, decoder = bench.our_model(cfg, mx.float32)
    cond, uncond = prompts(cfg)
    for u in (uncond, None):   # CFG (a batch of two) and one branch
        loop = bench.our_frames(model, decoder, cond, u, 5, seed=4)
        parts = bench.our_parts(model, decoder, cond, u, 5, seed=4)
        assert loop["codes"].shape == (5, 16) and len(loop["frame_s"]) == 5 and loop["prefill_s"] > 0
        assert len(parts["step_s"]) == len(parts["depth_s"]) == 5
        # the timed split is the loop's frame: same keys, same codes
        np.testing.assert_array_equal(parts["codes"], loop["codes"])
        assert (loop["codes"] < model.args.codebook_size).all()


def test_config_shrinks_only_what_is_asked(bench):
    real = bench.real_config()
    cfg = bench.bench_config()
    for k in ("backbone_config", "depth_decoder_config"):
        assert cfg[k] == real[k]
    assert cfg["text_encoder_config"]["num_hidden_layers"] == 1
    cfg = bench.bench_config(layers=bench.parse_layers("4"))
    assert cfg["backbone_config"]["num_hidden_layers"] == 4 and cfg["depth_decoder_config"]["num_hidden_layers"] == 4
    assert cfg["backbone_config"]["hidden_size"] == 2048
    assert bench.parse_layers("40,2") == (40, 2)
    assert bench.bench_config(layers=(40, 2))["backbone_config"]["num_hidden_layers"] == 28


def test_json_figures_ours(bench, tmp_path, capsys):
    out = tmp_path / "r.json"
    res = bench.main(["--tiny", "--only", "ours", "--frames", "4", "--warmup", "1", "--rounds", "2",
                      "--prompt", "10", "--instruction", "3", "--out", str(out)])
    assert out.read_text().strip() == capsys.readouterr().out.strip()
    assert res["cfg"] == 3.0 and res["prompt_positions"] == [10, 7] and "mlx_audio" not in res
    o = res["ours"]
    for k in ("frame_ms", "backbone_step_ms", "depth_frame_ms", "prefill_ms", "rtf"):
        assert math.isfinite(o[k]) and o[k] > 0, k
    assert len(o["per_round_frame_ms"]) == 2 and o["rtf"] == pytest.approx(o["frame_ms"] / 80)


@pytest.mark.parametrize("argv, words", [
    (["--layers", "x"], "--layers"),
    (["--layers", "0"], "--layers"),
    (["--frames", "2", "--warmup", "2"], "--frames must exceed"),
    (["--prompt", "8", "--instruction", "8"], "--instruction"),
])
def test_bad_options_are_one_line(bench, argv, words):
    with pytest.raises(SystemExit) as e:
        bench.main(["--tiny", "--only", "ours", *argv])
    assert isinstance(e.value.code, str) and words in e.value.code and "\n" not in e.value.code


def test_against_mlx_audio_when_installed(bench):
    pytest.importorskip("mlx_audio.tts.models.breeze_tts")
    res = bench.main(["--tiny", "--frames", "3", "--warmup", "1", "--rounds", "1", "--prompt", "10",
                      "--instruction", "3"])
    # the same dimensions on both sides (mlx-audio's tied audio table counted once)
    assert res["weights_mb"]["ours"] == pytest.approx(res["weights_mb"]["mlx_audio"], rel=1e-3)
    for k in ("frame_ms", "backbone_step_ms", "depth_frame_ms", "prefill_ms"):
        assert res["mlx_audio"][k] > 0 and res["mlx_audio_over_ours"][k] > 0

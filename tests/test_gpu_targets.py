"""scripts/gpu_targets.py: its JSON gathering, its skips and the served targets' checks."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_targets.py"


@pytest.fixture(scope="module")
def gt():
    spec = importlib.util.spec_from_file_location("gpu_targets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_targets"] = module      # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_last_json_after_progress_lines(gt):
    """A bench's JSON is its whole stdout; the peer script prints progress lines first."""
    assert gt.last_json(json.dumps({"a": 1}, indent=2)) == {"a": 1}
    out = '{"1": {"ours_step_ms": 3.0}}\nnote\n' + json.dumps({"sizes": {"1": 2}}, indent=1) + "\n"
    assert gt.last_json(out) == {"sizes": {"1": 2}}
    assert gt.last_json("no json here\n") is None


def test_served_checks_against_the_targets(gt):
    levels = [{"clients": 32, "first_audio_p95_s": 0.08, "errors": 0, "audio_s_per_s": 300.0},
              {"clients": 64, "first_audio_p95_s": 0.2, "errors": 1, "audio_s_per_s": 499.0}]
    checks = gt.served_checks({"levels": levels})
    assert checks["32_clients_p95_first_audio"]["met"] is True
    assert checks["64_clients_audio_s_per_s"] == {"value": 499.0, "target": 500.0, "met": False}
    levels[0]["errors"] = 2                   # an error fails the first-audio target at any speed
    assert gt.served_checks({"levels": levels})["32_clients_p95_first_audio"]["met"] is False
    assert gt.served_checks({"levels": levels[:0]}) == {}


def test_a_step_that_cannot_run_is_skipped_with_its_reason(tmp_path):
    """mlx-audio is no dependency of ttscli: without it the peer step says why and the run
    still succeeds, its JSON written."""
    out = tmp_path / "targets.json"
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--only", "qwen3_vs_mlx_audio", "--json", str(out),
                        "--peer-python", sys.executable], capture_output=True, text=True, timeout=300)
    if importlib.util.find_spec("mlx_audio") is not None:
        pytest.skip("mlx-audio is importable here")
    assert p.returncode == 0, p.stderr
    report = json.loads(out.read_text())
    step = report["steps"]["qwen3_vs_mlx_audio"]
    assert report["quick"] is True and step["skipped"].startswith("mlx_audio not importable")
    assert step["command"].endswith("benchmarks/bench_qwen3_peer.py --batch 1,2 --frames 4 --rounds 1")


def test_unknown_step_is_one_line(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--only", "nope", "--json", str(tmp_path / "t.json")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and p.stderr.strip().startswith("--only: no step 'nope'")
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_quick_serve_load_end_to_end(tmp_path):
    """The served step at toy sizes: a Qwen3-TTS server at random weights, 1 and 2 streaming
    clients, every request answered, its figures gathered with the command that made them."""
    out = tmp_path / "targets.json"
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--only", "serve_load", "--json", str(out)],
                       capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stderr
    step = json.loads(out.read_text())["steps"]["serve_load"]
    assert step["rc"] == 0 and step["result"]["random_weights"] is True
    levels = step["result"]["levels"]
    assert [lv["clients"] for lv in levels] == [1, 2]
    for lv in levels:
        assert lv["errors"] == 0 and lv["ok"] == lv["requests"] == lv["clients"]
        # 4 frames of 80 ms each request, at random weights exactly
        assert lv["audio_s"] == pytest.approx(lv["requests"] * 4 * 0.08)


def test_family_checks_against_the_issue_targets(gt):
    result = {"variants": {"mlx": {"first_audio_s": 0.12, "rtf": 0.2}}}
    checks = gt.family_checks("indextts2_stream", result)
    assert checks == {"first_audio_s": {"value": 0.12, "target": 0.2, "met": True},
                      "rtf": {"value": 0.2, "target": 0.15, "met": False}}
    assert gt.family_checks("cosyvoice3_stream", result)["first_audio_s"]["met"] is True
    assert gt.family_checks("indextts2_stream", None) == {}
    assert gt.family_checks("qwen3_single_stream", result) == {}
    names = [st.name for st in gt.steps(gt.QUICK, sys.executable, ROOT)]
    assert {"cosyvoice3_stream", "voxcpm2_stream", "indextts2_stream", "indextts2_batched"} <= set(names)

"""`ttscli serve --random-weights` and the load tester (benchmarks/serve_load.py) against it."""
from __future__ import annotations

import asyncio
import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import only_line, ttscli_exe
from servertools import Server

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_load.py"
TEXT = "Hello there. How are you?"


def load_tester():
    spec = importlib.util.spec_from_file_location("serve_load", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["serve_load"] = module      # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cache = tmp_path_factory.mktemp("serve-random-cache")
    s = Server(["--random-weights", "--max-batch", "4", "--max-queue", "8"], env={"TTSCLI_CACHE": str(cache)})
    yield s
    assert s.stop() is not None


def test_random_weights_said_everywhere(server):
    """The startup lines, the model's /v1/models entry and each speech response say the weights
    are random; the audio still comes at the model's real rate."""
    assert any(line.startswith("WARNING: --random-weights") for line in server.lines)
    assert any("piper-joe (RANDOM WEIGHTS) on http://" in line for line in server.lines)
    card = httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]
    assert card["id"] == "piper-joe" and card["random_weights"] is True
    r = httpx.post(server.url + "/v1/audio/speech", json={"input": "Hi.", "response_format": "wav"}, timeout=120)
    assert r.status_code == 200 and r.headers["x-random-weights"] == "true"
    assert sf.info(io.BytesIO(r.content)).frames > 0


def test_random_weights_refuse_model_dir(tmp_path):
    p = subprocess.run(ttscli_exe() + ["serve", "--random-weights", "--model-dir", str(tmp_path), "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "drop --model-dir" in only_line(p.stderr)


def test_load_levels_against_a_server(server):
    """At 1 and 4 concurrent clients every request is counted once and succeeds, first audio
    comes no later than the last byte, and each request's audio seconds are its WAV's length."""
    sl = load_tester()
    cfg = sl.LoadConfig(text=TEXT, requests=2, timeout=120)
    levels = asyncio.run(sl.run_levels(server.url, cfg, [1, 4]))
    assert [lv["clients"] for lv in levels] == [1, 4]
    for lv in levels:
        assert lv["requests"] == lv["ok"] == 2 * lv["clients"] and lv["errors"] == 0
        assert sorted({r["client"] for r in lv["per_request"]}) == list(range(lv["clients"]))
        for r in lv["per_request"]:
            assert r["status"] == 200 and 0 < r["first_audio_s"] <= r["total_s"]
        assert lv["first_audio_p50_s"] <= lv["first_audio_p95_s"] <= lv["first_audio_max_s"]
        assert lv["audio_s"] == pytest.approx(sum(r["audio_s"] for r in lv["per_request"]))
        assert lv["audio_s_per_s"] == pytest.approx(lv["audio_s"] / lv["wall_s"])
    with httpx.Client(timeout=120) as c:
        for r in levels[1]["per_request"][:2]:
            wav = c.post(server.url + "/v1/audio/speech",
                         json={"input": TEXT, "response_format": "wav", "seed": r["seed"]})
            info = sf.info(io.BytesIO(wav.content))
            assert r["audio_s"] == pytest.approx(info.frames / info.samplerate, abs=1e-9)


def test_summary_counts_failures_apart():
    """Figures of time come from the requests that succeeded; a failure counts as an error only."""
    sl = load_tester()
    outs = [sl.Outcome(0, 0, 200, 0.1, 1.0, 2.0), sl.Outcome(0, 1, 200, 0.3, 2.0, 3.0),
            sl.Outcome(1, 2, 503, None, 0.01, 0.0, "503: queue full")]
    s = sl.summarize(outs, wall_s=2.5, clients=2)
    assert (s["requests"], s["ok"], s["errors"]) == (3, 2, 1)
    assert s["first_audio_p50_s"] == pytest.approx(0.2) and s["first_audio_max_s"] == 0.3
    assert s["first_audio_p95_s"] == pytest.approx(0.29)
    assert s["audio_s"] == 5.0 and s["audio_s_per_s"] == pytest.approx(2.0)
    assert s["first_errors"] == ["503: queue full"]


def test_random_weights_requests_run_a_fixed_frame_count():
    """At random weights a frame model's request runs exactly its max_frames (50 unless asked),
    where reaching it would otherwise be an error; a model without frames is left as it is."""
    from ttscli.generate import Request
    from ttscli.models import family_of
    from ttscli.registry import load_registry
    from ttscli.serve.app import run_fixed_frames

    reg = load_registry()
    qwen3, piper = (family_of(reg.resolve(m, None)) for m in ("qwen3-tts-0.6b-base", "piper-joe"))
    asked, default, plain = Request(text="Hi.", max_frames=7), Request(text="Hi."), Request(text="Hi.")
    run_fixed_frames(asked, qwen3)
    run_fixed_frames(default, qwen3)
    run_fixed_frames(plain, piper)
    assert (asked.ignore_eos, asked.max_frames) == (True, 7)
    assert (default.ignore_eos, default.max_frames) == (True, 50)
    assert (plain.ignore_eos, plain.max_frames) == (False, None)

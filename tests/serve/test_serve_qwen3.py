"""`ttscli serve` with a complete tiny Qwen3-TTS CustomVoice checkpoint (tests/qwen3_e2e/e2e_fixture.py):
OpenAI fields mapped onto the request, refusals the CLI makes, and the CLI's samples."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "qwen3_e2e"))
from e2e_fixture import build
from servertools import Server

CV = "qwen3-tts-1.7b-customvoice"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build("customvoice", tmp_path_factory.mktemp("qwen3-serve") / "cv", eos_gain=3.0)


@pytest.fixture(scope="module")
def server(ckpt):
    s = Server(["-m", CV, "--model-dir", ckpt])
    yield s
    s.stop()


def post(server, **body):
    return httpx.post(server.url + "/v1/audio/speech", json=body, timeout=300)


def test_voice_instructions_seed_equal_the_cli(server, ckpt, run_cli, tmp_path):
    body = {"model": CV, "input": "Hello there.", "voice": "ryan", "instructions": "Cheerful.", "seed": 5,
            "response_format": "flac", "temperature": 0.8, "subtalker_top_k": 20}
    r = post(server, **body)
    assert r.status_code == 200, r.text
    got, sr = sf.read(io.BytesIO(r.content), dtype="int16")
    p = run_cli("speak", "Hello there.", "-m", CV, "--model-dir", ckpt, "--voice", "ryan", "--instruct", "Cheerful.",
                "--seed", "5", "--temperature", "0.8", "--subtalker-top-k", "20", "-o", "cli.flac")
    assert p.returncode == 0, p.err
    ref, sr2 = sf.read(str(tmp_path / "cli.flac"), dtype="int16")
    assert sr == sr2 == 24000 and len(got) == len(ref) > 0
    assert np.abs(got.astype(np.int32) - ref).max() <= 2


@pytest.mark.parametrize("extra,needle", [
    ({"speed": 1.5}, f"{CV} cannot honour `speed`; drop it"),
    ({"voice": "nobody"}, "has no voice 'nobody'"),
    ({"temperature": -1}, "temperature must be in [0..100], got -1"),
    ({"noise_scale": 0.5}, f"{CV} has no setting noise_scale"),
    ({"language": "klingon"}, "does not speak `language` 'klingon'"),
])
def test_refusals_match_the_cli(server, extra, needle):
    r = post(server, **{"input": "Hi.", "voice": "ryan", **extra})
    assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text


def test_voices_listed(server):
    voices = httpx.get(server.url + "/v1/audio/voices").json()["data"]
    assert {"id": "ryan", "model": CV, "kind": "preset"} in voices


def test_concurrent_requests_share_a_batch_and_equal_alone(server):
    """Requests arriving together run as rows of one batch; each equals the same request alone."""
    import threading

    bodies = [{"input": t, "voice": v, "seed": s, "response_format": "pcm"}
              for t, v, s in [("Hello there.", "ryan", 1), ("A longer sentence. And another one.", "serena", 2),
                              ("Third.", "eric", 3), ("Fourth request here.", "ryan", 4)]]
    alone = [post(server, **b).content for b in bodies]
    got = [None] * len(bodies)

    def go(i):
        got[i] = post(server, **bodies[i])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for i, r in enumerate(got):
        assert r.status_code == 200
        a = np.frombuffer(alone[i], "<i2").astype(np.int32)
        b = np.frombuffer(r.content, "<i2").astype(np.int32)
        assert len(a) == len(b) > 0 and np.abs(a - b).max() <= 2, i


def test_disconnect_frees_the_row(server):
    import time

    with httpx.Client(timeout=120) as c:
        with c.stream("POST", server.url + "/v1/audio/speech",
                      json={"input": "One. Two. Three. Four. Five. Six. Seven.", "voice": "ryan",
                            "response_format": "pcm", "max_frames": 200}) as r:
            assert r.status_code == 200
            next(r.iter_raw())
    deadline = time.monotonic() + 60
    while True:
        h = httpx.get(server.url + "/health", timeout=60).json()["models"][CV]
        if h["active"] == 0 and h["queued"] == 0:
            break
        assert time.monotonic() < deadline, h
        time.sleep(0.1)
    assert post(server, input="Still serving.", voice="ryan").status_code == 200


def test_a_frame_limit_reached_is_a_4xx_not_cut_audio(server):
    """The request's own frame limit reached before the model's end: the request cannot be voiced
    within its bounds, so a 422 naming the limit (before, a 500), never a shortened file."""
    r = post(server, input="A sentence far longer than one frame of speech can hold.", voice="ryan",
             response_format="wav", max_frames=1, seed=1)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and "max frames (1," in err["message"]

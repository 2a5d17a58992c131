"""Word timestamps from the server, in-process with the embedded voice: Kokoro-FastAPI's captioned
shape (/dev/captioned_speech, and /v1/audio/speech with return_timestamps) and SSE word events."""
from __future__ import annotations

import base64
import io
import json

import pytest
import soundfile as sf

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

TEXT = "Hello there. Words come with their times."


@pytest.fixture(scope="module")
def client():
    from fastapi.testclient import TestClient

    from ttscli import api
    from ttscli.models import family_of
    from ttscli.registry import load_registry
    from ttscli.serve import run_request
    from ttscli.serve.app import ServeConfig, create_app
    from ttscli.serve.worker import ModelWorker

    reg = load_registry([])
    spec = reg.resolve("piper-joe")
    worker = ModelWorker(spec.id, lambda: api.load(spec.id, registry=reg), run_request, 4)
    worker.start()
    try:
        cfg = ServeConfig(workers={spec.id: worker}, specs={spec.id: spec}, registry=reg,
                          families={spec.id: family_of(spec)})
        with TestClient(create_app(cfg)) as c:
            yield c
    finally:
        worker.stop()


def test_captioned_speech_has_audio_and_timestamps(client):
    for path, extra in (("/dev/captioned_speech", {}), ("/v1/audio/speech", {"return_timestamps": True})):
        r = client.post(path, json={"input": TEXT, "response_format": "wav", "seed": 1, **extra})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["audio_format"] == "wav"
        audio, sr = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
        stamps = body["timestamps"]
        assert [t["word"] for t in stamps] == TEXT.split()
        assert all(0 <= t["start_time"] < t["end_time"] <= len(audio) / sr for t in stamps)


def test_sse_carries_word_events(client):
    r = client.post("/v1/audio/speech", json={"input": TEXT, "stream_format": "sse", "response_format": "pcm",
                                              "return_timestamps": True})
    assert r.status_code == 200, r.text
    events = [json.loads(line[len("data: "):]) for line in r.text.splitlines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and "speech.audio.delta" in kinds
    words = [w for e in events if e["type"] == "speech.words" for w in e["words"]]
    assert [w["word"] for w in words] == TEXT.split()
    assert kinds.index("speech.words") > kinds.index("speech.audio.delta")   # after the audio that carries them


def test_bad_return_timestamps_is_a_400(client):
    r = client.post("/v1/audio/speech", json={"input": TEXT, "return_timestamps": "yes"})
    assert r.status_code == 400
    assert "return_timestamps must be true or false" in r.json()["error"]["message"]

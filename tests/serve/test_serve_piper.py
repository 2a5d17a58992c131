"""`ttscli serve` with the embedded voice, through a real HTTP client on 127.0.0.1."""
from __future__ import annotations

import base64
import io
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servertools import Server, error, speech

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
LONG = " ".join(f"This is sentence number {i} of a long text that keeps the model busy." for i in range(40))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cache = tmp_path_factory.mktemp("serve-cache")
    # one request at a time (--max-batch 1), so that the queue tests have requests that wait;
    # the CLI's input limit, so that the byte limit is what the limit tests reach
    s = Server(["--api-key", KEY, "--max-queue", "2", "--max-batch", "1", "--max-input-chars", "32768"],
               env={"TTSCLI_CACHE": str(cache)})
    yield s
    assert s.stop() is not None


@pytest.fixture
def client():
    with httpx.Client(headers=AUTH, timeout=120) as c:
        yield c




def test_health_models_voices(server, client):
    assert client.get(server.url + "/health").json()["status"] == "ok"
    models = client.get(server.url + "/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["piper-joe"]
    assert models[0]["random_weights"] is False          # a real voice says so as plainly as a random one
    voices = client.get(server.url + "/v1/audio/voices").json()["data"]
    assert {"id": "joe", "model": "piper-joe", "kind": "preset"} in voices


def test_api_key_required(server):
    r = httpx.post(server.url + "/v1/audio/speech", json={"input": "Hi."})
    assert r.status_code == 401 and "API key" in error(r)
    r = httpx.get(server.url + "/v1/models", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401


def test_wav_equals_the_cli(server, client, run_cli, tmp_path):
    """Same text and seed: the server's samples are the CLI's samples."""
    text = "Hello from the server. A second sentence follows."
    r = speech(client, server, input=text, response_format="wav", seed=7, voice="alloy", speed=1.1,
               sample_rate=22050)
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    assert r.headers["x-sample-rate"] == "22050"
    body = r.content
    # a WAV sent whole: the header's sizes are the body's
    assert body[:4] == b"RIFF" and int.from_bytes(body[4:8], "little") == len(body) - 8
    got = np.frombuffer(body[44:], "<i2")
    p = run_cli("speak", text, "--seed", "7", "--speed", "1.1", "-o", "cli.wav")
    assert p.returncode == 0, p.err
    ref, sr = sf.read(str(tmp_path / "cli.wav"), dtype="int16")
    # same samples up to float noise between two processes
    assert sr == 22050 and len(got) == len(ref)
    d = got.astype(np.float64) - ref
    assert np.abs(d).max() <= 4 and np.linalg.norm(d) / np.linalg.norm(ref.astype(np.float64)) < 1e-3


@pytest.mark.parametrize("fmt,codec", [("mp3", "mp3"), ("flac", "flac"), ("opus", "opus"), ("aac", "aac")])
def test_compressed_formats_decode(server, client, fmt, codec):
    """Each format decodes to the same length as the WAV (give or take the codec's padding); a
    streamed FLAC's header leaves the length unknown, which PyAV reads and libsndfile does not."""
    av = pytest.importorskip("av")
    wav = speech(client, server, input="Compressed audio.", response_format="wav", seed=1)
    want = (len(wav.content) - 44) / 2 / 24000
    r = speech(client, server, input="Compressed audio.", response_format=fmt, seed=1)
    assert r.status_code == 200, r.text
    with av.open(io.BytesIO(r.content)) as c:
        s = c.streams.audio[0]
        seconds = sum(f.samples for f in c.decode(s)) / s.rate
        assert s.codec_context.codec.id == av.Codec(codec, "r").id
    assert want - 0.01 <= seconds <= want + 0.1, (seconds, want)


def test_pcm_streams_before_generation_ends(server, client):
    """Several body chunks, the first long before the last (one per sentence)."""
    text = "One short sentence. Another short sentence. And a third one here. Then a fourth."
    chunks = []
    with client.stream("POST", server.url + "/v1/audio/speech", json={"input": text, "response_format": "pcm"}) as r:
        assert r.status_code == 200
        for part in r.iter_raw():
            chunks.append((time.monotonic(), part))
    sizes = [len(c) for _, c in chunks]
    assert len(chunks) >= 3 and sum(sizes) % 2 == 0, sizes


def test_sse_events(server, client):
    text = "Events arrive one by one. As the audio is made."
    with client.stream("POST", server.url + "/v1/audio/speech",
                       json={"input": text, "response_format": "pcm", "stream_format": "sse", "seed": 3}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and kinds.count("speech.audio.delta") >= 2
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert abs(len(pcm) / 2 / events[-1]["sample_rate"] - events[-1]["duration_s"]) < 1e-3
    plain = speech(client, server, input=text, response_format="pcm", seed=3)
    assert plain.content == pcm


@pytest.mark.parametrize("body,status,needle", [
    ({"input": "Hi.", "speed": 9}, 400, "speed must be in [0.25..4], got 9"),
    ({"input": "Hi.", "speed": "fast"}, 400, "speed takes a float"),
    ({"input": "Hi.", "seed": -1}, 400, "seed must be in"),
    ({"input": "Hi.", "noise_scale": 99}, 400, "noise_scale must be in [0..10], got 99"),
    ({"input": "Hi.", "temperature": 0.5}, 400, "piper-joe has no setting temperature"),
    ({"input": "Hi.", "voice": "ryan"}, 400, "piper-joe has no voice 'ryan' (it has joe)"),
    ({"input": "Hi.", "voice": "../../etc/passwd"}, 400, "not a path"),
    ({"input": "Hi.", "response_format": "xyz"}, 400, "unknown response_format 'xyz'"),
    ({"input": "Hi.", "model": "nope"}, 404, "model 'nope' is not served here"),
    ({"input": "Hi.", "model": "qwen3-tts-0.6b-base"}, 404, "not served here"),
    ({"input": "   "}, 400, "text is empty"),
    ({"input": "a\x00b"}, 400, "control character U+0000"),
    ({"input": 5}, 400, "give it as `input`"),
    ({}, 400, "give it as `input`"),
    ({"input": "x" * 32_769}, 400, "text is 32,769 UTF-8 bytes; the limit is 32,768 bytes"),
    ({"input": "...!!!"}, 400, "nothing the voice can speak"),
    ({"input": "<speak>Hi <emphasis>there</emphasis></speak>"}, 400, "SSML element <emphasis> is not supported"),
    ({"input": "<speak>Hi <break time='1 hour'/></speak>"}, 400, "is not a duration"),
    ({"input": "Hi.", "normalize_text": "no"}, 400, "normalize_text must be true or false"),
    ({"input": "Hi.", "sentence_silence": 60}, 400, "sentence_silence must be in [0..10]"),
])
def test_bad_input_is_one_line(server, client, body, status, needle):
    r = speech(client, server, **body)
    assert r.status_code == status and needle in error(r), r.text


def test_ssml_is_detected_and_spoken(server, client):
    """Input starting with <speak> is SSML: its break is silence, its tags are not read aloud."""
    def seconds(text: str) -> float:
        r = speech(client, server, input=text, response_format="wav", seed=1)
        assert r.status_code == 200, r.text
        x, sr = sf.read(io.BytesIO(r.content))
        return len(x) / sr

    plain = seconds("Hello there. Goodbye now.")
    ssml = seconds('<speak>Hello there. <break time="1200ms"/>Goodbye now.</speak>')
    assert abs(ssml - plain - 1.2) < 0.2


@pytest.mark.slow
def test_at_the_limit_is_accepted(server, client):
    text = ("Ok. " * 8192)[:32_768]
    assert len(text.encode()) == 32_768
    # the same limit the CLI applies; generation of 8192 sentences is not the point: cancel early
    with client.stream("POST", server.url + "/v1/audio/speech", json={"input": text, "response_format": "pcm"}) as r:
        assert r.status_code == 200
        next(r.iter_raw())
    server.wait_idle(client)


@pytest.mark.parametrize("raw,ctype,status,needle", [
    (b"{not json", "application/json", 400, "not valid JSON"),
    (b"[1, 2]", "application/json", 400, "must be a JSON object"),
    (b"\xff\xfe", "application/json", 400, "not valid JSON"),
    (b"input=hi", "text/plain", 415, "application/json or multipart/form-data"),
    (b"--x\r\nbroken", "multipart/form-data; boundary=x", 415, "for requests that upload ref_audio"),
])
def test_malformed_bodies(server, client, raw, ctype, status, needle):
    r = client.post(server.url + "/v1/audio/speech", content=raw, headers={"content-type": ctype})
    assert r.status_code == status and needle in error(r), r.text


def test_body_over_the_limit(server, client):
    r = client.post(server.url + "/v1/audio/speech", content=b"{" + b" " * (17 << 20) + b"}",
                    headers={"content-type": "application/json"})
    assert r.status_code == 413 and "limit" in error(r)


def test_multipart_reference_needs_a_clone_model(server, client):
    buf = io.BytesIO()
    sf.write(buf, np.zeros(22050, np.float32), 22050, format="WAV")
    r = client.post(server.url + "/v1/audio/speech", data={"input": "Hi.", "ref_text": "Hello."},
                    files={"ref_audio": ("me.wav", buf.getvalue(), "audio/wav")})
    assert r.status_code == 400 and "piper-joe cannot clone voices" in error(r)
    # a form's fields without an upload (what any web page can post anywhere) must come as JSON
    r = client.post(server.url + "/v1/audio/speech", data={"input": "Hi.", "speed": "1.2", "seed": "4",
                                                          "response_format": "pcm"})
    assert r.status_code == 415 and "not 'application/x-www-form-urlencoded'" in error(r)


def test_unknown_route_and_method(server, client):
    assert client.get(server.url + "/v1/nothing").status_code == 404
    assert client.get(server.url + "/v1/audio/speech").status_code == 405


def test_concurrent_clients_and_a_full_queue(server, client):
    """12 requests from 6 threads against a queue of 2: some get 503 with Retry-After, and every
    request retried after it succeeds with the audio the same seed gives alone."""
    text = "Concurrent clients share one model. Each waits its turn."
    ref = speech(client, server, input=text, response_format="pcm", seed=11).content
    results, refused = [], []

    def one_client():
        with httpx.Client(headers=AUTH, timeout=300) as c:
            for _ in range(2):
                for _attempt in range(200):
                    r = c.post(server.url + "/v1/audio/speech", json={"input": text, "response_format": "pcm",
                                                                     "seed": 11})
                    if r.status_code != 503:
                        break
                    refused.append(int(r.headers["retry-after"]))
                    assert "requests waiting" in error(r)
                    time.sleep(0.2)
                results.append((r.status_code, r.content))

    threads = [threading.Thread(target=one_client) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert len(results) == 12 and all(s == 200 and body == ref for s, body in results)
    assert refused and all(x >= 1 for x in refused)
    h = server.wait_idle(client)["piper-joe"]
    assert h["refused"] >= len(refused)


@pytest.mark.slow
def test_disconnects_free_their_rows(server, client):
    """A client that leaves mid-stream, and one that leaves while queued behind it: both rows are
    freed, and the server goes on serving."""
    before = client.get(server.url + "/health").json()["models"]["piper-joe"]["cancelled"]
    with httpx.Client(headers=AUTH, timeout=120) as a:
        with a.stream("POST", server.url + "/v1/audio/speech", json={"input": LONG, "response_format": "pcm"}) as r:
            assert r.status_code == 200
            next(r.iter_raw())
            # a second client asks for a whole WAV (sent once complete), then gives up before it is
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(server.url + "/v1/audio/speech", json={"input": LONG, "response_format": "wav"},
                           headers=AUTH, timeout=1.0)
        # leaving the `with` closes the connection mid-stream
    h = server.wait_idle(client)["piper-joe"]
    assert h["cancelled"] >= before + 2
    r = speech(client, server, input="Still here.", response_format="wav")
    assert r.status_code == 200


def test_openai_client(server):
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    r = c.audio.speech.create(model="tts-1", voice="alloy", input="The OpenAI client works.", response_format="wav")
    x, sr = sf.read(io.BytesIO(r.content), dtype="float32")
    assert sr == 24000 and len(x) > sr // 2   # OpenAI's rate
    with pytest.raises(openai.BadRequestError) as e:
        c.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", speed=5.0)
    assert "speed" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        c.audio.speech.create(model="no-such-model", voice="alloy", input="Hi.")
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.audio.speech.create(model="tts-1", voice="alloy", input="Hi.")

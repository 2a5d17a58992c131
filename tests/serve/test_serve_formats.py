"""Response formats of /v1/audio/speech, through the ASGI app with a stand-in pipeline that makes
a tone in several chunks and holds its second chunk until the client has bytes: every format
streams from the first chunk, a whole WAV has true sizes, audio comes at 24 kHz unless the
request's sample_rate says otherwise."""
from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
import threading
import wave
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from ttscli.models.base import Pipeline

pytest.importorskip("fastapi")
av = pytest.importorskip("av")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import only_line

MODEL_RATE = 22050
CHUNK_S, N_CHUNKS = 0.4, 3
DURATION = CHUNK_S * N_CHUNKS
GATE_S = 10.0        # how long the pipeline holds its second chunk for the client's first bytes
WAIT_S = 60.0        # bounds a whole exchange, so a broken server fails instead of hanging
PADDING_S = 0.1      # codec delay and frame padding a decoder may keep (MP3's, AAC's)


def tone(i: int) -> np.ndarray:
    t = (np.arange(int(CHUNK_S * MODEL_RATE)) + i * CHUNK_S * MODEL_RATE) / MODEL_RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


class Pipe(Pipeline):
    sample_rate, ref_sample_rate = MODEL_RATE, None


class Gated:
    """Yields N_CHUNKS chunks; the second waits for ``go`` (set when the client has bytes).
    ``done`` is set once the last chunk is made."""

    def __init__(self):
        self.go, self.done = threading.Event(), threading.Event()

    def run(self, pipeline, request):
        self.go.clear()
        self.done.clear()
        for i in range(N_CHUNKS):
            if i == 1:
                self.go.wait(GATE_S)
            yield tone(i)
        self.done.set()


@pytest.fixture(scope="module")
def served():
    from ttscli.models import family_of
    from ttscli.registry import load_registry
    from ttscli.serve.app import ServeConfig, create_app
    from ttscli.serve.worker import ModelWorker

    reg = load_registry([])
    spec = reg.resolve("piper-joe")
    gate = Gated()
    worker = ModelWorker(spec.id, Pipe, gate.run, 4)
    worker.start()
    try:
        cfg = ServeConfig(workers={spec.id: worker}, specs={spec.id: spec}, registry=reg,
                          families={spec.id: family_of(spec)})
        yield create_app(cfg), gate
    finally:
        worker.stop()


class Exchange:
    """One request to the app: status, headers, body parts, and whether the first non-empty part
    was sent before the pipeline had made its last chunk."""

    def __init__(self):
        self.status, self.headers, self.parts = None, {}, []
        self.early = None


async def _post(app, gate: Gated, body: dict) -> Exchange:
    raw = json.dumps(body).encode()
    ex, sent = Exchange(), False
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/audio/speech", "raw_path": b"/v1/audio/speech", "query_string": b"",
             "root_path": "", "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                                          (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()      # the client stays connected

    async def send(message):
        if message["type"] == "http.response.start":
            ex.status = message["status"]
            ex.headers = {k.decode().lower(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body" and message.get("body"):
            if ex.early is None:
                ex.early = not gate.done.is_set()
                gate.go.set()
            ex.parts.append(message["body"])

    await asyncio.wait_for(app(scope, receive, send), WAIT_S)
    return ex


def post(served, **body) -> Exchange:
    app, gate = served
    return asyncio.run(_post(app, gate, {"input": "A tone.", **body}))


def decoded_seconds(data: bytes) -> tuple[float, int]:
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.audio[0]
        n = sum(f.samples for f in c.decode(s))
        return n / s.rate, s.rate


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_compressed_formats_stream_from_the_first_chunk(served, fmt):
    # FLAC, like WAV, is sent whole unless the request asks for a stream (its header's length)
    ex = post(served, response_format=fmt, **({"stream": True} if fmt == "flac" else {}))
    assert ex.status == 200, b"".join(ex.parts)
    assert ex.early, "the first bytes waited for the end of generation"
    seconds, _ = decoded_seconds(b"".join(ex.parts))
    assert DURATION - 0.01 <= seconds <= DURATION + PADDING_S, seconds
    assert ex.headers["x-sample-rate"] == "24000"


def test_wav_sent_whole_has_true_sizes_at_24_khz(served):
    ex = post(served, response_format="wav")
    assert ex.status == 200
    body = b"".join(ex.parts)
    assert int(ex.headers["content-length"]) == len(body)
    with wave.open(io.BytesIO(body)) as w:
        assert w.getframerate() == 24000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        assert w.getnframes() == (len(body) - 44) // 2
        assert abs(w.getnframes() - DURATION * 24000) <= 2
    assert int.from_bytes(body[4:8], "little") == len(body) - 8
    assert ex.headers["x-sample-rate"] == "24000"


def test_flac_sent_whole_has_its_length_and_reads_back(served):
    """Sent whole, FLAC's header carries the sample count, so libsndfile reads it in one call (a
    streamed FLAC's unknown count is valid but soundfile.read cannot size it)."""
    ex = post(served, response_format="flac")
    assert ex.status == 200
    body = b"".join(ex.parts)
    assert int(ex.headers["content-length"]) == len(body)
    audio, rate = sf.read(io.BytesIO(body), dtype="int16")
    assert rate == 24000 and abs(len(audio) - DURATION * 24000) <= 2


def test_streamed_wav_keeps_the_open_header(served):
    ex = post(served, response_format="wav", stream=True)
    assert ex.status == 200 and ex.early
    body = b"".join(ex.parts)
    assert body[4:8] == b"\xff\xff\xff\xff" and body[40:44] == b"\xff\xff\xff\xff"
    assert abs((len(body) - 44) // 2 - DURATION * 24000) <= 2


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 48000])
def test_sample_rate_field_sets_the_pcm_rate(served, rate):
    ex = post(served, response_format="pcm", sample_rate=rate)
    assert ex.status == 200 and ex.headers["x-sample-rate"] == str(rate)
    pcm = np.frombuffer(b"".join(ex.parts), "<i2")
    assert abs(len(pcm) - DURATION * rate) <= 2
    if rate == MODEL_RATE:   # no resampling at the model's own rate
        want = np.concatenate([tone(i) for i in range(N_CHUNKS)])
        assert np.abs(pcm / 32767.0 - want).max() < 1e-4


def test_resampled_chunks_join_without_seams(served):
    """The streamed 24 kHz tone equals one resampling of the whole signal (soxr keeps its state
    between chunks): no clicks at the chunk joins."""
    import soxr

    ex = post(served, response_format="pcm")
    got = np.frombuffer(b"".join(ex.parts), "<i2") / 32767.0
    whole = soxr.resample(np.concatenate([tone(i) for i in range(N_CHUNKS)]), MODEL_RATE, 24000, quality="HQ")
    assert len(got) == len(whole) and np.abs(got - whole).max() < 1e-3


def test_sse_deltas_carry_the_whole_resampled_audio(served):
    ex = post(served, response_format="pcm", stream_format="sse", sample_rate=16000)
    events = [json.loads(line[6:]) for line in b"".join(ex.parts).decode().splitlines() if line.startswith("data: ")]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    done = events[-1]
    assert done["type"] == "speech.audio.done" and done["sample_rate"] == 16000
    assert abs(len(pcm) / 2 / 16000 - done["duration_s"]) < 1e-3
    assert abs(len(pcm) / 2 - DURATION * 16000) <= 2


@pytest.mark.parametrize("field,value,needle", [
    ("sample_rate", 7999, "sample_rate must be in [8000..48000], got 7999"),
    ("sample_rate", 96000, "sample_rate must be in [8000..48000], got 96000"),
    ("sample_rate", 22050.5, "sample_rate takes an int"),
    ("sample_rate", "fast", "sample_rate takes an int"),
    ("stream", "yes", "stream must be true or false"),
])
def test_bad_rate_or_stream_is_one_line_400(served, field, value, needle):
    ex = post(served, response_format="pcm", **{field: value})
    assert ex.status == 400
    err = json.loads(b"".join(ex.parts))["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert needle in only_line(err["message"])

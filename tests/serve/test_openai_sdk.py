"""`ttscli serve` (the embedded Piper voice) driven by the official `openai` SDK as OpenAI's docs use
it, and by the request shapes Kokoro-FastAPI's clients send, through a real server subprocess."""
from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai")
av = pytest.importorskip("av")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servertools import Server

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
CONTAINERS = {"mp3": "mp3", "opus": "ogg", "aac": "aac", "flac": "flac", "wav": "wav"}
TEXT = "Today is a wonderful day to build something people love!"
# what Kokoro-FastAPI's own web page and clients post (its OpenAISpeechRequest fields)
KOKORO_BODY = {"download_format": "mp3", "stream": True, "return_download_link": False, "lang_code": "a",
               "volume_multiplier": 1.0,
               "normalization_options": {"normalize": True, "unit_normalization": False, "url_normalization": True}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server([], env={"TTSCLI_CACHE": str(tmp_path_factory.mktemp("sdk-cache"))})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def decode(data: bytes, fmt: str) -> tuple[np.ndarray, int]:
    """Mono float samples and their rate, decoded by FFmpeg (PyAV); pcm is OpenAI's 24 kHz s16le."""
    if fmt == "pcm":
        return np.frombuffer(data, "<i2") / 32768.0, 24000
    with av.open(io.BytesIO(data), format=CONTAINERS[fmt]) as box:
        rate = box.streams.audio[0].rate
        frames = [f.to_ndarray().reshape(-1) for f in box.decode(audio=0)]
    x = np.concatenate(frames).astype(np.float64)
    return (x / 32768.0 if np.issubdtype(frames[0].dtype, np.integer) else x), rate


def seconds(data: bytes, fmt: str) -> float:
    x, rate = decode(data, fmt)
    assert np.abs(x).max() > 0.01, "silence"
    return len(x) / rate


def sse_events(body: str) -> list[dict]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


@pytest.fixture(scope="module")
def reference_seconds(client):
    """The length of TEXT (seed 1) as exact samples: pcm, nothing added by a codec."""
    audio = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm",
                                       extra_body={"seed": 1})
    return len(audio.content) / 2 / 24000


@pytest.mark.parametrize("fmt", FORMATS)
def test_create_every_response_format(client, fmt, reference_seconds):
    """OpenAI's quickstart request in each format; `voice` alloy (not a Piper voice) is reported ignored."""
    raw = client.audio.speech.with_raw_response.create(model="tts-1", voice="alloy", input=TEXT,
                                                       response_format=fmt, extra_body={"seed": 1})
    assert raw.headers["x-ignored-fields"] == "voice"
    # codecs pad (encoder delay, frame size): the length agrees within a few frames
    assert seconds(raw.content, fmt) == pytest.approx(reference_seconds, abs=0.12)


def test_streaming_response_to_file_and_iter_bytes(client, tmp_path, reference_seconds):
    """The docs' streaming form: with_streaming_response + stream_to_file, and iter_bytes."""
    out = tmp_path / "speech.mp3"
    with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="coral", input=TEXT,
            instructions="Speak in a cheerful and positive tone.", extra_body={"seed": 1}) as response:
        assert response.headers["x-ignored-fields"] == "instructions, voice"
        response.stream_to_file(out)
    assert seconds(out.read_bytes(), "mp3") == pytest.approx(reference_seconds, abs=0.12)
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT, response_format="pcm", extra_body={"seed": 1}) as response:
        pcm = b"".join(response.iter_bytes(4096))
    assert len(pcm) / 2 / 24000 == reference_seconds


@pytest.mark.parametrize("fmt", [None, *FORMATS])
def test_sse_in_every_format(client, fmt, reference_seconds):
    """stream_format="sse": the deltas joined are a file of the response_format (mp3 when not given)."""
    extra = {} if fmt is None else {"response_format": fmt}
    with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="coral", input=TEXT, stream_format="sse", extra_body={"seed": 1},
            **extra) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response.read().decode())
    assert events[-1]["type"] == "speech.audio.done" and {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
    assert events[-1]["duration_s"] == pytest.approx(reference_seconds, abs=1e-3)
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert seconds(audio, fmt or "mp3") == pytest.approx(reference_seconds, abs=0.12)


def test_speed(client, reference_seconds):
    fast = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm", speed=2.0,
                                      extra_body={"seed": 1})
    assert len(fast.content) / 2 / 24000 < 0.7 * reference_seconds


def test_models_list_and_retrieve(client):
    listed = client.models.list().data
    assert [m.id for m in listed] == ["piper-joe"]
    joe = client.models.retrieve("piper-joe")
    assert joe.id == "piper-joe" and joe.owned_by == "ttscli"
    assert joe.model_dump()["honours"] == ["language", "speed", "stream", "voice"]
    assert "noise_scale" in joe.model_dump()["settings"]
    # OpenAI's model names stand for the default model, under the name asked
    tts1 = client.models.retrieve("tts-1")
    assert tts1.id == "tts-1" and tts1.model_dump()["root"] == "piper-joe"
    with pytest.raises(openai.NotFoundError, match="model 'nope' is not served here"):
        client.models.retrieve("nope")


@pytest.mark.parametrize("extra,needle", [
    ({"noise_scale": 99}, "noise_scale must be in [0..10], got 99"),
    ({"temperature": 0.5}, "piper-joe has no setting temperature (its knobs: noise_scale, noise_w,"),
    ({"max_frames": 10}, "piper-joe cannot honour `max_frames`; drop it (see GET /v1/models/piper-joe)"),
    ({"language": "klingon"}, "piper-joe does not speak `language` 'klingon'"),
])
def test_errors_name_request_fields(client, extra, needle):
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", extra_body=extra)
    message = err.value.body["message"]
    assert needle in message and "--" not in message, message


def test_kokoro_fastapi_request(client, reference_seconds):
    """Kokoro-FastAPI's whole request shape: `stream` honoured (a streamed body), `lang_code` a read
    as en-us, `download_format` equal to the response's, `normalization_options` reported ignored."""
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="", input=TEXT, response_format="mp3",
            extra_body={**KOKORO_BODY, "seed": 1}) as response:
        assert response.headers["x-ignored-fields"] == "normalization_options"
        assert "content-length" not in response.headers   # streamed as made
        audio = response.read()
    assert seconds(audio, "mp3") == pytest.approx(reference_seconds, abs=0.12)


def test_kokoro_volume_multiplier_scales_the_samples(client):
    base = {"model": "tts-1", "voice": "", "input": TEXT, "response_format": "pcm"}
    one = np.frombuffer(client.audio.speech.create(**base, extra_body={"seed": 1}).content, "<i2")
    half = np.frombuffer(client.audio.speech.create(**base, extra_body={"seed": 1, "volume_multiplier": 0.5})
                         .content, "<i2")
    assert len(one) == len(half) and np.abs(one).max() > 1000
    assert np.abs(half - one / 2).max() <= 1


def test_kokoro_download_format_other_than_the_response_is_ignored(client):
    raw = client.audio.speech.with_raw_response.create(model="tts-1", voice="", input="Hi.", response_format="mp3",
                                                       extra_body={"download_format": "wav"})
    assert raw.headers["x-ignored-fields"] == "download_format" and seconds(raw.content, "mp3") > 0.2


@pytest.mark.parametrize("extra,needle", [
    ({"return_download_link": True}, "return_download_link: this server keeps no files to download"),
    ({"return_download_link": "yes"}, "return_download_link must be true or false"),
    ({"lang_code": "b"}, "piper-joe does not speak lang_code 'b' (en-gb); it takes en-us"),
    ({"lang_code": "q"}, "lang_code must be one of a, b, e"),
    ({"lang_code": "a", "language": "ja"}, "lang_code 'a' means en-us, but language is 'ja'"),
    ({"download_format": "ogg"}, "download_format must be one of mp3, opus, aac, flac, wav, pcm"),
    ({"volume_multiplier": 50}, "volume_multiplier must be in [0..10], got 50"),
    ({"normalization_options": {"normalize": "yes"}}, "normalization_options.normalize must be true or false"),
    ({"normalization_options": {"shout": True}}, "normalization_options has no switch 'shout'"),
    ({"stream": "yes"}, "stream must be true or false"),
])
def test_kokoro_fields_refused_with_one_line(client, extra, needle):
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model="tts-1", voice="", input="Hi.", extra_body=extra)
    assert needle in err.value.body["message"], err.value.body


def test_strict_server_refuses_what_it_would_ignore(tmp_path):
    s = Server(["--strict"], env={"TTSCLI_CACHE": str(tmp_path)})
    try:
        with openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120) as c:
            with pytest.raises(openai.BadRequestError, match="cannot honour `instructions`.*--strict"):
                c.audio.speech.create(model="gpt-4o-mini-tts", voice="", input="Hi.", instructions="Cheerful.")
            with pytest.raises(openai.BadRequestError, match=r"cannot honour `voice` 'alloy' \(an OpenAI voice\)"):
                c.audio.speech.create(model="tts-1", voice="alloy", input="Hi.")
            raw = c.audio.speech.with_raw_response.create(model="tts-1", voice="joe", input="Hi.")
            assert "x-ignored-fields" not in raw.headers and seconds(raw.content, "mp3") > 0.2
    finally:
        s.stop()

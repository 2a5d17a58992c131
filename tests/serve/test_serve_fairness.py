"""`ttscli serve` bounds each request: the length of its input, the time it may generate, and
its share of the model (a long request does not hold the model while a short one waits).
Real servers with the embedded voice on 127.0.0.1."""
from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servertools import Server, error, speech

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Speech synthesis on a small machine takes patience.",
             "Every request waits its turn for the model.", "Is this the right way to the station?"]


def long_text(chars: int) -> str:
    """Whole sentences up to ``chars`` characters."""
    out, i = "", 0
    while len(out) + 1 + len(SENTENCES[i % 4]) <= chars:
        out += (" " if out else "") + SENTENCES[i % 4]
        i += 1
    return out


LONG = long_text(4000)       # ~90 sentences: over a minute of work on a small CPU


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server([], env={"TTSCLI_CACHE": str(tmp_path_factory.mktemp("serve-cache"))})
    yield s
    assert s.stop() is not None


@pytest.fixture
def client():
    with httpx.Client(timeout=120) as c:
        yield c




def test_input_over_the_limit_is_refused_before_it_is_queued(server, client):
    r = speech(client, server, input="a" * 4097)
    assert r.status_code == 400
    assert error(r) == "input is 4,097 characters; this server takes at most 4,096 (ttscli serve --max-input-chars)"
    with client.stream("POST", server.url + "/v1/audio/speech",
                       json={"input": "Ok. " * 1024, "response_format": "pcm"}) as r:  # 4,096: at the limit
        assert r.status_code == 200
        next(r.iter_raw())
    h = server.wait_idle(client)["piper-joe"]
    assert h["refused"] == 0 and h["failed"] == 0


def prefix(client, server, body: dict, n: int) -> bytes:
    """The first ``n`` bytes of a streamed response (then the connection is dropped)."""
    got = b""
    with client.stream("POST", server.url + "/v1/audio/speech", json=body) as r:
        assert r.status_code == 200
        for part in r.iter_raw():
            got += part
            if len(got) >= n:
                break
    return got[:n]


def test_a_short_request_is_not_stuck_behind_a_long_one(server, client):
    """While a ~4,000-character request streams, "Hi." is answered in full, long before the long
    one ends; and taking turns changes neither request's audio."""
    long_body = {"input": LONG, "response_format": "pcm", "seed": 5}
    short_body = {"input": "Hi.", "response_format": "pcm", "seed": 6}
    events, long_audio = [], bytearray()
    first = threading.Event()
    stop = threading.Event()

    def read_long():
        with httpx.Client(timeout=300) as c, c.stream("POST", server.url + "/v1/audio/speech", json=long_body) as r:
            assert r.status_code == 200
            for part in r.iter_raw():
                long_audio.extend(part)
                first.set()
                if stop.is_set():
                    events.append("long left")
                    return
            events.append("long done")

    t = threading.Thread(target=read_long, daemon=True)
    t.start()
    assert first.wait(120), "the long request sent nothing"
    short = speech(client, server, **short_body)
    events.append("short done")
    stop.set()
    t.join(300)
    assert short.status_code == 200 and len(short.content) > 0
    assert events[0] == "short done", events
    # the same seeds alone give the same samples: interleaved generations share no state
    assert speech(client, server, **short_body).content == short.content
    n = len(long_audio)
    assert prefix(client, server, long_body, n) == bytes(long_audio)
    h = server.wait_idle(client)["piper-joe"]
    assert h["failed"] == 0 and h["timed_out"] == 0


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory):
    s = Server(["--request-timeout", "2"], env={"TTSCLI_CACHE": str(tmp_path_factory.mktemp("serve-cache"))})
    yield s
    assert s.stop() is not None


def test_request_timeout_is_a_clean_error(strict_server, client):
    """Past --request-timeout the request stops: 504 if no audio was sent yet, else the stream
    ends without its terminating chunk (never a short file that looks complete)."""
    url = strict_server.url + "/v1/audio/speech"
    with client.stream("POST", url, json={"input": LONG, "response_format": "pcm"}) as r:
        if r.status_code == 200:
            with pytest.raises(httpx.RemoteProtocolError):
                for _ in r.iter_raw():
                    pass
        else:
            r.read()
            assert r.status_code == 504 and "--request-timeout" in error(r)
    with client.stream("POST", url, json={"input": LONG, "response_format": "pcm", "stream_format": "sse"}) as r:
        if r.status_code == 200:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
            assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == 504, events[-1]
            assert "--request-timeout" in events[-1]["error"]["message"]
        else:
            r.read()
            assert r.status_code == 504 and "--request-timeout" in error(r)
    h = strict_server.wait_idle(client)["piper-joe"]
    assert h["timed_out"] == 2 and h["served"] == 0
    r = client.post(url, json={"input": "Still here.", "response_format": "wav"})
    assert r.status_code == 200 and r.content[:4] == b"RIFF"

"""`ttscli serve`'s WebSocket stream (/v1/audio/speech/stream) with the embedded voice, through a
real WebSocket client on 127.0.0.1: text deltas in, audio, words and control messages out."""
from __future__ import annotations

import json
import re
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("wsproto")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servertools import Server, WebSocket, error_message

KEY = "ws-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
PATH = "/v1/audio/speech/stream"
IDLE_S = 2.0
RATE = 22050            # the embedded voice's own rate: the stream's PCM is its samples, not resampled
FIRST = "The first sentence is spoken while the rest is still on its way."
REST = " Then a second one follows, a little later. And a third ends the stream."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cache = tmp_path_factory.mktemp("serve-cache")
    s = Server(["--api-key", KEY, "--ws-idle-timeout", IDLE_S], env={"TTSCLI_CACHE": str(cache)})
    yield s
    assert s.stop() is not None


def connect(server, headers=AUTH, **start) -> WebSocket:
    ws = WebSocket(server.url, PATH, headers, timeout=60)
    assert ws.refused is None, ws.refused
    if start:
        ws.send_json({"type": "start", **start})
    return ws


def tokens(text: str) -> list[str]:
    return re.findall(r"\s*\S+", text)


def pcm_of(messages) -> np.ndarray:
    return np.frombuffer(b"".join(m for m in messages if isinstance(m, bytes)), "<i2")


def until(ws: WebSocket, kind: str) -> list:
    """Messages up to the first JSON message of this type (or the close)."""
    out = [ws.receive()]
    while not (isinstance(out[-1], tuple) or isinstance(out[-1], dict) and out[-1]["type"] == kind):
        out.append(ws.receive())
    assert isinstance(out[-1], dict), out
    return out


def failed(messages, status: int, close: int) -> str:
    """The one error message of a stream that ended with it, then the close code asked."""
    (err,), (kind, code, _) = [m for m in messages if isinstance(m, dict)], messages[-1]
    assert err["type"] == "error" and kind == "close" and code == close, messages
    return error_message(status, json.dumps({"error": err["error"]}).encode())


def test_deltas_in_audio_out_equals_the_library(server):
    """Audio of the first sentence arrives before the rest of the text is sent, and the whole
    stream's PCM is what ttscli.synthesize_stream gives for the same deltas."""
    import ttscli
    from ttscli.encode import to_int16

    deltas = tokens(FIRST + REST)
    n_first = len(tokens(FIRST))
    ws = connect(server, seed=5, sample_rate=RATE)
    for tok in deltas[:n_first + 1]:     # the sentence and the next token, which shows that it ended
        ws.send_json({"type": "text", "text": tok})
    first = ws.receive()
    assert isinstance(first, bytes) and len(first) > RATE // 2, first   # over 0.25 s of the first sentence
    for tok in deltas[n_first + 1:]:
        ws.send_json({"type": "text", "text": tok})
    ws.send_json({"type": "end"})
    messages = [first, *ws.until_close()]
    done = messages[-2]
    assert done["type"] == "done" and messages[-1][:2] == ("close", 1000), messages[-2:]
    assert done["usage"] == {"input_characters": len(FIRST + REST), "sentences": 3}
    got = pcm_of(messages)
    assert abs(len(got) / RATE - done["duration_s"]) < 1e-3 and done["sample_rate"] == RATE

    pipe = ttscli.load("piper-joe")
    ref = to_int16(np.concatenate(list(ttscli.synthesize_stream(pipe, iter(deltas), ttscli.Request("", seed=5)))))
    assert len(got) == len(ref)
    d = got.astype(np.float64) - ref
    assert np.abs(d).max() <= 4 and np.linalg.norm(d) / np.linalg.norm(ref.astype(np.float64)) < 1e-3


def test_flush_speaks_an_unfinished_sentence_with_words(server):
    """A flush speaks text with no sentence end yet, with its words, and says when its audio is out."""
    ws = connect(server, sample_rate=RATE, return_timestamps=True)
    for tok in tokens("Hello there from a sentence without its end"):
        ws.send_json({"type": "text", "text": tok})
    ws.send_json({"type": "flush"})
    before = until(ws, "flushed")
    words = [w for m in before if isinstance(m, dict) and m["type"] == "words" for w in m["words"]]
    assert [w["word"] for w in words] == "Hello there from a sentence without its end".split()
    flushed_s = len(pcm_of(before)) / RATE
    assert abs(before[-1]["duration_s"] - flushed_s) < 1e-3
    assert all(0 <= w["start"] < w["end"] <= flushed_s + 1e-3 for w in words)
    ws.send_json({"type": "text", "text": "And more."})
    ws.send_json({"type": "end"})
    after = ws.until_close()
    later = [w for m in after if isinstance(m, dict) and m["type"] == "words" for w in m["words"]]
    # the next sentence's words are timed from the stream's start, after the flushed audio
    assert [w["word"] for w in later] == ["And", "more."] and later[0]["start"] >= flushed_s - 1e-3
    assert after[-2]["usage"]["sentences"] == 2 and after[-1][:2] == ("close", 1000)


@pytest.mark.parametrize("messages,status,close,needle", [
    (["{not json"], 400, 1008, "not valid JSON"),
    ([{"type": "text", "text": "Hi."}], 400, 1008, 'first message must be {"type": "start"'),
    ([{"type": "start"}, {"type": "shout", "text": "Hi."}], 400, 1008, "unknown message type 'shout'"),
    ([{"type": "start"}, {"type": "start"}], 400, 1008, 'one "start" message'),
    ([{"type": "start"}, {"type": "text", "text": 5}], 400, 1008, '"text" (a string)'),
    ([{"type": "start", "speed": 9}], 400, 1008, "speed must be in [0.25..4]"),
    ([{"type": "start", "input": "Hi."}], 400, 1008, "`input` has no place"),
    ([{"type": "start", "model": "nope"}], 404, 1008, "is not served here"),
    ([{"type": "start"}, {"type": "end"}], 400, 1008, "streamed text is empty"),
    ([{"type": "start"}, b"\x00\x01"], 400, 1008, "send JSON text messages"),
    ([{"type": "start"}, {"type": "text", "text": "a" * (70 << 10)}], 413, 1009, "the limit is 65,536 bytes"),
])
def test_bad_input_is_one_error_then_close(server, messages, status, close, needle):
    ws = connect(server)
    for m in messages:
        if isinstance(m, bytes):
            ws.send_bytes(m)
        elif isinstance(m, str):
            ws.send_text(m)
        else:
            ws.send_json(m)
    assert needle in failed(ws.until_close(), status, close)


def test_a_message_past_the_protocol_bound_is_not_read(server):
    """Far over the limit, the protocol closes the socket (1009) before the message is buffered."""
    ws = connect(server, sample_rate=RATE)
    ws.send_json({"type": "text", "text": "a" * (300 << 10)})
    end = ws.until_close()
    assert end[-1][:2] == ("close", 1009), end


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_handshake_without_the_key_refused(server, headers):
    """A missing or wrong key gets the HTTP routes' 401 before the socket opens."""
    ws = WebSocket(server.url, PATH, headers)
    assert ws.refused is not None and ws.refused[0] == 401
    assert "API key" in error_message(401, ws.refused[1])


def test_origin_checked_on_the_handshake(server):
    """A page of the server's own origin streams; another site's page (browsers apply no CORS to
    WebSockets) gets the HTTP routes' 403 before the socket opens."""
    ws = connect(server, {**AUTH, "Origin": server.url}, sample_rate=RATE)
    ws.send_json({"type": "text", "text": "Yes."})
    ws.send_json({"type": "end"})
    assert ws.until_close()[-1][:2] == ("close", 1000)
    ws = WebSocket(server.url, PATH, {**AUTH, "Origin": "http://evil.example"})
    assert ws.refused is not None and ws.refused[0] == 403
    assert "cross-origin request from 'http://evil.example'" in error_message(403, ws.refused[1])


def test_idle_client_closed_at_its_deadline(server):
    """A client that sends nothing is told so and closed once --ws-idle-timeout has passed."""
    ws = connect(server, sample_rate=RATE)
    t0 = time.monotonic()
    msg = failed(ws.until_close(), 408, 1008)
    assert "no message for 2 s" in msg and time.monotonic() - t0 >= IDLE_S * 0.9


def test_disconnect_stops_synthesis_and_frees_the_connection(server):
    """A client that leaves mid-stream stops its sentence, no later sentence is spoken, and its
    connection no longer counts against --max-connections."""
    with httpx.Client(headers=AUTH, timeout=60) as client:
        def health():
            return client.get(server.url + "/health").json()

        before = health()
        ws = connect(server, sample_rate=RATE)
        assert health()["connections"]["open"] == before["connections"]["open"] + 1
        text = " ".join(f"This is sentence number {i} of a long stream." for i in range(30))
        ws.send_json({"type": "text", "text": text})
        ws.send_json({"type": "end"})
        assert isinstance(ws.receive(), bytes)
        ws.sock.shutdown(socket.SHUT_RDWR)
        ws.close()
        models = server.wait_idle(client)["piper-joe"]
        spoken = models["served"] - before["models"]["piper-joe"]["served"]
        assert spoken < 30, models   # this stream's 30 sentences: those after the disconnect were never spoken
        deadline = time.monotonic() + 10
        while health()["connections"]["open"] != before["connections"]["open"]:
            assert time.monotonic() < deadline, health()["connections"]
            time.sleep(0.1)

"""`ttscli serve`'s HTTP layer against a real server on 127.0.0.1: every read bounded in time, a cap
on open connections, the Host and Origin checks, 4xx (not 5xx) for bad requests, error bodies that
repeat little of a client's input and none of the server's folders, /health and the API key."""
from __future__ import annotations

import io
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ttscli.models.base import Pipeline
from ttscli.serve.protocol import FRESH_S
import soundfile as sf

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import only_line
from servertools import Server, error_message, raw_exchange

KEY = "file-key-456"
AUTH = {"Authorization": f"Bearer {KEY}"}
APP = "http://app.example"          # the server's --cors-origin
MAX_CONNECTIONS = 16
HEADER_TIMEOUT, BODY_TIMEOUT, KEEP_ALIVE = 1, 2, 1
WAIT = 30.0                         # how long a test waits for the server to act before it fails


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-http")
    (d / "key.txt").write_text(f"  {KEY}\n")
    s = Server(["--api-key-file", d / "key.txt", "--header-timeout", HEADER_TIMEOUT, "--body-timeout", BODY_TIMEOUT,
                "--keep-alive-timeout", KEEP_ALIVE, "--max-connections", MAX_CONNECTIONS,
                "--allowed-host", "tts.example", "--cors-origin", APP], env={"TTSCLI_CACHE": str(d / "cache")})
    yield s
    s.stop()
    assert not [line for line in s.lines if "Traceback" in line], s.lines


def address(server) -> tuple[str, int]:
    host, port = server.url.rsplit("/", 1)[-1].rsplit(":", 1)
    return host, int(port)


def request_bytes(server, method: str, path: str, headers: dict | None = None, body: bytes = b"") -> bytes:
    """A request as it goes on the wire (with the key; Content-Length from the body unless given)."""
    host, port = address(server)
    headers = {"Host": f"{host}:{port}", "Authorization": f"Bearer {KEY}", **(headers or {})}
    if "Transfer-Encoding" not in headers:
        headers.setdefault("Content-Length", str(len(body)))
    head = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def connections(server) -> dict:
    return httpx.get(server.url + "/health", headers=AUTH, timeout=WAIT).json()["connections"]


# ---- every read bounded in time; the connection cap ---------------------------------------------

class SlowClients:
    """Connections that send a request head a byte at a time and never finish it (slowloris),
    reopened as the server drops them, for as long as the flood runs."""

    def __init__(self, server, n: int):
        self.addr = address(server)
        self.line = f"GET /v1/models HTTP/1.1\r\nHost: {self.addr[0]}:{self.addr[1]}\r\n".encode()
        self.n, self.opened, self.dropped = n, 0, 0
        self.socks: list[socket.socket] = []
        self.flooding = True
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open_one(self) -> None:
        s = socket.create_connection(self.addr, timeout=WAIT)
        s.sendall(self.line)
        s.setblocking(False)
        self.socks.append(s)
        self.opened += 1

    def alive(self, s: socket.socket) -> bool:
        try:
            if s.recv(1024) == b"":
                return False
        except BlockingIOError:
            pass
        except OSError:
            return False
        try:
            s.send(b"X")  # one more byte of a header line that never ends
        except BlockingIOError:
            pass
        except OSError:
            return False
        return True

    def run(self) -> None:
        deadline = time.monotonic() + 2 * WAIT
        while time.monotonic() < deadline and (self.flooding or self.socks):
            while self.flooding and len(self.socks) < self.n:
                self.open_one()
            for s in list(self.socks):
                if not self.alive(s):
                    s.close()
                    self.socks.remove(s)
                    self.dropped += 1
            time.sleep(0.1)

    def close(self) -> None:
        for s in self.socks:
            s.close()


def get_as_a_client_does(url: str) -> tuple[int, int]:
    """GET, retrying a 503 after its Retry-After as HTTP clients (the OpenAI SDK among them) do;
    a reset connection is not retried. The final status and how many 503s came first."""
    for refusals in range(5):
        r = httpx.get(url, headers=AUTH, timeout=WAIT)
        if r.status_code != 503:
            return r.status_code, refusals
        time.sleep(float(r.headers["retry-after"]))
    return r.status_code, refusals


def test_slow_request_heads_are_dropped_while_others_are_served(server):
    """40 slowloris connections, over the cap of 16, kept up for a while: each is dropped (the
    head deadline, room made for a new connection, or a 503 while every open one is busy or just
    opened), and whole requests are served meanwhile: a client that got in is never reset."""
    before = connections(server)
    flood = SlowClients(server, 40)
    flood.thread.start()
    try:
        served = []
        for _ in range(5):
            status, _ = get_as_a_client_does(server.url + "/v1/models")
            served.append(status)
            time.sleep(0.5)
        assert served == [200] * 5
        flood.flooding = False
        flood.thread.join(2 * WAIT + 5)
        assert not flood.socks, f"{len(flood.socks)} slow connections still open"
    finally:
        flood.flooding = False
        flood.close()
    after = connections(server)
    dropped_by_server = sum(after[k] - before[k] for k in ("header_timeouts", "evicted", "refused"))
    assert flood.opened >= 40 and dropped_by_server >= flood.opened


@pytest.mark.parametrize("framing,part", [
    ({"Content-Length": "1000"}, b'{"input": "never finished'),
    ({"Transfer-Encoding": "chunked"}, b'19\r\n{"input": "never finished\r\n'),  # no last chunk
])
def test_an_unfinished_body_gets_408(server, framing, part):
    data = request_bytes(server, "POST", "/v1/audio/speech", {"Content-Type": "application/json", **framing}, part)
    got = raw_exchange(server.url, data, timeout=WAIT)
    assert got is not None, "closed without an answer"
    status, headers, body = got
    assert status == 408 and headers["connection"] == "close"
    assert "did not arrive within 2 s (--body-timeout)" in error_message(408, body)


def busy_connection(server) -> socket.socket:
    """A connection whose request is in progress: its head is read (the server has asked for the
    body with 100 Continue) and its body is still to come."""
    s = socket.create_connection(address(server), timeout=WAIT)
    s.sendall(request_bytes(server, "POST", "/v1/audio/speech", {"Expect": "100-continue", "Content-Length": "100"}))
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(1024)
        assert chunk, "closed before 100 Continue"
        got += chunk
    assert got.startswith(b"HTTP/1.1 100"), got
    return s


def test_over_the_cap_when_all_are_busy_gets_503_then_room_again(server):
    busy = [busy_connection(server) for _ in range(MAX_CONNECTIONS)]
    try:
        got = raw_exchange(server.url, request_bytes(server, "GET", "/health", {"Connection": "close"}), timeout=WAIT)
        assert got is not None
        status, headers, body = got
        assert status == 503 and headers["connection"] == "close" and headers["retry-after"] == "1"
        assert f"{MAX_CONNECTIONS} connections open" in error_message(503, body)
        for s in busy:  # each busy one ends at its body deadline
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408 "), answer
    finally:
        for s in busy:
            s.close()
    assert httpx.get(server.url + "/v1/models", headers=AUTH, timeout=WAIT).status_code == 200
    assert connections(server)["refused"] >= 1


@pytest.fixture(scope="module")
def roomy(tmp_path_factory):
    """A server with a small cap and deadlines long enough not to interfere."""
    s = Server(["--max-connections", 8, "--header-timeout", 60],
               env={"TTSCLI_CACHE": str(tmp_path_factory.mktemp("serve-roomy"))})
    yield s
    s.stop()


def closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1024) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_at_the_cap_a_slow_sender_goes_before_an_idle_connection(roomy):
    """Four connections that sent nothing, then four that sent part of a head: the request that
    needs room closes a slow sender, though the silent ones are older (they may be clients whose
    request is not read yet)."""
    quiet = [socket.create_connection(address(roomy), timeout=WAIT) for _ in range(4)]
    slow = [socket.create_connection(address(roomy), timeout=WAIT) for _ in range(4)]
    try:
        for s in slow:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        time.sleep(1.0)  # for the server to read those bytes
        assert httpx.get(roomy.url + "/health", timeout=WAIT).status_code == 200
        deadline = time.monotonic() + WAIT
        while not any(closed(s) for s in slow) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sum(closed(s) for s in slow) == 1 and not any(closed(s) for s in quiet)
        assert httpx.get(roomy.url + "/health", timeout=WAIT).json()["connections"]["evicted"] == 1
    finally:
        for s in quiet + slow:
            s.close()


def test_at_the_cap_a_just_opened_connection_is_kept_and_the_newcomer_told_to_retry(roomy):
    """Connections opened a moment ago whose request may still be on its way are not closed to make
    room: the newcomer gets 503 with Retry-After. Once they have been silent for FRESH_S, one goes."""
    deadline = time.monotonic() + WAIT
    while httpx.get(roomy.url + "/health", timeout=WAIT).json()["connections"]["open"] > 1:
        assert time.monotonic() < deadline, "earlier connections still open"
        time.sleep(0.1)
    start = time.monotonic()
    quiet = [socket.create_connection(address(roomy), timeout=WAIT) for _ in range(8)]
    try:
        got = raw_exchange(roomy.url, request_bytes(roomy, "GET", "/health", {"Connection": "close"}), timeout=WAIT)
        if time.monotonic() - start > FRESH_S / 2:
            pytest.skip("this machine took too long to open the connections for the check to mean anything")
        assert got is not None
        status, headers, body = got
        assert status == 503 and headers["retry-after"] == "1", (status, body)
        assert "just opened" in error_message(503, body)
        assert not any(closed(s) for s in quiet)
        time.sleep(FRESH_S + 0.2)
        assert httpx.get(roomy.url + "/health", timeout=WAIT).status_code == 200
        deadline = time.monotonic() + WAIT
        while not any(closed(s) for s in quiet) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sum(closed(s) for s in quiet) == 1
    finally:
        for s in quiet:
            s.close()


def test_an_idle_connection_is_closed_after_keep_alive(server):
    with socket.create_connection(address(server), timeout=WAIT) as s:
        s.sendall(request_bytes(server, "GET", "/v1/models"))
        got = b""
        while chunk := s.recv(4096):  # ends when the server closes the idle connection
            got += chunk
    assert got.startswith(b"HTTP/1.1 200") and got.count(b"HTTP/1.1") == 1


# ---- Host and Origin ----------------------------------------------------------------------------

@pytest.mark.parametrize("host,status", [
    ("rebind.evil.example", 400), ("127.0.0.1.evil.example", 400), ("evil.example@127.0.0.1", 400),
    ("localhost", 200), ("127.0.0.1", 200), ("[::1]", 200), ("tts.example", 200), ("TTS.Example.", 200),
])
def test_host_must_name_this_server(server, host, status):
    port = address(server)[1]
    r = httpx.get(server.url + "/v1/models", headers={**AUTH, "Host": f"{host}:{port}"}, timeout=WAIT)
    assert r.status_code == status
    if status == 400:
        assert "--allowed-host" in error_message(400, r.content)


def test_cross_origin_requests_are_refused(server):
    port = address(server)[1]
    body = {"input": "Hi.", "response_format": "pcm"}
    r = httpx.post(server.url + "/v1/audio/speech", json=body, headers={**AUTH, "Origin": "http://evil.example"})
    assert r.status_code == 403 and "--cors-origin" in error_message(403, r.content)
    r = httpx.get(server.url + "/v1/models", headers={**AUTH, "Origin": "http://evil.example"})
    assert r.status_code == 403
    r = httpx.post(server.url + "/v1/audio/speech", json=body, headers={**AUTH, "Origin": f"http://127.0.0.1:{port}"},
                   timeout=WAIT)
    assert r.status_code == 200 and len(r.content) > 0  # the server's own origin


def test_cors_origin_gets_preflight_and_headers(server):
    pre = {"Origin": APP, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type"}
    r = httpx.options(server.url + "/v1/audio/speech", headers=pre)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP
    assert "POST" in r.headers["access-control-allow-methods"]
    r = httpx.options(server.url + "/v1/audio/speech", headers={**pre, "Origin": "http://evil.example"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    r = httpx.post(server.url + "/v1/audio/speech", json={"input": "Hi.", "response_format": "pcm"},
                   headers={**AUTH, "Origin": APP}, timeout=WAIT)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP


def wav_bytes() -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(22050, np.float32), 22050, format="WAV")
    return buf.getvalue()


@pytest.mark.parametrize("origin,status,needle", [
    (None, 400, "piper-joe cannot clone voices"),        # not a browser: reaches the route
    ("same", 400, "piper-joe cannot clone voices"),
    (APP, 403, "cross-origin multipart/form-data posts are refused"),
    ("http://evil.example", 403, "cross-origin request from 'http://evil.example' refused"),
])
def test_reference_uploads_only_from_the_same_origin(server, origin, status, needle):
    headers = dict(AUTH)
    if origin is not None:
        headers["Origin"] = f"http://127.0.0.1:{address(server)[1]}" if origin == "same" else origin
    r = httpx.post(server.url + "/v1/audio/speech", data={"input": "Hi.", "ref_text": "Hello."},
                   files={"ref_audio": ("me.wav", wav_bytes(), "audio/wav")}, headers=headers, timeout=WAIT)
    assert r.status_code == status and needle in error_message(status, r.content)


def multipart(fields: dict, files: dict) -> tuple[bytes, str]:
    parts = [f'--b0undary\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts += [f'--b0undary\r\nContent-Disposition: form-data; name="{k}"; filename="{k}.bin"\r\n'
              f"Content-Type: application/octet-stream\r\n\r\n".encode() + v + b"\r\n" for k, v in files.items()]
    return b"".join(parts) + b"--b0undary--\r\n", "multipart/form-data; boundary=b0undary"


@pytest.mark.parametrize("body,ctype,status,needle", [
    (b"input=Hi.", "application/x-www-form-urlencoded", 415, "not 'application/x-www-form-urlencoded'"),
    (b'{"input": "Hi."}', "text/plain", 415, "not 'text/plain'"),
    (*multipart({"input": "Hi.", "speed": "1.2"}, {}), 415, "multipart/form-data is for requests that upload"),
    (*multipart({"input": "Hi."}, {"other": b"x"}), 400, "unexpected file field 'other'"),
])
def test_form_posts_without_a_reference_are_refused(server, body, ctype, status, needle):
    r = httpx.post(server.url + "/v1/audio/speech", content=body, headers={**AUTH, "Content-Type": ctype},
                   timeout=WAIT)
    assert r.status_code == status and needle in error_message(status, r.content), r.text


# ---- 4xx, never 5xx ----------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["nonexistent", "kokoro-82m", "m" * 5000, "\x00", ""])
def test_voices_of_an_unknown_model_is_404(server, model):
    r = httpx.get(server.url + "/v1/audio/voices", params={"model": model}, headers=AUTH)
    if model == "":
        assert r.status_code == 200  # no model named: every served model's voices
        return
    assert r.status_code == 404 and "is not served here" in error_message(404, r.content)


@pytest.mark.parametrize("raw,needle", [
    (b"[" * 100_000, "nested deeper than 32 levels"),
    (b'{"input": "Hi.", "x": ' + b"[" * 40 + b"]" * 40 + b"}", "nested deeper than 32 levels"),
    (b'{"input": "Hi.", "speed": NaN}', "NaN, which is not JSON"),
    (b'{"input": "Hi.", "speed": -Infinity}', "-Infinity, which is not JSON"),
    (b'{"input": "Hi.", "speed": 1e400}', "past the range of a float"),
    (b'{"input": "Hi.", "speed": ' + b"9" * 5000 + b"}", "integer of 5,000 digits"),
    (b'{"input": "Hi.", "noise_scale": ' + b"9" * 400 + b"}", "integer of 400 digits"),
    (b'{"input": "Hi.", "voice": "\\ud800"}', "lone surrogate"),
])
def test_hostile_json_is_400(server, raw, needle):
    r = httpx.post(server.url + "/v1/audio/speech", content=raw, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400 and needle in error_message(400, r.content), r.text


@pytest.mark.parametrize("field", ["voice", "model", "stream_format", "language", "x" * 100_000])
def test_error_messages_repeat_little_of_the_input(server, field):
    body = {"input": "Hi.", field: "y" * 100_000} if len(field) < 100 else {"input": "Hi.", field: 1}
    r = httpx.post(server.url + "/v1/audio/speech", json=body, headers=AUTH, timeout=WAIT)
    assert 400 <= r.status_code < 500
    msg = error_message(r.status_code, r.content)
    assert len(msg) <= 601 and "y" * 202 not in msg and "x" * 202 not in msg, len(msg)


# ---- /health, the API key -----------------------------------------------------------------------

def test_health_counters_need_the_key(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    assert httpx.get(server.url + "/health", headers={"Authorization": "Bearer wrong"}).json() == {"status": "ok"}
    full = httpx.get(server.url + "/health", headers=AUTH).json()
    assert full["models"]["piper-joe"]["queued"] == 0 and full["connections"]["max"] == MAX_CONNECTIONS


def test_401_names_the_scheme(server):
    r = httpx.get(server.url + "/v1/models")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "API key" in error_message(401, r.content)


@pytest.mark.parametrize("setup,needle", [
    ("missing", "cannot read --api-key-file"),
    ("empty", "is empty; put the key in it"),
    ("both", "give the API key one way"),
])
def test_api_key_file_errors(run_cli, tmp_path, setup, needle):
    path = tmp_path / "key.txt"
    if setup != "missing":
        path.write_text("" if setup == "empty" else "k\n")
    env = {"TTSCLI_API_KEY": "other"} if setup == "both" else None
    p = run_cli("serve", "--port", "0", "--api-key-file", path, env=env, timeout=120)
    assert p.returncode == 2 and needle in only_line(p.err), p.err


def test_api_key_help_warns_about_ps(run_cli):
    p = run_cli("serve", "--help")
    text = " ".join(p.stdout.decode().split())
    assert "`ps`" in text and "--api-key-file" in text and "TTSCLI_API_KEY" in text


# ---- error bodies name no server folder ---------------------------------------------------------

def test_error_messages_name_no_server_folder(tmp_path, monkeypatch):
    """A model failure whose message carries paths under the voices folder, the cache, the temp
    folder and elsewhere: the client sees each file's name, no folder."""
    from starlette.testclient import TestClient

    from ttscli.errors import UsageError
    from ttscli.models import family_of
    from ttscli.paths import cache_dir
    from ttscli.registry import load_registry
    from ttscli.serve.app import ServeConfig, create_app
    from ttscli.serve.worker import ModelWorker

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "my cache"))
    voices = tmp_path / "voices"
    paths = [voices / "bob.safetensors", cache_dir() / "converted" / "m" / "w.onnx",
             Path("/opt/secret models/x/weights.bin"), Path("/srv/ttscli/data/ref.wav")]
    messages = iter([f"voice file {paths[0]} is damaged", f"cannot read {paths[1]}: truncated",
                     f"missing {paths[2]}", f"cannot open '{paths[3]}'"])

    class Pipe(Pipeline):
        sample_rate, ref_sample_rate = 22050, None

    def run(pipeline, request):
        raise UsageError(next(messages))

    reg = load_registry([])
    spec = reg.resolve("piper-joe")
    worker = ModelWorker(spec.id, Pipe, run, 4)
    worker.start()
    try:
        cfg = ServeConfig(workers={spec.id: worker}, specs={spec.id: spec}, registry=reg, voices_dir=voices,
                          families={spec.id: family_of(spec)})
        with TestClient(create_app(cfg)) as client:
            got = [error_message(400, client.post("/v1/audio/speech", json={"input": "Hi."}).content)
                   for _ in paths]
    finally:
        worker.stop()
    assert got[0] == "voice file \u2026/bob.safetensors is damaged"
    assert got[1] == "cannot read \u2026/w.onnx: truncated"
    assert got[3] == "cannot open '\u2026/ref.wav'"
    for msg in got:
        assert str(tmp_path) not in msg and "/opt" not in msg and "/srv" not in msg, msg
    assert "weights.bin" in got[2]


def test_an_unexpected_exception_is_a_500_in_openai_shape(caplog):
    """A route that fails unexpectedly: 500 in OpenAI's shape naming only the exception's type; the
    traceback goes to the log, not to the client."""
    from starlette.testclient import TestClient

    from ttscli.serve.app import ServeConfig, create_app

    class Broken:
        def status(self):
            raise RuntimeError("/srv/secret/state.db is locked")

    app = create_app(ServeConfig(workers={"m": Broken()}, specs={}, registry=None))
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/health")
    assert r.status_code == 500
    assert error_message(500, r.content) == "internal error (RuntimeError); the server's log has the details"
    assert any(rec.exc_info and "state.db is locked" in str(rec.exc_info[1]) for rec in caplog.records)

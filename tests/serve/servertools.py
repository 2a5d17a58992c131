"""Start `ttscli serve` on 127.0.0.1 (a free port) for a test, and stop it (imported by name)."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import ttscli_exe

READY = re.compile(r"serving .* on (http://127\.0\.0\.1:\d+)")


class Server:
    def __init__(self, args, env=None, cwd=None, timeout=240):
        e = dict(os.environ)
        e.setdefault("HF_HUB_OFFLINE", "1")
        e.update(env or {})
        self.proc = subprocess.Popen(ttscli_exe() + ["serve", "--port", "0", *map(str, args)], env=e, cwd=cwd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = None
        ready = threading.Event()

        def read():  # keep draining stderr so the server never blocks on it
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = READY.search(line)
                if m and self.url is None:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(timeout) or self.url is None:
            self.stop()
            raise RuntimeError("the server did not start:\n" + "\n".join(self.lines))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def wait_idle(self, client, timeout=60.0) -> dict:
        """/health once nothing is queued or running (a disconnected client frees its row)."""
        deadline = time.monotonic() + timeout
        while True:
            h = client.get(self.url + "/health").json()["models"]
            if all(m["queued"] == 0 and m["active"] == 0 for m in h.values()):
                return h
            if time.monotonic() > deadline:
                raise AssertionError(f"rows still held: {h}")
            time.sleep(0.1)


def raw_exchange(url: str, data: bytes, timeout: float = 60.0, head: bool = False):
    """Send these bytes as they are (any request, well-formed or not) on a new connection and read
    one response: (status, headers, body), or None if the server closed the connection without one."""
    import h11

    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    client = h11.Connection(h11.CLIENT)  # only parses the answer: the request went out as raw bytes
    client.send(h11.Request(method="HEAD" if head else "GET", target="/", headers=[("Host", host)]))
    client.send(h11.EndOfMessage())
    status, headers, body = None, {}, bytearray()
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server answered and closed before reading it all: read that answer
        while True:
            try:
                event = client.next_event()
            except h11.RemoteProtocolError:
                return None
            if event is h11.NEED_DATA:
                try:
                    client.receive_data(s.recv(65536))
                except ConnectionResetError:
                    return None
            elif isinstance(event, h11.Response):
                status, headers = event.status_code, {k.decode().lower(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return status, headers, bytes(body)
            elif isinstance(event, h11.ConnectionClosed):
                return None


def error_message(status: int, body: bytes) -> str:
    """The message of an error response in OpenAI's shape (asserting that shape): one line."""
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["code"] == status and err["param"] is None
    assert err["type"] == ("invalid_request_error" if status < 500 else "server_error")
    msg = err["message"]
    assert isinstance(msg, str) and msg and "\n" not in msg and "Traceback" not in msg, msg
    return msg


def speech(client, server, **body):
    """POST ``body`` as JSON to the server's /v1/audio/speech."""
    return client.post(server.url + "/v1/audio/speech", json=body)


def error(r) -> str:
    """The one-line message of an httpx error response, asserting OpenAI's error shape."""
    return error_message(r.status_code, r.content)


class WebSocket:
    """A blocking WebSocket client over wsproto (what the server speaks too), for tests and
    benchmarks: ``refused`` holds (status, body) when the server declined the handshake."""

    def __init__(self, url: str, path: str, headers: dict | None = None, timeout: float = 60.0):
        from wsproto import ConnectionType, WSConnection
        from wsproto.events import AcceptConnection, RejectConnection, RejectData, Request

        host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events: list = []
        self.text: list[str] = []
        self.data: list[bytes] = []
        self.refused = None
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        self.sock.sendall(self.ws.send(Request(host=f"{host}:{port}", target=path, extra_headers=extra)))
        status, body = None, b""
        while True:
            event = self._next()
            if isinstance(event, AcceptConnection):
                return
            if isinstance(event, RejectConnection):
                status = event.status_code
                if not event.has_body:
                    break
            elif isinstance(event, RejectData):
                body += event.data
                if event.body_finished:
                    break
        self.refused = (status, body)
        self.sock.close()

    def _next(self):
        """The next wsproto event, reading the socket as needed; None once it is closed."""
        while not self.events:
            data = self.sock.recv(65536)
            self.ws.receive_data(data or None)
            self.events.extend(self.ws.events())
            if not data and not self.events:
                return None
        return self.events.pop(0)

    def send_json(self, obj) -> None:
        self.send_text(json.dumps(obj))

    def send_text(self, text: str) -> None:
        from wsproto.events import TextMessage

        self.sock.sendall(self.ws.send(TextMessage(data=text)))

    def send_bytes(self, data: bytes) -> None:
        from wsproto.events import BytesMessage

        self.sock.sendall(self.ws.send(BytesMessage(data=data)))

    def receive(self):
        """The next whole message: bytes (audio), a dict (JSON), or ("close", code, reason)."""
        from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

        while True:
            event = self._next()
            if event is None:
                return ("close", None, "connection closed without a close frame")
            if isinstance(event, Ping):
                self.sock.sendall(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                try:
                    self.sock.sendall(self.ws.send(event.response()))
                except Exception:  # noqa: BLE001 - the server may have closed the socket already
                    pass
                return ("close", event.code, event.reason)
            elif isinstance(event, TextMessage):
                self.text.append(event.data)
                if event.message_finished:
                    text, self.text = "".join(self.text), []
                    return json.loads(text)
            elif isinstance(event, BytesMessage):
                self.data.append(bytes(event.data))
                if event.message_finished:
                    data, self.data = b"".join(self.data), []
                    return data

    def until_close(self) -> list:
        """Every message up to and including the close."""
        out = []
        while True:
            out.append(self.receive())
            if isinstance(out[-1], tuple):
                return out

    def close(self) -> None:
        self.sock.close()

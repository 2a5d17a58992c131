"""The Host and Origin checks of `ttscli serve` (ttscli/serve/guard.py) for the binds and flags a
test server does not use: all addresses, a LAN address, --allowed-host *, --cors-origin *."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from ttscli.errors import UsageError
from ttscli.serve import HTTPOptions
from ttscli.serve.guard import RequestGuard, check_allowed_host, check_cors_origin


def refusal(bound: str, headers: dict, method: str = "GET", **options):
    return RequestGuard(None, bound, HTTPOptions(**options)).refusal(method, headers)


@pytest.mark.parametrize("bound,host,ok", [
    ("0.0.0.0", "192.168.1.5:8000", True),       # any address literal: no DNS name is involved
    ("0.0.0.0", "[fe80::1]:8000", True),
    ("::", "10.1.2.3", True),
    ("0.0.0.0", "tts.lan:8000", False),          # a name needs --allowed-host
    ("10.0.0.5", "10.0.0.5:8000", True),
    ("10.0.0.5", "10.0.0.6:8000", False),
    ("10.0.0.5", "127.0.0.2:8000", True),        # loopback
    ("myhost.lan", "MyHost.lan.:8000", True),
    ("127.0.0.1", "127.0.0.1:8000/x", False),
    ("127.0.0.1", "", False),
])
def test_host(bound, host, ok):
    got = refusal(bound, {"host": host})
    assert (got is None) == ok, got
    if not ok:
        assert got[0] == 400


def test_any_host_and_no_host():
    assert refusal("127.0.0.1", {"host": "whatever.example"}, allowed_hosts=("*",)) is None
    assert refusal("127.0.0.1", {}) is None  # HTTP/1.0 without Host: not a browser


def test_origin():
    local = {"host": "127.0.0.1:8000"}
    assert refusal("127.0.0.1", {**local, "origin": "http://127.0.0.1:8000"}) is None
    assert refusal("127.0.0.1", {**local, "origin": "http://127.0.0.1:8001"})[0] == 403
    assert refusal("127.0.0.1", {**local, "origin": "null"})[0] == 403
    # behind a TLS proxy that passes Host on: the page's origin is the https one
    proxied = {"host": "tts.example", "origin": "https://tts.example"}
    assert refusal("127.0.0.1", proxied, allowed_hosts=("tts.example",)) is None
    form = {**local, "origin": "http://app.example", "content-type": "multipart/form-data; boundary=x"}
    assert refusal("127.0.0.1", form, "POST", cors_origins=("*",))[0] == 403
    assert refusal("127.0.0.1", {**form, "content-type": "application/json"}, "POST", cors_origins=("*",)) is None
    assert refusal("127.0.0.1", {**form, "content-type": "application/json"}, "POST",
                   cors_origins=("http://app.example",)) is None


@pytest.mark.parametrize("value,want", [("TTS.Example.", "tts.example"), ("*", "*"), ("[::1]", "::1")])
def test_allowed_host_values(value, want):
    assert check_allowed_host(value) == want


@pytest.mark.parametrize("value", ["http://tts.example", "tts.example:8000", "a/b", ""])
def test_allowed_host_refused(value):
    with pytest.raises(UsageError, match="--allowed-host takes"):
        check_allowed_host(value)


@pytest.mark.parametrize("value,want", [("http://LOCALHOST:3000/", "http://localhost:3000"),
                                        ("https://app.example:443", "https://app.example"), ("*", "*")])
def test_cors_origin_values(value, want):
    assert check_cors_origin(value) == want


@pytest.mark.parametrize("value", ["app.example", "ftp://app.example", "http://app.example/path", "null"])
def test_cors_origin_refused(value):
    with pytest.raises(UsageError, match="--cors-origin takes"):
        check_cors_origin(value)

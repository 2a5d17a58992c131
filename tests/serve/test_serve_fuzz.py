"""Every route of `ttscli serve`, every method, with random and hostile query strings and bodies
(seeded, bounded in count and time): no answer is a 5xx, every 4xx is in OpenAI's error shape,
and the server logs no traceback. Requests go out as raw bytes, so they may be anything."""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from urllib.parse import quote_from_bytes

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servertools import Server, error_message, raw_exchange

SEED = 20240611
CASES = 600
TIME_BUDGET_S = 300.0
ROUTES = ["/health", "/v1/models", "/v1/audio/voices", "/v1/audio/speech", "/v1/nothing", "/", "/v1/audio/speech/x",
          "//v1//models", "/v1/audio/voices/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/v1/audio/%00",
          "/health?", "/v1/models#frag"]
METHODS = ["GET", "POST", "OPTIONS", "PUT", "DELETE", "HEAD", "PATCH"]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-16", "application/vnd.api+json", "text/plain",
                 "application/x-www-form-urlencoded", "multipart/form-data; boundary=zz", "multipart/form-data",
                 "multipart/form-data; boundary=", "*/*", "\x01;;=", None]
FIELDS = ["model", "input", "voice", "instructions", "response_format", "speed", "stream_format", "seed", "language",
          "max_frames", "ref_audio", "ref_text", "noise_scale", "length_scale", "temperature", "x_vector_only"]
UNICODE = "aZ9 .,!?'\"\\/{}[]<>%&=+\t\n\r\x00\x07\x1b\x7f\u00e9\u0301\u200b\u202e\ufeff\uffff\u4e2d\U0001f600\ud800"


def junk_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(UNICODE) for _ in range(rng.randint(0, n)))


def junk_value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["none", "bool", "int", "bigint", "float", "str", "str", "list", "dict"])
    if kind in ("list", "dict") and depth < 3:
        items = [junk_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return items if kind == "list" else {junk_text(rng, 8): v for v in items}
    return {"none": None, "bool": rng.random() < 0.5, "int": rng.randint(-2**40, 2**40),
            "bigint": rng.choice([2**64, -2**70, 10**19, 2**31]), "float": rng.choice([0.0, -0.0, 1e-320, 1e308, 0.25,
                                                                                     4.000001, -1.5]),
            }.get(kind, junk_text(rng, 30))


def query(rng: random.Random) -> tuple[bytes, bool]:
    """A query string; and whether it makes the request line invalid HTTP."""
    kind = rng.choice(["none", "model", "repeated", "huge", "over-head-limit", "pct-junk", "nul", "non-ascii",
                       "params"])
    pct = lambda b: quote_from_bytes(b, safe="").encode()  # noqa: E731
    if kind == "none":
        return b"", False
    if kind == "model":
        return b"?model=" + pct(junk_text(rng, 40).encode("utf-8", "surrogatepass")), False
    if kind == "repeated":
        return b"?" + b"&".join(b"model=" + rng.choice([b"piper-joe", b"kokoro-82m", b"", b"nope", b"%00"])
                                for _ in range(rng.randint(2, 50))), False
    if kind == "huge":
        return b"?model=" + b"m" * rng.choice([3000, 12000]), False
    if kind == "over-head-limit":
        return b"?model=" + b"m" * 20000, True
    if kind == "pct-junk":
        return b"?" + rng.choice([b"%", b"%%", b"%zz", b"%ff%fe", b"%00", b"%u2603", b"model=%C0%AF", b"=&=&&",
                                  b"model[]=1", b"a;b=c"]) * rng.randint(1, 20), False
    if kind == "nul":
        return b"?model=a\x00b", True
    if kind == "non-ascii":
        return b"?model=" + bytes(rng.randrange(128, 256) for _ in range(8)), True
    return b"?" + b"&".join(pct(junk_text(rng, 10).encode("utf-8", "surrogatepass")) + b"=" +
                            pct(junk_text(rng, 10).encode("utf-8", "surrogatepass")) for _ in range(rng.randint(1, 10))
                            ), False


def body(rng: random.Random) -> tuple[bytes, str | None]:
    """A body and the Content-Type it goes with (None: no Content-Type header)."""
    kind = rng.choice(["empty", "random", "deep", "numbers", "types", "unicode", "constants", "non-object",
                       "truncated", "knobs", "multipart", "form", "bad-utf8"])
    ctype = rng.choice(CONTENT_TYPES) if rng.random() < 0.3 else "application/json"
    dump = lambda obj: json.dumps(obj).encode()  # noqa: E731
    if kind == "empty":
        return b"", ctype
    if kind == "random":
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096))), ctype
    if kind == "deep":
        n = rng.choice([33, 100, 1000, 100_000])
        return rng.choice([b"[" * n, b'{"a":' * n, b'{"input": "Hi.", "speed": ' + b"[" * n + b"]" * n + b"}"]), ctype
    if kind == "numbers":
        number = rng.choice([b"1e999", b"-1e999", b"9" * 5000, b"-" + b"9" * 30, b"1" + b"0" * 400 + b".5", b"1e-999",
                             b"0.0000000000000000000000001", b"18446744073709551616"])
        return b'{"input": "Hi.", "' + rng.choice(FIELDS).encode() + b'": ' + number + b"}", ctype
    if kind == "types":
        return dump({f: junk_value(rng) for f in rng.sample(FIELDS, rng.randint(1, 6))}), ctype
    if kind == "unicode":
        return dump({"input": junk_text(rng, 40), rng.choice(FIELDS): junk_text(rng, 40)}), ctype
    if kind == "constants":
        return b'{"input": "Hi.", "' + rng.choice(FIELDS).encode() + b'": ' + rng.choice(
            [b"NaN", b"Infinity", b"-Infinity"]) + b"}", ctype
    if kind == "non-object":
        return dump(junk_value(rng)), ctype
    if kind == "truncated":
        whole = dump({"input": junk_text(rng, 20), "voice": "joe"})
        return whole[:rng.randint(0, len(whole) - 1)], ctype
    if kind == "knobs":
        return dump({"input": rng.choice(["Hi.", "A b.", "..."]), junk_text(rng, 12): junk_value(rng),
                     "response_format": rng.choice(["pcm", "wav", "mp3", "PCM", "", None, 7]),
                     "stream_format": rng.choice(["sse", "audio", "SSE", 1, None])}), ctype
    if kind == "multipart":
        parts = rng.choice([b"--zz\r\nContent-Disposition: form-data; name=\"input\"\r\n\r\nHi.\r\n--zz--\r\n",
                            b"--zz\r\nContent-Disposition: form-data; name=\"ref_audio\"; filename=\"../../x.wav\"\r\n"
                            b"\r\n" + bytes(rng.randrange(256) for _ in range(300)) + b"\r\n--zz--\r\n",
                            b"--zz\r\n\r\n\r\n--zz", b"--zz--", b"--yy\r\nbroken"])
        return parts, rng.choice(["multipart/form-data; boundary=zz", "multipart/form-data", ctype])
    if kind == "form":
        return b"input=Hi.&speed=" + rng.choice([b"1", b"nan", b"%00", b"1e400"]), rng.choice(
            ["application/x-www-form-urlencoded", "text/plain", ctype])
    return b'{"input": "\xff\xfe\xc0\xaf"}', ctype


def case(rng: random.Random, host: str) -> tuple[bytes, str, bool]:
    """One request as bytes; the method; whether it is invalid HTTP (the server may close without
    answering then)."""
    pick = rng.random()  # mostly the routes that parse what they are sent
    if pick < 0.6:
        method, route = "POST", "/v1/audio/speech"
    elif pick < 0.75:
        method, route = "GET", "/v1/audio/voices"
    else:
        method, route = rng.choice(METHODS), rng.choice(ROUTES)
    target, invalid = query(rng)
    target = route.encode() + target
    data, ctype = body(rng) if method != "GET" or rng.random() < 0.2 else (b"", None)
    headers = [b"Host: " + host.encode(), b"Connection: close"]
    if ctype is not None:
        headers.append(b"Content-Type: " + ctype.encode("latin-1"))
    if rng.random() < 0.2:
        headers.append(b"Origin: http://" + host.encode())  # the server's own pages
    if rng.random() < 0.1:
        headers.append(b"Authorization: " + rng.choice([b"Bearer", b"Bearer x", b"Basic Og==", b"bearer  \t"]))
    if rng.random() < 0.15 and data:
        size = rng.randint(1, len(data))
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        framed = b"".join(b"%x\r\n" % len(c) + c + b"\r\n" for c in chunks) + b"0\r\n\r\n"
        headers.append(b"Transfer-Encoding: chunked")
    else:
        framed = data
        headers.append(b"Content-Length: %d" % len(data))
    return method.encode() + b" " + target + b" HTTP/1.1\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + framed, method, \
        invalid


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server([], env={"TTSCLI_CACHE": str(tmp_path_factory.mktemp("serve-fuzz-cache"))})
    yield s
    s.stop()


def test_no_5xx_and_every_4xx_in_openai_shape(server):
    rng = random.Random(SEED)
    host = server.url.rsplit("/", 1)[-1]
    deadline = time.monotonic() + TIME_BUDGET_S
    bad, statuses = [], {}
    for i in range(CASES):
        if time.monotonic() > deadline:
            break
        data, method, invalid = case(rng, host)
        got = raw_exchange(server.url, data, timeout=60, head=method == "HEAD")
        where = f"case {i}: {data[:300]!r}"
        if got is None:
            if not invalid:
                bad.append(f"{where}: no answer")
            continue
        status, headers, content = got
        statuses[status] = statuses.get(status, 0) + 1
        if status >= 500:
            bad.append(f"{where}: {status} {content[:300]!r}")
        elif status >= 400 and method != "HEAD":
            try:
                msg = error_message(status, content)
                assert len(msg) <= 601, len(msg)
            except (AssertionError, ValueError, KeyError, TypeError) as e:
                bad.append(f"{where}: {status} not in OpenAI's shape ({e!r}): {content[:300]!r}")
    assert not bad, f"{len(bad)} bad answers (statuses {statuses}):\n" + "\n".join(bad[:15])
    assert sum(statuses.values()) >= 100 and any(400 <= s < 500 for s in statuses) and 200 in statuses, statuses
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    assert not [line for line in server.lines if "Traceback" in line or "Exception" in line], server.lines[-20:]

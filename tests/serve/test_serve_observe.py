"""What an operator sees of `ttscli serve`, against real servers on 127.0.0.1: one access-log line
per request on stderr (text, or one JSON object with --log-format json; never the API key or the
text), /metrics in Prometheus' text format behind the API key, and two concurrent requests to a
model that generates in batches (Chatterbox, Breeze; tiny checkpoints) stepped as rows of one
batch, as /metrics reports it."""
from __future__ import annotations

import json
import math
import re
import struct
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ttscli.models.base import Pipeline

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import only_line
from servertools import Server, error_message

KEY = "metrics-key-789"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXT = "Quiet words for the log test."
WAIT = 60.0                       # how long a test waits for the server to act before it fails
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
JSON_FIELDS = {"time", "client", "method", "path", "model", "chars", "status", "first_byte_ms", "total_ms",
               "bytes", "end"}
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\})? '
                    r'(-?[0-9.e+-]+|\+Inf|-Inf|NaN)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def start(tmp_path_factory, *flags) -> Server:
    d = tmp_path_factory.mktemp("serve-observe")
    (d / "key.txt").write_text(KEY)
    return Server(["--api-key-file", d / "key.txt", *flags], env={"TTSCLI_CACHE": str(d / "cache")})


@pytest.fixture(scope="module")
def text_server(tmp_path_factory):
    s = start(tmp_path_factory, "--access-log")
    yield s
    s.stop()
    assert not [line for line in s.lines if "Traceback" in line], s.lines


@pytest.fixture(scope="module")
def json_server(tmp_path_factory):
    s = start(tmp_path_factory, "--log-format", "json")
    yield s
    s.stop()


def log_lines(server, after: int, n: int) -> list[str]:
    """The server's stderr lines from index ``after`` once there are ``n`` of them (bounded wait)."""
    deadline = time.monotonic() + WAIT
    while len(server.lines) - after < n:
        assert time.monotonic() < deadline, server.lines[after:]
        time.sleep(0.05)
    return server.lines[after:]


def fields(line: str) -> dict:
    """A text access-log line: the leading time, client, method, path, status; then key=value."""
    stamp, client, method, path, status, *rest = line.split(" ")
    return {"time": stamp, "client": client, "method": method, "path": path, "status": status,
            **dict(kv.split("=", 1) for kv in rest)}


def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    """The samples of a text-format page, checking the format: HELP and TYPE before a family's
    samples, well-formed sample lines, and histograms whose buckets add up to their count."""
    assert text.endswith("\n")
    declared, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, kind, name, rest = line.split(" ", 3)
            if kind == "TYPE":
                assert rest in ("counter", "gauge", "histogram"), line
                declared[name] = rest
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in declared else name
        assert family in declared, f"{name} has no TYPE line before it"
        key = (name, frozenset(labels.items()))
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = value
    for (name, labels), count in samples.items():
        if declared.get(name.removesuffix("_count")) == "histogram" and name.endswith("_count"):
            base = name.removesuffix("_count")
            buckets = sorted((float(dict(k)["le"]), v) for (n, k), v in samples.items()
                             if n == base + "_bucket" and k - {("le", dict(k)["le"])} == labels)
            assert buckets and buckets[-1][0] == math.inf and buckets[-1][1] == count, (base, buckets, count)
            assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), (base, buckets)
    return samples


def value(samples: dict, name: str, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


def metrics(server) -> dict:
    r = httpx.get(server.url + "/metrics", headers=AUTH, timeout=WAIT)
    assert r.status_code == 200, r.text
    return parse_metrics(r.text)


def test_access_log_has_one_text_line_per_request(text_server):
    s, before = text_server, len(text_server.lines)
    r = httpx.post(s.url + "/v1/audio/speech", json={"input": TEXT, "response_format": "wav"}, headers=AUTH,
                   timeout=WAIT)
    assert r.status_code == 200
    missing = httpx.get(s.url + "/no/such/path%0Aforged%20line", headers=AUTH, timeout=WAIT)
    assert missing.status_code == 404
    spoke, other = log_lines(s, before, 2)
    f = fields(spoke)
    assert (f["method"], f["path"], f["status"], f["model"], f["chars"]) == (
        "POST", "/v1/audio/speech", "200", "piper-joe", str(len(TEXT)))
    assert int(f["bytes"]) == len(r.content) and f["end"] == "complete"
    assert f["client"].startswith("127.0.0.1:")
    assert 0 < float(f["first_byte_ms"]) <= float(f["total_ms"])
    g = fields(other)
    assert (g["method"], g["path"], g["status"], g["model"], g["chars"]) == (
        "GET", "/no/such/path%0Aforged%20line", "404", "-", "-")
    assert all(KEY not in line and TEXT not in line for line in s.lines)


def test_access_log_as_json_objects(json_server):
    s, before = json_server, len(json_server.lines)
    refused = httpx.post(s.url + "/v1/audio/speech", json={"input": TEXT}, timeout=WAIT)
    assert refused.status_code == 401
    r = httpx.post(s.url + "/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"}, headers=AUTH,
                   timeout=WAIT)
    assert r.status_code == 200
    first, second = (json.loads(line) for line in log_lines(s, before, 2))
    assert set(first) == set(second) == JSON_FIELDS
    assert (first["status"], first["model"], first["chars"], first["end"]) == (401, None, None, "complete")
    assert (second["status"], second["model"], second["chars"], second["bytes"], second["end"]) == (
        200, "piper-joe", len(TEXT), len(r.content), "complete")
    assert all(KEY not in line and TEXT not in line for line in s.lines)


def test_a_stream_the_client_leaves_is_logged_when_it_ends(text_server):
    s, before = text_server, len(text_server.lines)
    body = {"input": " ".join(f"Sentence number {k} goes on for a while." for k in range(60)),
            "response_format": "pcm"}
    with httpx.Client(timeout=WAIT) as c, c.stream("POST", s.url + "/v1/audio/speech", json=body, headers=AUTH) as r:
        assert r.status_code == 200
        received = len(next(r.iter_raw()))
    f = fields(log_lines(s, before, 1)[0])
    assert (f["path"], f["status"], f["end"]) == ("/v1/audio/speech", "200", "client_gone")
    assert int(f["bytes"]) >= received


def test_refused_host_is_logged_and_counted(text_server):
    s, before = text_server, len(text_server.lines)
    r = httpx.get(s.url + "/health", headers={"Host": "evil.example"}, timeout=WAIT)
    assert r.status_code == 400
    f = fields(log_lines(s, before, 1)[0])
    assert (f["method"], f["path"], f["status"], f["end"]) == ("GET", "/health", "400", "complete")
    assert value(metrics(s), "ttscli_requests_total", route="/health", model="", status="400") >= 1


def test_verbose_turns_the_access_log_on(tmp_path_factory):
    s = start(tmp_path_factory, "-v")
    try:
        before = len(s.lines)
        assert httpx.get(s.url + "/v1/models", headers=AUTH, timeout=WAIT).status_code == 200
        f = fields(log_lines(s, before, 1)[-1])
        assert (f["method"], f["path"], f["status"], f["end"]) == ("GET", "/v1/models", "200", "complete")
    finally:
        s.stop()


def test_an_unknown_log_format_is_one_line(run_cli):
    p = run_cli("serve", "--port", "0", "--log-format", "xml", timeout=120)
    assert p.returncode == 2 and "--log-format takes text or json" in only_line(p.err), p.err


def test_label_values_are_escaped_and_buckets_cumulative():
    from ttscli.serve.observe import Exposition, Histogram

    h = Histogram((1, 2, 4))
    for x in (0.5, 2, 3, 9):
        h.observe(x)
    out = Exposition()
    out.family("t_seconds", "histogram", "a test.")
    out.histogram("t_seconds", h, model='a"b\\c\nd')
    m = parse_metrics(out.text())
    label = ("model", 'a\\"b\\\\c\\nd')   # as written on the page: \" \\ \n
    assert [m[("t_seconds_bucket", frozenset({label, ("le", le)}))] for le in ("1.0", "2.0", "4.0", "+Inf")] == [
        1, 2, 3, 4]
    assert m[("t_seconds_sum", frozenset({label}))] == 14.5 and m[("t_seconds_count", frozenset({label}))] == 4


def test_metrics_need_the_key_and_count_requests(text_server):
    s = text_server
    r = httpx.get(s.url + "/metrics", timeout=WAIT)
    assert r.status_code == 401 and "API key" in error_message(401, r.content)
    got = httpx.post(s.url + "/v1/audio/speech", json={"input": TEXT, "response_format": "wav"}, headers=AUTH,
                     timeout=WAIT)
    assert got.status_code == 200
    bad = httpx.post(s.url + "/v1/audio/speech", json={"input": TEXT, "speed": 9}, headers=AUTH, timeout=WAIT)
    assert bad.status_code == 400
    httpx.get(s.url + "/nowhere-" + "x" * 50, headers=AUTH, timeout=WAIT)
    page = httpx.get(s.url + "/metrics", headers=AUTH, timeout=WAIT)
    assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
    m = parse_metrics(page.text)
    speech = {"route": "/v1/audio/speech", "model": "piper-joe"}
    assert value(m, "ttscli_requests_total", **speech, status="200") >= 1
    refused = {"route": "/v1/audio/speech", "model": ""}   # refused before it reached a model's queue
    assert value(m, "ttscli_requests_total", **refused, status="400") >= 1
    assert value(m, "ttscli_request_errors_total", **refused, kind="client_error") >= 1
    assert value(m, "ttscli_requests_total", route="/metrics", model="", status="401") >= 1
    assert value(m, "ttscli_requests_total", route="other", model="", status="404") >= 1
    assert not [k for k in m if ("route", "/nowhere-" + "x" * 50) in k[1]]
    assert value(m, "ttscli_first_audio_seconds_count", model="piper-joe") >= 1
    assert value(m, "ttscli_request_duration_seconds_count", **speech) >= 2
    assert value(m, "ttscli_jobs_total", model="piper-joe", outcome="served") >= 1
    assert value(m, "ttscli_queue_depth", model="piper-joe") == 0
    assert value(m, "ttscli_rows_in_flight", model="piper-joe") == 0
    assert value(m, "ttscli_connections_open") >= 1


ROWS = [
    pytest.param("chatterbox", FIXTURES / "chatterbox" / "tiny", 300, {}, (), id="chatterbox", marks=pytest.mark.slow),
    pytest.param("breeze-tts-2", FIXTURES / "breeze" / "tiny", 60, {}, (), id="breeze"),
    # Pocket's tiny checkpoint does stop: an EOS threshold no logit reaches keeps it going; rows
    # run on the MLX flow LM (some CPUs default to onnxruntime, one row per call)
    pytest.param("pocket-tts", FIXTURES / "pocket_tts" / "tiny", 200, {"eos_threshold": 100.0},
                 ("--backend", "flow_lm=mlx"), id="pocket"),
    # greedy: the tiny LM's sampled tokens stop within a few, its greedy ones never do; 60
    # tokens: the first streamed audio comes at 41 (a 25-token hop, 13 padding the stored
    # speaker's 12 reference tokens, 3 of lookahead)
    pytest.param("cosyvoice3-0.5b", FIXTURES / "cosyvoice3" / "tiny", 60, {"do_sample": False}, (), id="cosyvoice3"),
    # VoxCPM2's tiny checkpoint stops after a few patches: its stop head is heeded only past min_len;
    # 220 patches (48 kHz samples, 24 kHz served) outlast what the stream holds back by a tenth of a second;
    # two diffusion steps a patch keep it short
    pytest.param("voxcpm2", FIXTURES / "voxcpm2" / "tiny", 220, {"min_len": 220, "inference_timesteps": 2}, (),
                 id="voxcpm2"),
]


@pytest.mark.parametrize("model,folder,frames,knobs,args", ROWS)
def test_two_concurrent_requests_run_as_rows_of_one_batch(tmp_path_factory, model, folder, frames, knobs, args):
    """The second request is sent once /metrics shows the first one generating, with ``frames``
    frames to go, so it joins the running batch as its second row. The tiny checkpoints' random
    weights (with the family's ``knobs``) never emit the stop token, so each
    request streams its audio up to ``frames`` frames and is then cut off (the limit is an error,
    never a silent truncation): its access-log line says so."""
    s = start(tmp_path_factory, "-m", model, "--model-dir", folder, "--max-batch", "2", "--access-log", *args)
    answers: dict[int, tuple[int, int, bytes, bool]] = {}

    def send(k: int) -> None:
        body = {"input": f"Hello the world, number {k}.", "seed": k, "max_frames": frames,
                "response_format": "wav", "stream": True, "model": model, **knobs}   # a streamed WAV: audio as it comes
        data, cut = b"", False
        with httpx.Client(timeout=WAIT * 4) as c, c.stream("POST", s.url + "/v1/audio/speech", json=body,
                                                           headers=AUTH) as r:
            try:
                for part in r.iter_raw():
                    data += part
            except httpx.RemoteProtocolError:
                cut = True
            answers[k] = (r.status_code, int(r.headers.get("x-sample-rate", 0)), data, cut)

    try:
        first = threading.Thread(target=send, args=(0,))
        first.start()
        deadline = time.monotonic() + WAIT
        while value(metrics(s), "ttscli_rows_in_flight", model=model) < 1:
            assert time.monotonic() < deadline and first.is_alive(), answers
            time.sleep(0.02)
        second = threading.Thread(target=send, args=(1,))
        second.start()
        for t in (first, second):
            t.join(WAIT * 4)
            assert not t.is_alive()
        m, deadline = metrics(s), time.monotonic() + WAIT
        while value(m, "ttscli_rows_in_flight", model=model) > 0:  # the worker books a row after its client saw it end
            assert time.monotonic() < deadline, "rows still in flight"
            time.sleep(0.02)
            m = metrics(s)
    finally:
        s.stop()
    assert value(m, "ttscli_batch_rows_largest", model=model) == 2
    assert value(m, "ttscli_batch_rows_bucket", model=model, le="2.0") > value(
        m, "ttscli_batch_rows_bucket", model=model, le="1.0")
    # failed, or cancelled where the HTTP side closed the cut stream before the worker booked it
    jobs = {o: value(m, "ttscli_jobs_total", model=model, outcome=o) for o in ("served", "failed", "cancelled")}
    assert jobs["served"] == 0 and jobs["failed"] + jobs["cancelled"] == 2, jobs
    for k in (0, 1):
        status, rate, data, cut = answers[k]
        assert status == 200 and cut, (k, status, cut, data[-300:])
        check_wav_prefix(data, rate)
    logged = [fields(line) for line in s.lines if " /v1/audio/speech " in line]
    assert [(f["status"], f["model"], f["end"]) for f in logged] == [("200", model, "cut")] * 2, s.lines
    assert sorted(int(f["bytes"]) for f in logged) == sorted(len(a[2]) for a in answers.values())


def check_wav_prefix(data: bytes, rate: int) -> None:
    """A streamed 16-bit mono WAV: its header at this rate, then at least a tenth of a second of
    samples that are not all silence."""
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt ", data[:16]
    tag, channels, sample_rate, _, _, bits = struct.unpack_from("<HHIIHH", data, 20)
    assert (tag, channels, sample_rate, bits) == (1, 1, rate, 16)
    start = data.index(b"data", 36) + 8
    pcm = np.frombuffer(data[start:start + (len(data) - start) // 2 * 2], dtype="<i2")
    assert pcm.size >= rate // 10 and np.abs(pcm.astype(np.int32)).max() > 0, pcm.size


def test_an_sse_stream_that_ends_in_an_error_event_is_logged_and_counted_as_an_error():
    """A generation failing after the first audio: the 200 stream ends with an error event, which
    its access-log line and /metrics report (end=error), not as a complete success."""
    from starlette.testclient import TestClient

    from ttscli.errors import TTSError
    from ttscli.models import family_of
    from ttscli.registry import load_registry
    from ttscli.serve.app import ServeConfig, create_app
    from ttscli.serve.observe import Observed, RequestMetrics, text_line
    from ttscli.serve.worker import ModelWorker

    class Pipe(Pipeline):
        sample_rate, ref_sample_rate = 22050, None

    def run(pipeline, request):
        yield np.zeros(2205, np.float32)
        raise TTSError("the second sentence failed")

    reg = load_registry([])
    spec = reg.resolve("piper-joe")
    worker = ModelWorker(spec.id, Pipe, run, 4)
    worker.start()
    lines, metrics = [], RequestMetrics()
    try:
        api = create_app(ServeConfig(workers={spec.id: worker}, specs={spec.id: spec}, registry=reg,
                                     families={spec.id: family_of(spec)}, metrics=metrics))
        app = Observed(api, metrics, {r.path for r in api.routes}, lambda r: lines.append(text_line(r)) or "")
        with TestClient(app) as client:
            r = client.post("/v1/audio/speech", json={"input": "One. Two.", "stream_format": "sse",
                                                        "response_format": "pcm"})
    finally:
        worker.stop()
    events = [json.loads(x.removeprefix("data: ")) for x in r.text.split("\n\n") if x.strip()]
    assert r.status_code == 200 and [e["type"] for e in events] == ["speech.audio.delta", "error"]
    (line,) = lines
    assert fields(line)["status"] == "200" and fields(line)["end"] == "error"
    assert metrics.errors == {("/v1/audio/speech", spec.id, "error"): 1}

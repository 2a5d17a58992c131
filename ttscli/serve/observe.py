"""What an operator sees of a running server: one access-log line per request, and /metrics.

The access log and the request metrics come from one ASGI layer around the whole app (so that a
request the Host/Origin guard refuses is counted as well): it times the response's first body
byte and its end, counts the bytes sent, and notices a client that went away or a stream that
broke off. The model and the input's length are known only once the speech route has parsed the
body; ``ModelWorker.submit`` hands them to the request in progress through ``note_job`` (a
context variable, so nothing else of the request needs to carry them).

The per-model figures (queue depth, rows in flight, rows per batch step, jobs by outcome) are
read from the workers when /metrics is scraped, so they cost nothing between scrapes.

The exposition format is Prometheus' text format 0.0.4, written here: it is a few lines of
``name{label="value"} number`` and needs no library.
"""
from __future__ import annotations

import bisect
import contextvars
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_PATH = 200        # characters of a request's path that a log line repeats
OTHER_ROUTE = "other"  # the route label of any path the app has no route for (bounds the label's values)
# seconds: from a /health answer (milliseconds) to a request that generates for the whole
# --request-timeout (300 s by default)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# seconds: a streamed model's first chunk comes in a fraction of a second; a format encoded once
# generation ends (mp3, opus, flac) waits for the whole request
FIRST_AUDIO_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)

access_log = logging.getLogger("ttscli.serve.access")


@dataclass
class AccessRecord:
    """One request as its access-log line reports it. ``end``: complete, cut (the response broke
    off after its status line: a failed or timed-out generation), error (the response ended
    properly but with an error it reports in its body: an SSE stream's error event), client_gone
    (the client left before the end) or none (no response was started)."""

    time: str
    client: str
    method: str
    path: str
    model: str | None = None
    chars: int | None = None
    status: int | None = None
    first_byte_ms: float | None = None
    total_ms: float | None = None
    bytes: int = 0
    end: str = "none"


_current: contextvars.ContextVar[AccessRecord | None] = contextvars.ContextVar("ttscli_access", default=None)


def note_job(model_id: str, chars: int) -> None:
    """The model and input length of the request in progress (a no-op outside a request)."""
    record = _current.get()
    if record is not None:
        record.model, record.chars = model_id, chars


def note_error() -> None:
    """The response in progress reports an error in its body after a 200 status line (an SSE
    stream's error event): its line says end=error and /metrics counts it as an error, where the
    status alone would read as a success (a no-op outside a request)."""
    record = _current.get()
    if record is not None:
        record.end = "error"


class Histogram:
    """Counts of observations at or below each bound, their sum and their number."""

    def __init__(self, bounds: Iterable[float]):
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * len(self.bounds)   # per bucket, not yet cumulative
        self.total = 0.0
        self.n = 0

    def observe(self, x: float, times: int = 1) -> None:
        """``times`` observations of ``x`` (rows per step come tallied by the engine)."""
        i = bisect.bisect_left(self.bounds, x)
        if i < len(self.bounds):
            self.counts[i] += times
        self.total += x * times
        self.n += times


@dataclass
class RequestMetrics:
    """The HTTP side's counters, updated on the event loop's thread only."""

    requests: dict[tuple, int] = field(default_factory=dict)        # (route, model, status) -> n
    errors: dict[tuple, int] = field(default_factory=dict)          # (route, model, kind) -> n
    duration: dict[tuple, Histogram] = field(default_factory=dict)  # (route, model) -> seconds
    first_audio: dict[str, Histogram] = field(default_factory=dict)  # model -> seconds

    def record(self, route: str, r: AccessRecord) -> None:
        model = r.model or ""
        key = (route, model, str(r.status or 0))
        self.requests[key] = self.requests.get(key, 0) + 1
        kind = error_kind(r)
        if kind:
            self.errors[(route, model, kind)] = self.errors.get((route, model, kind), 0) + 1
        self.duration.setdefault((route, model), Histogram(DURATION_BUCKETS)).observe((r.total_ms or 0.0) / 1e3)
        if r.model and r.status == 200 and r.first_byte_ms is not None:
            self.first_audio.setdefault(r.model, Histogram(FIRST_AUDIO_BUCKETS)).observe(r.first_byte_ms / 1e3)


def error_kind(r: AccessRecord) -> str | None:
    """client_error (4xx), server_error (5xx), cut, error (in the body) or client_gone; None for
    a complete success."""
    if r.status is not None and r.status >= 500:
        return "server_error"
    if r.status is not None and r.status >= 400:
        return "client_error"
    return r.end if r.end in ("cut", "error", "client_gone") else None


# ---- the access log -------------------------------------------------------------------------

def printable(text: str, limit: int = MAX_PATH) -> str:
    """A client's text as a log line may repeat it: at most ``limit`` characters, control
    characters and whitespace percent-encoded again (the path arrives decoded, so a client's
    %0A would otherwise start a forged line, and a space would shift the fields after it)."""
    return "".join(c if c.isprintable() and not c.isspace() else quote(c, safe="") for c in text[:limit])


def text_line(r: AccessRecord) -> str:
    def ms(x):
        return "-" if x is None else f"{x:.1f}"

    return (f"{r.time} {r.client} {r.method} {r.path} {r.status if r.status is not None else '-'} "
            f"model={r.model or '-'} chars={'-' if r.chars is None else r.chars} "
            f"first_byte_ms={ms(r.first_byte_ms)} total_ms={ms(r.total_ms)} bytes={r.bytes} end={r.end}")


def json_line(r: AccessRecord) -> str:
    return json.dumps(asdict(r), separators=(",", ":"))


LINES = {"text": text_line, "json": json_line}


def enable_access_log() -> None:
    """The access log's lines go to stderr as they are, whatever the other logs' level: an
    operator who asks for the access log gets it without the debug output."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access_log.handlers[:] = [handler]
    access_log.setLevel(logging.INFO)
    access_log.propagate = False


# ---- the ASGI layer -------------------------------------------------------------------------

class Observed:
    """Times, counts and logs every HTTP request that reaches the app. ``routes``: the paths the
    app answers; any other is counted as ``other``, so a client cannot grow the label set.
    ``line``: how a request's access-log line reads (None: not logged)."""

    def __init__(self, app, metrics: RequestMetrics, routes: Iterable[str],
                 line: Callable[[AccessRecord], str] | None = None):
        self.app = app
        self.metrics = metrics
        self.routes = frozenset(routes)
        self.line = line   # text_line or json_line; None: no access log

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        r = AccessRecord(time=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                         client=f"{client[0]}:{client[1]}" if client else "-",
                         method=printable(scope["method"], 16), path=printable(scope["path"]))
        t0 = time.perf_counter()
        started = done = False   # the status line sent; the body's end sent

        def ms() -> float:
            return round((time.perf_counter() - t0) * 1e3, 1)

        async def watch_receive():
            message = await receive()
            if message["type"] == "http.disconnect" and started and not done:
                r.end = "client_gone"
            return message

        async def watch_send(message):
            nonlocal started, done
            if message["type"] == "http.response.start":
                started, r.status = True, message["status"]
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                if body and r.first_byte_ms is None:
                    r.first_byte_ms = ms()
                r.bytes += len(body)
                if not message.get("more_body", False):
                    done = True
                    if r.end == "none":
                        r.end = "complete"
            await send(message)

        token = _current.set(r)
        try:
            await self.app(scope, watch_receive, watch_send)
        except BaseException:
            if not started:
                r.status = 500   # what the server answers for an exception before the status line
            raise
        finally:
            _current.reset(token)
            if started and not done and r.end == "none":
                r.end = "cut"    # the status line went out, the body's end did not
            r.total_ms = ms()
            self.metrics.record(scope["path"] if scope["path"] in self.routes else OTHER_ROUTE, r)
            if self.line is not None:
                access_log.info(self.line(r))


# ---- the exposition -------------------------------------------------------------------------

def _escape(value: Any) -> str:
    """A label value as the text format quotes it: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x)) if isinstance(x, float) else str(x)


class Exposition:
    """Metric families in the text format: HELP and TYPE once, then the family's samples."""

    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, **labels) -> None:
        self.lines.append(f"{name}{_labels(**labels)} {_number(value)}")

    def histogram(self, name: str, h: Histogram, **labels) -> None:
        seen = 0
        for bound, n in zip(h.bounds, h.counts):
            seen += n
            self.sample(f"{name}_bucket", seen, **labels, le=_number(float(bound)))
        self.sample(f"{name}_bucket", h.n, **labels, le="+Inf")
        self.sample(f"{name}_sum", h.total, **labels)
        self.sample(f"{name}_count", h.n, **labels)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def row_bounds(max_batch: int) -> tuple[int, ...]:
    """Buckets for rows per step: powers of two below ``max_batch``, then ``max_batch`` itself
    (a handful of series however large the batch, and a full batch has a bucket of its own)."""
    bounds, b = [], 1
    while b < max_batch:
        bounds.append(b)
        b *= 2
    return (*bounds, max_batch)


def render(metrics: RequestMetrics, workers: dict[str, Any], connections: Any = None) -> str:
    """The whole /metrics page: the HTTP counters, then each model's worker, then connections."""
    out = Exposition()
    out.family("ttscli_requests_total", "counter", "HTTP requests answered, by route, model and status.")
    for (route, model, status), n in sorted(metrics.requests.items()):
        out.sample("ttscli_requests_total", n, route=route, model=model, status=status)
    out.family("ttscli_request_errors_total", "counter",
               "Requests that did not end in a complete success: client_error (4xx), server_error (5xx), "
               "cut (a response that broke off after its status line), error (an error reported in the body: "
               "an SSE stream's error event) or client_gone.")
    for (route, model, kind), n in sorted(metrics.errors.items()):
        out.sample("ttscli_request_errors_total", n, route=route, model=model, kind=kind)
    out.family("ttscli_request_duration_seconds", "histogram", "Time from a request's arrival to its response's end.")
    for (route, model), h in sorted(metrics.duration.items()):
        out.histogram("ttscli_request_duration_seconds", h, route=route, model=model)
    out.family("ttscli_first_audio_seconds", "histogram",
               "Time from a speech request's arrival to the first byte of its audio (successful requests).")
    for model, h in sorted(metrics.first_audio.items()):
        out.histogram("ttscli_first_audio_seconds", h, model=model)
    _workers(out, workers)
    if connections is not None:
        snap = connections.snapshot()
        out.family("ttscli_connections_open", "gauge", "Open HTTP connections (idle ones included).")
        out.sample("ttscli_connections_open", snap["open"])
        out.family("ttscli_connection_events_total", "counter",
                   "Connections refused or evicted at the limit, and header or body timeouts.")
        for event in ("refused", "evicted", "header_timeouts", "body_timeouts"):
            out.sample("ttscli_connection_events_total", snap[event], event=event)
    return out.text()


def _workers(out: Exposition, workers: dict[str, Any]) -> None:
    status = {m: w.status() for m, w in workers.items()}
    out.family("ttscli_queue_depth", "gauge", "Requests waiting for the model (its queue).")
    for m, s in status.items():
        out.sample("ttscli_queue_depth", s["queued"], model=m)
    out.family("ttscli_rows_in_flight", "gauge", "Requests the model is generating now (rows or turns).")
    for m, s in status.items():
        out.sample("ttscli_rows_in_flight", s["active"], model=m)
    out.family("ttscli_jobs_total", "counter",
               "Requests that left the model's queue or were refused at it, by outcome.")
    for m, s in status.items():
        for outcome in ("served", "failed", "cancelled", "timed_out", "refused"):
            out.sample("ttscli_jobs_total", s[outcome], model=m, outcome=outcome)
    out.family("ttscli_batch_rows", "histogram", "Rows stepped together per step of the model's batch.")
    for m, w in workers.items():
        h = Histogram(row_bounds(w.max_batch))
        for rows, n in sorted(dict(w.batch_stats.by_rows).items()):
            h.observe(rows, n)
        out.histogram("ttscli_batch_rows", h, model=m)
    out.family("ttscli_batch_rows_largest", "gauge", "The most rows the model's batch has stepped at once.")
    for m, w in workers.items():
        out.sample("ttscli_batch_rows_largest", w.batch_stats.largest, model=m)

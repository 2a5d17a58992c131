"""`ttscli serve`: an OpenAI-compatible speech server (FastAPI + uvicorn, the ``ttscli[serve]`` extra).

Layout: worker.py (one thread per model, bounded queue), app.py (routes, request parsing,
streaming), formats.py (response formats). Requests go through the library API
(``ttscli.generate.synthesize``) exactly as ``ttscli speak`` does.
"""
from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscli.errors import BackendUnavailableError, UsageError

LOOPBACK = "127.0.0.1"
RANDOM_WEIGHTS_WARNING = ("WARNING: --random-weights: every model is built at its real size with random weights; "
                          "its audio is noise, not speech (for load tests only)")


@dataclass(frozen=True)
class HTTPOptions:
    """Who may talk to the server, and how long a connection may take over each part of a request.

    The defaults: a request head is a few hundred bytes, so 10 s is room for the slowest link
    while a client that trickles it is gone soon; 30 s carries the largest body (16 MiB, a long
    reference upload) at about 4.5 Mbit/s; 5 s of keep-alive is uvicorn's own default; 64
    connections hold the queued and running requests of two models at the default --max-queue
    and --max-batch (16 + 16 each), and stay far below a process's usual limit of 1024 files.
    A WebSocket stream (/v1/audio/speech/stream) may sit 60 s without a message while nothing is
    being spoken: a voice agent's LLM may pause that long between turns of thought, a client
    that went quiet for good is gone within a minute.
    """

    allowed_hosts: tuple[str, ...] = ()      # Host names besides localhost, loopback and the bound address
    cors_origins: tuple[str, ...] = ()       # web origins whose pages may call the API
    header_timeout: float = 10.0             # seconds for the request line and headers
    body_timeout: float = 30.0               # seconds for the whole body, from the end of its head
    keep_alive_timeout: float = 5.0          # seconds an idle connection stays open between requests
    max_connections: int = 64                # open connections at most
    ws_idle_timeout: float = 60.0            # seconds a WebSocket stream may go without a message


def require_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
        import wsproto  # noqa: F401
    except ImportError as e:
        raise BackendUnavailableError(f"ttscli serve needs the serve extra ({e.name} is missing): "
                                      "pip install 'ttscli[serve]'") from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; port 0 picks a free one (tests read the port from the ready line)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def batched_stream(pipeline):
    """The engine's batched streaming loop (``ttscli.batching.stream_many``) for a pipeline that
    generates rows (``Pipeline.rows()``), else None: requests then take turns or run one at a time."""
    if pipeline.rows() is None:
        return None
    from ttscli.batching import stream_many

    return stream_many


def interleaves(pipeline) -> bool:
    """Whether the pipeline's generations may take turns on its model's thread: each keeps its
    state in its own generator (``Pipeline.independent_generations``, implied by
    ``concurrent_safe``). Otherwise requests run one at a time."""
    return bool(pipeline.concurrent_safe or pipeline.independent_generations)


def run_request(pipeline, request):
    """The request's audio chunks; with ``timestamps`` on a model with word durations, the
    engine's timed :class:`~ttscli.generate.Chunk` s (other models' words are aligned by the
    HTTP side once the audio is complete)."""
    from ttscli.generate import synthesize, synthesize_words

    if request.timestamps and pipeline.word_durations:
        return synthesize_words(pipeline, request)
    return synthesize(pipeline, request)


def serve(loaders: dict[str, Callable[[], Any]], specs: dict[str, Any], registry, *, host: str = LOOPBACK,
          port: int = 8000, api_key: str | None = None, max_queue: int = 16, max_batch: int = 16,
          voices_dir: Path | None = None,
          http: HTTPOptions | None = None,
          max_input_chars: int = 4096, request_timeout: float = 300.0, strict: bool = False,
          random_weights: bool = False, access_log: str | None = None,
          note: Callable[[str], None] = print) -> None:
    """Load every model (each on its own thread), then serve until stopped.

    ``max_input_chars``: the longest ``input`` accepted (longer gets 400 before it is queued).
    ``request_timeout``: seconds a request may generate, from when it leaves the queue (0: no
    limit); past it, it stops at its next chunk (504 before any audio, else a cut-off stream).
    ``strict``: refuse a request field the model cannot honour (e.g. ``instructions`` on a model
    without instructions) instead of ignoring it and naming it in the X-Ignored-Fields header.
    ``random_weights``: the loaders build random weights (a load test without a download); the
    startup lines, every /v1/models entry and every speech response's X-Random-Weights header
    say so, so that nobody takes its noise for a model's speech.
    ``access_log``: None, or "text" / "json" for one line per request on stderr (observe.py).
    """
    require_extra()
    import uvicorn

    from ttscli.models import family_of
    from ttscli.serve.app import ServeConfig, create_app
    from ttscli.serve.guard import guarded
    from ttscli.serve.observe import LINES, Observed, RequestMetrics, enable_access_log
    from ttscli.serve.protocol import ConnectionStats, TrackedWSProtocol, protocol_factory
    from ttscli.serve.stream import MAX_FRAMES_BYTES
    from ttscli.serve.worker import ModelWorker

    http = http or HTTPOptions()
    connections = ConnectionStats(http.max_connections)

    sock = bind(host, port)
    workers: dict[str, ModelWorker] = {}
    try:
        for model_id, load in loaders.items():
            w = ModelWorker(model_id, load, run_request, max_queue, batched_stream if max_batch > 1 else None,
                            max_batch, interleave=interleaves, request_timeout=request_timeout)
            w.start()
            workers[model_id] = w
        metrics = RequestMetrics()
        cfg = ServeConfig(workers=workers, specs=specs, registry=registry, api_key=api_key,
                          voices_dir=voices_dir, families={m: family_of(s) for m, s in specs.items()},
                          connections=connections, max_input_chars=max_input_chars, metrics=metrics,
                          strict=strict, random_weights=random_weights,
                          stream_idle_timeout=http.ws_idle_timeout)
        api = create_app(cfg)
        if access_log:
            enable_access_log()
        # outside the guard, so that what it refuses is logged and counted too
        app = Observed(guarded(api, host, http), metrics, {r.path for r in api.routes},
                       LINES[access_log] if access_log else None)
        # WebSockets through wsproto (pure Python, on h11 like the HTTP side), each message bounded in size;
        # no compression: audio gains little from it, and an inflated message costs what it inflates to
        config = uvicorn.Config(app, log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=5, ws=TrackedWSProtocol,
                                ws_max_size=MAX_FRAMES_BYTES, ws_per_message_deflate=False,
                                http=protocol_factory(http, connections),
                                timeout_keep_alive=http.keep_alive_timeout)
        server = uvicorn.Server(config)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        if random_weights:
            note(RANDOM_WEIGHTS_WARNING)
        served = ", ".join(workers) + (" (RANDOM WEIGHTS)" if random_weights else "")
        note(f"serving {served} on http://{shown}:{bound} (POST /v1/audio/speech; "
             f"queue {max_queue} per model{', API key required' if api_key else ''})")
        server.run(sockets=[sock])
    finally:
        for w in workers.values():
            w.stop()
        sock.close()

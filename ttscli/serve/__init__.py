"""`ttscli serve`: an OpenAI-compatible speech server (FastAPI + uvicorn, the ``ttscli[serve]`` extra).

Layout: worker.py (one thread per model, bounded queue), app.py (routes, request parsing,
streaming), formats.py (response formats). Requests go through the library API
(``ttscli.generate.synthesize``) exactly as ``ttscli speak`` does.
"""
from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ttscli.errors import BackendUnavailableError, UsageError

LOOPBACK = "127.0.0.1"


def require_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
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
    """The family's batched streaming generator for this pipeline (``Family.batched["stream_many"]``,
    MLX code decoder only), else None: requests then run one at a time."""
    from ttscli.models import family_of

    if pipeline.spec is None or pipeline.backends.get("code_decoder") != "mlx":
        return None
    return family_of(pipeline.spec).batched.get("stream_many")


def interleaves(pipeline) -> bool:
    """Whether the pipeline's generations may take turns on its model's thread: each keeps its
    state in its own generator (``Pipeline.independent_generations``, implied by
    ``concurrent_safe``). Otherwise requests run one at a time."""
    return bool(pipeline.concurrent_safe or pipeline.independent_generations)


def run_request(pipeline, request):
    from ttscli.generate import synthesize

    return synthesize(pipeline, request)


def serve(loaders: dict[str, Callable[[], Any]], specs: dict[str, Any], registry, *, host: str = LOOPBACK,
          port: int = 8000, api_key: str | None = None, max_queue: int = 16, max_batch: int = 16,
          voices_dir: Path | None = None,
          max_input_chars: int = 4096, request_timeout: float = 300.0,
          note: Callable[[str], None] = print) -> None:
    """Load every model (each on its own thread), then serve until stopped.

    ``max_input_chars``: the longest ``input`` accepted (longer gets 400 before it is queued).
    ``request_timeout``: seconds a request may generate, from when it leaves the queue (0: no
    limit); past it, it stops at its next chunk (504 before any audio, else a cut-off stream).
    """
    require_extra()
    import uvicorn

    from ttscli.models import family_of
    from ttscli.serve.app import ServeConfig, create_app
    from ttscli.serve.worker import ModelWorker

    sock = bind(host, port)
    workers: dict[str, ModelWorker] = {}
    try:
        for model_id, load in loaders.items():
            w = ModelWorker(model_id, load, run_request, max_queue, batched_stream if max_batch > 1 else None,
                            max_batch, interleave=interleaves, request_timeout=request_timeout)
            w.start()
            workers[model_id] = w
        cfg = ServeConfig(workers=workers, specs=specs, registry=registry, api_key=api_key,
                          voices_dir=voices_dir, families={m: family_of(s) for m, s in specs.items()},
                          max_input_chars=max_input_chars)
        config = uvicorn.Config(create_app(cfg), log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=5)
        server = uvicorn.Server(config)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        note(f"serving {', '.join(workers)} on http://{shown}:{bound} (POST /v1/audio/speech; "
             f"queue {max_queue} per model{', API key required' if api_key else ''})")
        server.run(sockets=[sock])
    finally:
        for w in workers.values():
            w.stop()
        sock.close()

#!/usr/bin/env python
"""Served throughput and first audio of `ttscli serve` under concurrent streaming clients.

For each concurrency level (default 1, 8, 32, 64), that many clients each send --requests
requests one after another (``response_format: pcm, stream: true``) and read every byte. Each
request records its status, the time to its first audio byte, its total time and its audio
seconds (PCM bytes / 2 / the X-Sample-Rate header). Each level reports p50/p95/max first audio,
p50/p95 total time, errors and aggregate audio seconds per wall second, and the JSON (--json)
holds every request as well.

It starts its own server on 127.0.0.1 (``-m MODEL``, ``--random-weights`` for a load test that
needs no weights) sized so that the largest level neither queues past --max-queue nor runs out of
connections, or measures a server already running (``--url``). One warm-up request runs
before each level (not counted), so that no level pays for first-use allocations.

    PYTHONPATH=. python benchmarks/serve_load.py -m qwen3-tts-0.6b-base --random-weights \\
        --max-frames 100 --json serve_load.json
    PYTHONPATH=. python benchmarks/serve_load.py --url http://127.0.0.1:8000 --concurrency 1,8
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np

TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs into the forest "
        "to look for its friends before the sun goes down.")
READY = re.compile(r"serving .* on (http://\S+) ")
PCM_BYTES = 2                # 16-bit mono samples
MAX_CLIENTS = 256            # a bound on what one run may open
SERVER_SLACK = 8             # connections beyond the clients: /health and /v1/models calls, a closing socket


@dataclass
class LoadConfig:
    """What each request asks for and how long any one may take."""

    text: str = TEXT
    model: str | None = None           # None: the server's default model
    requests: int = 4                  # per client, one after another
    max_frames: int | None = None      # a bound on frames for models that generate them (random weights)
    timeout: float = 600.0             # seconds for one request, start to last byte


@dataclass
class Outcome:
    """One request: ``status`` None when the connection failed; ``first_audio_s`` None without audio."""

    client: int
    seed: int
    status: int | None
    first_audio_s: float | None
    total_s: float
    audio_s: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def request_body(cfg: LoadConfig, seed: int) -> dict:
    body = {"input": cfg.text, "response_format": "pcm", "stream": True, "seed": seed}
    if cfg.model:
        body["model"] = cfg.model
    if cfg.max_frames:
        body["max_frames"] = cfg.max_frames
    return body


async def one_request(client: httpx.AsyncClient, url: str, cfg: LoadConfig, who: int, seed: int) -> Outcome:
    """Send one streaming request and read it to the end, timing the first audio byte."""
    t0 = time.perf_counter()
    first, size, status = None, 0, None
    try:
        async with client.stream("POST", url + "/v1/audio/speech", json=request_body(cfg, seed),
                                 timeout=cfg.timeout) as r:
            status = r.status_code
            if status != 200:
                text = (await r.aread()).decode("utf-8", "replace")
                return Outcome(who, seed, status, None, time.perf_counter() - t0, 0.0, f"{status}: {text[:200]}")
            rate = int(r.headers["x-sample-rate"])
            async for part in r.aiter_raw():
                if part and first is None:
                    first = time.perf_counter() - t0
                size += len(part)
    except (httpx.HTTPError, KeyError, ValueError) as e:
        return Outcome(who, seed, status, first, time.perf_counter() - t0, 0.0, f"{type(e).__name__}: {e}")
    total = time.perf_counter() - t0
    if size == 0 or size % PCM_BYTES:
        return Outcome(who, seed, status, first, total, 0.0, f"{size} bytes of 16-bit PCM")
    return Outcome(who, seed, status, first, total, size / PCM_BYTES / rate)


async def run_level(url: str, cfg: LoadConfig, clients: int) -> tuple[list[Outcome], float]:
    """``clients`` concurrent clients, each sending ``cfg.requests`` in turn; the outcomes and
    the wall time from the first request sent to the last byte read."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(limits=limits) as client:
        async def one_client(who: int) -> list[Outcome]:
            return [await one_request(client, url, cfg, who, who * cfg.requests + i) for i in range(cfg.requests)]

        t0 = time.perf_counter()
        per_client = await asyncio.gather(*(one_client(c) for c in range(clients)))
        wall = time.perf_counter() - t0
    return [o for mine in per_client for o in mine], wall


def quantile(values: list[float], q: float) -> float | None:
    return float(np.quantile(values, q)) if values else None


def summarize(outcomes: list[Outcome], wall_s: float, clients: int) -> dict:
    """One level's figures: first audio and total time over the requests that succeeded, errors
    over all, and the audio they carried per second of wall time."""
    ok = [o for o in outcomes if o.ok]
    first = [o.first_audio_s for o in ok]
    total = [o.total_s for o in ok]
    audio = sum(o.audio_s for o in ok)
    return {"clients": clients, "requests": len(outcomes), "ok": len(ok), "errors": len(outcomes) - len(ok),
            "first_audio_p50_s": quantile(first, 0.5), "first_audio_p95_s": quantile(first, 0.95),
            "first_audio_max_s": max(first, default=None),
            "total_p50_s": quantile(total, 0.5), "total_p95_s": quantile(total, 0.95),
            "audio_s": audio, "wall_s": wall_s, "audio_s_per_s": audio / wall_s if wall_s > 0 else None,
            "first_errors": [o.error for o in outcomes if not o.ok][:3]}


async def run_levels(url: str, cfg: LoadConfig, levels: list[int], warmup: bool = True) -> list[dict]:
    """Every level in turn, each after one warm-up request (not counted); each level's summary
    with its requests."""
    out = []
    for clients in levels:
        if warmup:
            async with httpx.AsyncClient() as client:
                await one_request(client, url, cfg, -1, 0)
        outcomes, wall = await run_level(url, cfg, clients)
        out.append({**summarize(outcomes, wall, clients), "per_request": [asdict(o) for o in outcomes]})
    return out


class Server:
    """`ttscli serve` on 127.0.0.1 (a free port) from the ttscli this Python imports, so that it
    runs from a source tree on PYTHONPATH as from an install; stderr is kept for its last words."""

    def __init__(self, args: list[str], start_timeout: float):
        cmd = [sys.executable, "-c", "import sys; from ttscli.cli import main; sys.exit(main())",
               "serve", "--host", "127.0.0.1", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url: str | None = None
        ready = threading.Event()

        def drain():  # the server must never block on a full stderr pipe
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = READY.search(line)
                if m and self.url is None:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(start_timeout) or self.url is None:
            self.stop()
            raise SystemExit("the server did not start:\n" + "\n".join(self.lines[-20:]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def server_args(args, largest: int) -> list[str]:
    """Room for the largest level: every client's request in progress or queued, never refused."""
    out = ["--max-queue", str(largest), "--max-batch", str(args.max_batch or largest),
           "--max-connections", str(largest + SERVER_SLACK)]
    if args.model:
        out += ["-m", args.model]
    if args.random_weights:
        out.append("--random-weights")
    if args.dtype:
        out += ["--dtype", args.dtype]
    for b in args.backend or ():
        out += ["--backend", b]
    return out


def served_model(url: str, model: str | None) -> dict:
    """The /v1/models entry of the model the requests go to (the first served without -m)."""
    cards = httpx.get(url + "/v1/models", timeout=30).json()["data"]
    return next((c for c in cards if c["id"] == model), cards[0])


def environment() -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip()
    return {"commit": commit or None, "cpu_count": os.cpu_count(), "load_average": list(os.getloadavg()),
            "python": sys.version.split()[0]}


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--concurrency takes counts like 1,8,32, not {text!r}") from None
    if not levels or min(levels) < 1 or max(levels) > MAX_CLIENTS:
        raise SystemExit(f"--concurrency: each level between 1 and {MAX_CLIENTS}")
    return levels


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=None, help="model to serve and request (default: the server's)")
    ap.add_argument("--url", default=None, help="measure this running server instead of starting one")
    ap.add_argument("--random-weights", action="store_true", help="start the server with --random-weights")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--backend", action="append", help="COMPONENT=NAME for the server (repeatable)")
    ap.add_argument("--max-batch", type=int, default=None, help="the server's --max-batch (default: largest level)")
    ap.add_argument("--concurrency", default="1,8,32,64", help="client counts, comma-separated")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--max-frames", type=int, default=None, help="sent as each request's max_frames")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for one request")
    ap.add_argument("--start-timeout", type=float, default=900.0, help="seconds for the server to load")
    ap.add_argument("--json", type=Path, default=None, help="write the report here")
    args = ap.parse_args(argv)
    if not 1 <= args.requests <= 1000:
        raise SystemExit("--requests: between 1 and 1000 per client")
    if args.url and (args.random_weights or args.dtype or args.backend or args.max_batch):
        raise SystemExit("--url measures a running server: its own options apply")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    levels = parse_levels(args.concurrency)
    cfg = LoadConfig(text=args.text, model=args.model, requests=args.requests, max_frames=args.max_frames,
                     timeout=args.timeout)
    server = None if args.url else Server(server_args(args, max(levels)), args.start_timeout)
    url = args.url or server.url
    try:
        card = served_model(url, args.model)
        results = asyncio.run(run_levels(url, cfg, levels))
    finally:
        if server is not None:
            server.stop()
    report = {"model": card["id"], "random_weights": card.get("random_weights", False), "url": url,
              "text_chars": len(cfg.text), "requests_per_client": cfg.requests, "max_frames": cfg.max_frames,
              "environment": environment(), "levels": results}
    for r in results:
        print(json.dumps({k: v for k, v in r.items() if k != "per_request"}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

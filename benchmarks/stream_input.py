"""Streaming text input: text arriving like an LLM's output, time to the first sentence's audio.

A writer thread sends the text a word at a time (each word with its leading space: an LLM's
tokens, taken as words here) at ``--rate`` tokens per second into
:func:`ttscli.synthesize_stream`, which speaks each sentence once it is complete. Measured per
model, from the moment the first sentence's last token is sent:

- ``first_audio_ms``: to the first audio of that sentence. It includes the one token the
  sentence buffer waits for to know that the sentence has ended (ttscli.stream_input), so at
  20 tokens/s about 50 ms of it is that wait;
- ``after_complete_ms``: from the token that completed the sentence to its first audio (the
  engine's part: normalization, the model, the crossfade's hold);
- ``last_audio_ms``: from the stream's last token to the end of its audio.

Each model speaks one warm-up sentence first (sessions and caches built), then ``--repeats``
streams; the median is reported.

With ``--random-weights`` a model is built at its real size with random weights (no checkpoint:
the codec LMs' figures on a GPU), and each sentence runs exactly ``--max-frames`` frames, since
such a model never says stop. ``--stream`` speaks each sentence as a stream (first audio after the
model's first chunk, not after the whole sentence), as the server's WebSocket route always does.

With ``--websocket`` the same text goes to a ``ttscli serve`` subprocess over its WebSocket
route (/v1/audio/speech/stream, PCM at the model's own rate), one message per token, and the
times are taken where the client receives the audio: the server's sentence jobs, the socket
and the encoder are included.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/stream_input.py --models piper-joe,kokoro-82m \\
        --json stream_input.json
    PYTHONPATH=$PWD .venv/bin/python benchmarks/stream_input.py --models piper-joe --websocket
    PYTHONPATH=$PWD python3 benchmarks/stream_input.py --models qwen3-tts-0.6b-base --random-weights --stream
"""
from __future__ import annotations

import argparse
import json
import queue
import re
import select
import statistics
import sys
import threading
import time
from pathlib import Path

import ttscli  # loads the BLAS before mlx

TEXT = ("The weather today is mild and clear across the whole region. Later this evening, a light "
        "breeze will come in from the west, and temperatures will drop a little. Tomorrow looks much the same.")


def tokens(text: str) -> list[str]:
    """Words with their leading whitespace, as an LLM's tokens arrive."""
    return re.findall(r"\s*\S+", text)


def first_sentence_tokens(toks: list[str]) -> int:
    """How many tokens the first sentence takes (its last one ends with a sentence mark)."""
    from ttscli.text import split_sentences

    first = split_sentences("".join(toks))[0]
    n, text = 0, ""
    while len(text.strip()) < len(first):
        text += toks[n]
        n += 1
    return n


def one_stream(pipe, request, rate: float) -> dict:
    """One stream at ``rate`` tokens/s; the three times in milliseconds."""
    toks = tokens(TEXT)
    n_first = first_sentence_tokens(toks)
    sent: list[float] = []
    inbox: queue.Queue = queue.Queue()

    def writer():
        for tok in toks:
            inbox.put(tok)
            sent.append(time.perf_counter())
            time.sleep(1.0 / rate)
        inbox.put(None)

    def deltas():
        while (tok := inbox.get()) is not None:
            yield tok

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    first = None
    for audio in ttscli.synthesize_stream(pipe, deltas(), request):
        if first is None and len(audio):
            first = time.perf_counter()
    done = time.perf_counter()
    thread.join()
    return {"first_audio_ms": 1000 * (first - sent[n_first - 1]),
            "after_complete_ms": 1000 * (first - sent[n_first]),
            "last_audio_ms": 1000 * (done - sent[-1])}


def one_socket_stream(server, rate: float, sample_rate: int, max_frames: int | None = None) -> dict:
    """One stream over the server's WebSocket at ``rate`` tokens/s, one message per token; the
    three times in milliseconds, taken as the client receives the audio."""
    from servertools import WebSocket

    toks = tokens(TEXT)
    n_first = first_sentence_tokens(toks)
    ws = WebSocket(server.url, "/v1/audio/speech/stream")
    if ws.refused:
        raise RuntimeError(f"the server refused the stream: {ws.refused}")
    start = {"type": "start", "seed": 0, "response_format": "pcm", "sample_rate": sample_rate}
    if max_frames:
        start["max_frames"] = max_frames
    ws.send_json(start)
    sent: list[float] = []
    first = None

    def take(message) -> None:
        nonlocal first
        if isinstance(message, tuple) or isinstance(message, dict) and message["type"] == "error":
            raise RuntimeError(f"the stream ended early: {message}")
        if first is None and isinstance(message, bytes):
            first = time.perf_counter()

    for tok in toks:
        ws.send_json({"type": "text", "text": tok})
        sent.append(time.perf_counter())
        next_at = sent[-1] + 1.0 / rate
        while (left := next_at - time.perf_counter()) > 0:
            if select.select([ws.sock], [], [], left)[0]:
                take(ws.receive())
    ws.send_json({"type": "end"})
    while not (isinstance(message := ws.receive(), dict) and message["type"] == "done"):
        take(message)
    done = time.perf_counter()
    ws.close()
    return {"first_audio_ms": 1000 * (first - sent[n_first - 1]),
            "after_complete_ms": 1000 * (first - sent[n_first]),
            "last_audio_ms": 1000 * (done - sent[-1])}


def bench_socket(model: str, rate: float, repeats: int, random_weights: bool = False, max_frames: int = 25,
                 stream: bool = False) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "serve"))
    from servertools import Server

    import httpx

    server = Server(["-m", model, *(["--random-weights"] if random_weights else [])])
    frames = max_frames if random_weights else None
    try:
        native = httpx.get(f"{server.url}/v1/models/{model}").json()["sample_rate"]   # no resampling
        one_socket_stream(server, rate, native, frames)   # warm-up: the model's sessions, the first request
        runs = [one_socket_stream(server, rate, native, frames) for _ in range(repeats)]
    finally:
        server.stop()
    return {"model": model, "path": "websocket", "rate_tokens_per_s": rate, "repeats": repeats,
            "random_weights": random_weights, "max_frames": frames,
            **{k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}}


def bench(model: str, rate: float, repeats: int, random_weights: bool = False, max_frames: int = 25,
          stream: bool = False) -> dict:
    pipe = ttscli.load(model, random_weights=random_weights)
    fixed = {"ignore_eos": True, "max_frames": max_frames} if random_weights else {}
    request = ttscli.Request("", seed=0, stream=stream, **fixed)
    list(ttscli.synthesize(pipe, ttscli.Request("A warm-up sentence.", seed=0, stream=stream, **fixed)))
    runs = [one_stream(pipe, request, rate) for _ in range(repeats)]
    return {"model": model, "path": "library", "rate_tokens_per_s": rate, "repeats": repeats,
            "random_weights": random_weights, "max_frames": max_frames if random_weights else None, "stream": stream,
            **{k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="piper-joe,kokoro-82m")
    ap.add_argument("--rate", type=float, default=20.0, help="tokens (words) per second")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--websocket", action="store_true",
                    help="stream to a `ttscli serve` subprocess over its WebSocket route instead of the library")
    ap.add_argument("--random-weights", action="store_true",
                    help="the model at its real size with random weights; each sentence runs --max-frames frames")
    ap.add_argument("--max-frames", type=int, default=25, help="frames a sentence runs with --random-weights")
    ap.add_argument("--stream", action="store_true", help="each sentence spoken as a stream (library path)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    run = bench_socket if args.websocket else bench
    results = [run(m, args.rate, args.repeats, args.random_weights, args.max_frames, args.stream)
               for m in args.models.split(",")]
    print(f"{'model':<14}{'first audio':>14}{'after complete':>17}{'last audio':>13}   (ms, median of "
          f"{args.repeats}, {args.rate:g} tokens/s)")
    for r in results:
        print(f"{r['model']:<14}{r['first_audio_ms']:>14.1f}{r['after_complete_ms']:>17.1f}{r['last_audio_ms']:>13.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

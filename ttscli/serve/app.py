"""The HTTP API: OpenAI's ``POST /v1/audio/speech`` plus ttscli's extras, over the library API.

Bodies are parsed here rather than by pydantic so that bad input gets the one line the CLI
prints for the same mistake (``ttscli.errors`` classes, ``str(err)``), in OpenAI's error shape.
An error message repeats at most MAX_SHOWN characters of any value a client sent, and names no
directory of the server (a file keeps its name, the folders above it read as an ellipsis).
"""
from __future__ import annotations

import asyncio
import base64
import io
import hmac
import json
import logging
import math
import re
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ttscli.errors import (
    BackendUnavailableError,
    InputTooLongError,
    LimitReached,
    ModelNotFoundError,
    NotImplementedModelError,
    TTSError,
    UsageError,
)
from ttscli.paths import cache_dir, config_dir
from ttscli.encode import MAX_RATE, MIN_RATE, make_encoder
from ttscli.models.base import API_NAMING
from ttscli.ssml import MAX_PAUSE_S
from ttscli.serve.formats import DEFAULT_RATE, RESPONSE_FORMATS, check_format, content_type
from ttscli.serve.observe import note_error
from ttscli.serve.worker import DONE, ModelWorker, QueueFull, RequestTimeout

log = logging.getLogger("ttscli.serve")

# Kokoro-FastAPI's extra request fields (its OpenAISpeechRequest), each honoured, accepted as
# having no effect here, or refused with a 400 (see build_request)
KOKORO_FIELDS = ("download_format", "return_download_link", "lang_code", "volume_multiplier",
                 "normalization_options")
# What OpenAI clients send as `model`; each means the server's default model.
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
# OpenAI's voice names: a model without such a voice speaks in its own default voice.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
                 "marin", "cedar")
# The request fields with a meaning of their own; any other field names a family knob.
FIELDS = ("model", "input", "voice", "instructions", "response_format", "speed", "stream_format", "seed",
          "language", "max_frames", "ref_audio", "ref_text", "sample_rate", "stream", "return_timestamps",
          "normalize_text", "sentence_silence", *KOKORO_FIELDS)
# Kokoro-FastAPI's `lang_code` letters and the languages they stand for
LANG_CODES = {"a": "en-us", "b": "en-gb", "e": "es", "f": "fr-fr", "h": "hi", "i": "it", "j": "ja",
              "p": "pt-br", "z": "zh"}
# Kokoro-FastAPI's text-normalization switches: accepted (each a boolean) and reported ignored,
# since ttscli's text front end has no such switches
NORMALIZATION_OPTIONS = ("normalize", "unit_normalization", "url_normalization", "email_normalization",
                         "optional_pluralization_normalization", "phone_normalization",
                         "replace_remaining_symbols")
IGNORED_HEADER = "X-Ignored-Fields"
RANDOM_HEADER = "X-Random-Weights"  # on every speech response of a `serve --random-weights` server
API_FIELDS = {"instruct": "instructions"}   # a common request field whose JSON name differs
MAX_BODY = 16 << 20          # 30 s of 48 kHz stereo WAV reference, base64, fits with room to spare
SAVED_VOICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
POLL_S = 0.2                 # how often a waiting request checks that its client is still there
MAX_DEPTH = 32               # nesting of a JSON body (the API's own fields nest one level deep)
MAX_DIGITS = 20              # digits of a JSON integer (every numeric field fits in 64 bits)
MAX_SHOWN = 200              # characters of a client's value that an error message repeats
MAX_MESSAGE = 600            # characters of an error message
# an absolute path (not one of the API's own routes): the file's name is kept, its folders are not
ABS_PATH = re.compile(r"(?:\u2026|(?<![\w.:/~]))/(?!v1/)(?:[^\s'\"/]+/)*([^\s'\"/]+)")
LONG_RUN = re.compile(r"\S{%d,}" % (MAX_SHOWN + 1))
MAX_INPUT_CHARS = 4096       # OpenAI's own limit on `input`: a request is bounded in work as in size
MAX_VOLUME = 10.0            # `volume_multiplier`: louder than this is clipping, not volume


@dataclass
class ServeConfig:
    workers: dict[str, ModelWorker]          # model id -> its worker (the first is the default)
    specs: dict[str, Any]                    # model id -> ModelSpec
    registry: Any
    api_key: str | None = None
    voices_dir: Path | None = None
    max_body: int = MAX_BODY
    families: dict[str, Any] = field(default_factory=dict)
    connections: Any = None                  # the server's ConnectionStats (protocol.py), shown by /health
    max_input_chars: int = MAX_INPUT_CHARS
    metrics: Any = None                      # the server's RequestMetrics (observe.py), shown by /metrics
    strict: bool = False                     # refuse a field the model cannot honour instead of ignoring it
    word_aligner: Any = None                 # ttscli.words.default_aligner(), loaded by the first request that needs it
    random_weights: bool = False             # the models were built with random weights (load tests)
    stream_idle_timeout: float = 60.0        # seconds a WebSocket stream may sit idle (serve/stream.py)

    @property
    def default_model(self) -> str:
        return next(iter(self.workers))

    def aligner(self):
        """The forced aligner for word timestamps of models without durations (ttscli.words);
        loaded once, on a thread of the pool (a UsageError when no aligner is installed)."""
        with _ALIGNER_LOCK:
            if self.word_aligner is None:
                from ttscli.words import default_aligner

                self.word_aligner = default_aligner()
        return self.word_aligner


_ALIGNER_LOCK = threading.Lock()


@dataclass(frozen=True)
class Reply:
    """How a response carries its audio: ``fmt`` at ``rate`` Hz, as SSE events or as the body;
    ``whole``: a WAV or FLAC sent once complete, so its header holds the true sizes (a FLAC
    whose sample count is unknown is valid, yet libsndfile cannot read it whole); ``volume``:
    the gain applied before encoding; ``ignored``: the request fields accepted without effect,
    named in the X-Ignored-Fields header so that a client can tell."""

    fmt: str
    rate: int
    sse: bool = False
    whole: bool = False
    volume: float = 1.0
    ignored: tuple[str, ...] = ()
    words: bool = False                      # return_timestamps: Kokoro-FastAPI's captioned shape, or SSE word events


class Gain:
    """An encoder whose input is scaled by ``volume`` first (the encoders clip to full scale)."""

    def __init__(self, encoder, volume: float):
        self.encoder, self.volume = encoder, volume

    def push(self, chunk):
        return self.encoder.push(chunk * self.volume)

    def __getattr__(self, name):
        return getattr(self.encoder, name)


class HTTPFailure(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def status_for(e: BaseException) -> int:
    if isinstance(e, QueueFull):
        return 503
    if isinstance(e, RequestTimeout):
        return 504
    if isinstance(e, (ModelNotFoundError, NotImplementedModelError)):
        return 404
    if isinstance(e, (UsageError, BackendUnavailableError)):
        return 400
    if isinstance(e, LimitReached):
        return 422
    return 500


def error_body(status: int, message: str) -> dict:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def clip(text: str, limit: int = MAX_SHOWN) -> str:
    return text if len(text) <= limit else text[:limit] + "\u2026"


def shown(value: Any) -> str:
    """A client's value as an error message repeats it: quoted, at most MAX_SHOWN characters."""
    return clip(repr(value))


def private_roots(*dirs: Path | None) -> list[str]:
    """These folders of the server, its user's home and the temporary folder, as written and with
    links resolved: longest first, so that a folder inside another is replaced whole."""
    found = set()
    for d in (*dirs, Path.home(), Path(tempfile.gettempdir())):
        if d is not None:
            found |= {str(Path(d).expanduser()), str(Path(d).expanduser().resolve())}
    return sorted((r for r in found if len(r) > 1), key=len, reverse=True)


def public_message(message: str, roots: Iterable[str] = ()) -> str:
    """An error message as a client may see it: one line, no server folders, no long runs of its
    own input (a client's text reaches some messages unquoted, e.g. a knob's name)."""
    message = message[:4 * MAX_MESSAGE]  # what clipping would drop anyway; bounds the work below
    for root in roots:
        message = message.replace(root, "\u2026")
    message = ABS_PATH.sub(lambda m: "\u2026/" + m.group(1), message)
    message = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)
    message = LONG_RUN.sub(lambda m: clip(m.group()), message)
    return clip(message, MAX_MESSAGE)


def one_line(e: BaseException) -> str:
    if isinstance(e, TTSError):
        return str(e)
    return f"internal error: {type(e).__name__}: {e}"


class InternalErrors:
    """An exception that no route turned into a response becomes a 500 in the API's error shape:
    one line naming its type for the client, the traceback for the server's log (uvicorn would
    answer plain text, and Starlette's handler for Exception re-raises after answering)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        started = False

        async def watch(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as e:
            if started or scope["type"] != "http":
                raise  # the status line is gone: the connection closes without the body's end
            log.error("%s %s: %s", scope["method"], scope["path"], one_line(e), exc_info=True)
            message = f"internal error ({type(e).__name__}); the server's log has the details"
            await JSONResponse(error_body(500, message), status_code=500)(scope, receive, send)


def create_app(cfg: ServeConfig) -> FastAPI:
    app = FastAPI(title="ttscli", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(InternalErrors)
    roots = private_roots(cfg.voices_dir, cache_dir(), config_dir())

    def public(message: str) -> str:
        return public_message(message, roots)

    def fail(status: int, message: str, headers: dict | None = None):
        return JSONResponse(error_body(status, public(message)), status_code=status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc):  # unknown routes and methods, in the same error shape
        return fail(exc.status_code, str(exc.detail))

    @app.exception_handler(HTTPFailure)
    async def _failure(request, exc: HTTPFailure):
        return fail(exc.status, exc.message, exc.headers)

    @app.exception_handler(TTSError)
    async def _tts_error(request, exc: TTSError):  # e.g. an unknown model asked of /v1/audio/voices
        return fail(status_for(exc), one_line(exc))

    def authorized(request: Request) -> bool:
        if cfg.api_key is None:
            return True
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), cfg.api_key.encode())

    def authorize(request: Request) -> None:
        if not authorized(request):
            raise HTTPFailure(401, "missing or wrong API key; send the header Authorization: Bearer KEY",
                              {"WWW-Authenticate": "Bearer"})

    @app.get("/health")
    async def health(request: Request):
        """Liveness for anyone; the counters only for a client that may use the API."""
        if not authorized(request):
            return {"status": "ok"}
        out = {"status": "ok", "models": {m: w.status() for m, w in cfg.workers.items()}}
        if cfg.connections is not None:
            out["connections"] = cfg.connections.snapshot()
        return out

    @app.get("/metrics")
    async def metrics(request: Request):
        """Prometheus' text format; behind the API key like the API (its counters describe the traffic)."""
        authorize(request)
        from fastapi.responses import PlainTextResponse

        from ttscli.serve.observe import CONTENT_TYPE, RequestMetrics, render

        page = render(cfg.metrics or RequestMetrics(), cfg.workers, cfg.connections)
        return PlainTextResponse(page, media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})

    @app.get("/v1/models")
    async def list_models(request: Request):
        authorize(request)
        return {"object": "list", "data": [model_card(cfg, m) for m in cfg.workers]}

    @app.get("/v1/models/{name:path}")
    async def retrieve_model(request: Request, name: str):
        """One served model by its id or an alias (OpenAI's model names mean the default model,
        and answer under the name asked, with ``root`` naming the model that speaks)."""
        authorize(request)
        return {**model_card(cfg, resolve_model(cfg, name)), "id": name}

    @app.get("/v1/audio/voices")
    async def list_voices(request: Request, model: str | None = None):
        authorize(request)
        ids = [resolve_model(cfg, model)] if model else list(cfg.workers)
        out = []
        for m in ids:
            out += [{"id": v, "model": m, "kind": "preset"} for v in preset_voices(cfg, m)]
            if cfg.specs[m].can("clone"):
                out += [{"id": v, "model": m, "kind": "saved"} for v in saved_voices(cfg)]
        return {"object": "list", "data": out}

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        return await speak(request, captioned=False)

    @app.post("/dev/captioned_speech")
    async def captioned_speech(request: Request):
        """Kokoro-FastAPI's route: /v1/audio/speech with ``return_timestamps`` true by default."""
        return await speak(request, captioned=True)

    async def speak(request: Request, captioned: bool):
        authorize(request)
        try:
            fields_, upload = await read_body(request, cfg.max_body)
            if captioned:
                fields_.setdefault("return_timestamps", True)
            model_id, req, reply = await build_request(cfg, fields_, upload)
        except HTTPFailure:
            raise
        except Exception as e:  # noqa: BLE001 - every request error becomes an HTTP status through status_for
            raise HTTPFailure(status_for(e), one_line(e)) from None
        worker = cfg.workers[model_id]
        try:
            job = worker.submit(req, asyncio.get_running_loop())
        except QueueFull as e:
            raise HTTPFailure(503, str(e), {"Retry-After": str(e.retry_after)}) from None
        try:
            first = await next_item(job, request)
        except BaseException:
            worker.cancel(job)
            raise
        if first is None:                    # the client left while waiting
            worker.cancel(job)
            return fail(499, "client closed the request")
        if isinstance(first, BaseException):
            log.info("%s: %s", model_id, one_line(first))
            return fail(status_for(first), one_line(first))
        if first is DONE:
            return fail(400, "the text has nothing the voice can speak (only punctuation or symbols?)")
        buf = io.BytesIO() if reply.whole and reply.fmt != "wav" else None   # the muxer seeks back in it
        enc = make_encoder(reply.fmt, worker.pipeline.sample_rate, reply.rate, out=buf)
        if reply.volume != 1.0:
            enc = Gain(enc, reply.volume)
        headers = {"X-Sample-Rate": str(reply.rate), "Cache-Control": "no-store"}
        if reply.ignored:
            headers[IGNORED_HEADER] = ", ".join(reply.ignored)
        if cfg.random_weights:
            headers[RANDOM_HEADER] = "true"
        words = Timed(req.text, req.language, cfg, worker.pipeline) if reply.words else None
        if reply.whole:
            got = await whole_body(job, request, worker, enc, first, buf, words)
            if got is None:
                return fail(499, "client closed the request")
            if isinstance(got, BaseException):
                log.info("%s: %s", model_id, one_line(got))
                return fail(status_for(got), one_line(got))
            if words is not None:
                try:
                    timestamps = words.captions(await words.finish())
                except Exception as e:  # noqa: BLE001 - the aligner's failure, answered with its status
                    return fail(status_for(e), one_line(e))
                return JSONResponse({"audio": base64.b64encode(got).decode(), "audio_format": reply.fmt,
                                     "timestamps": timestamps}, headers=headers)
            return Response(got, media_type=content_type(reply.fmt), headers=headers)
        body = (sse_events(job, request, worker, enc, first, public, words) if reply.sse
                else audio_bytes(job, request, worker, enc, first))
        media = "text/event-stream" if reply.sse else content_type(reply.fmt)
        return StreamingResponse(body, media_type=media, headers=headers)

    from ttscli.serve.playground import add_pages
    from ttscli.serve.stream import add_stream_route

    add_stream_route(app, cfg, authorized, public)

    add_pages(app, api_key=cfg.api_key is not None)
    return app


async def next_item(job, request):
    """The job's next chunk, DONE or exception; None if the client disconnected meanwhile."""
    while True:
        try:
            return await asyncio.wait_for(job.out.get(), POLL_S)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                return None


class Timed:
    """The words of a ``return_timestamps`` request: taken from the engine's timed chunks, or,
    for a model without durations, found by the forced aligner in the whole audio once it is
    complete (its samples are kept for that)."""

    def __init__(self, text: str, language: str | None, cfg: ServeConfig, pipeline):
        self.text, self.language, self.cfg = text, language, cfg
        self.sample_rate = pipeline.sample_rate
        self.words: list = []
        self.audio: list | None = None if pipeline.word_durations else []

    def take(self, item):
        """The samples of one item of the job (a timed Chunk or plain audio); its words kept."""
        from ttscli.generate import Chunk

        if isinstance(item, Chunk):
            self.words.extend(item.words)
            item = item.audio
        if self.audio is not None:
            self.audio.append(item)
        return item

    def fresh(self) -> list:
        """The words taken since the last call (the SSE side sends each once)."""
        out, self.words = self.words, []
        return out

    async def finish(self) -> list:
        """The remaining words, the aligner's where the model has no durations."""
        if self.audio is None:
            return self.fresh()
        from starlette.concurrency import run_in_threadpool

        import numpy as np

        audio = np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)
        align = await run_in_threadpool(self.cfg.aligner)
        return await run_in_threadpool(align, audio, self.sample_rate, self.text, self.language)

    @staticmethod
    def captions(words) -> list[dict]:
        """Kokoro-FastAPI's timestamp objects."""
        return [{"word": w.word, "start_time": round(w.start, 3), "end_time": round(w.end, 3)} for w in words]


def _plain(item, words: Timed | None):
    return words.take(item) if words is not None else item


async def whole_body(job, request, worker, enc, first, buf=None, words: Timed | None = None):
    """The whole file with its true sizes, once generation has ended (a WAV's header rewritten;
    a compressed format's muxer finishing its headers in ``buf``); None if the client left, or
    the exception that ended generation (still answerable with a status: nothing was sent).
    ``words`` collects a timestamps request's words on the way."""
    parts = [enc.push(_plain(first, words))]
    try:
        while True:
            item = await next_item(job, request)
            if item is None or isinstance(item, BaseException):
                return item
            if item is DONE:
                break
            parts.append(enc.push(_plain(item, words)))
    finally:
        worker.cancel(job)
    parts.append(enc.finish())
    if buf is not None:
        return buf.getvalue()
    body = b"".join(parts)
    return enc.header() + body[len(enc.header()):]


async def audio_bytes(job, request, worker, enc, first):
    try:
        data = enc.push(first)
        if data:
            yield data
        while True:
            item = await next_item(job, request)
            if item is None:
                return
            if item is DONE:
                tail = enc.finish()
                if tail:
                    yield tail
                return
            if isinstance(item, BaseException):
                # the status line is gone: end the stream without its terminating chunk, so the
                # client sees an incomplete response instead of a short file
                log.warning("%s: %s", worker.model_id, one_line(item))
                raise RuntimeError(one_line(item))
            data = enc.push(item)
            if data:
                yield data
    finally:
        worker.cancel(job)


def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _delta(audio: bytes) -> bytes:
    return _event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})


def _words_event(words) -> bytes:
    return _event({"type": "speech.words", "words": Timed.captions(words)})


async def sse_events(job, request, worker, enc, first, public, words: Timed | None = None):
    """The encoder's bytes as ``speech.audio.delta`` events, as they come (a compressed format's
    encoder may hold a chunk back: no empty delta is sent), then ``speech.audio.done``. With
    ``words``: a ``speech.words`` event after the audio that carries them (the aligner's, for a
    model without durations, all before ``speech.audio.done``)."""
    try:
        data = enc.push(_plain(first, words))
        if data:
            yield _delta(data)
        if words is not None and words.words:
            yield _words_event(words.fresh())
        while True:
            item = await next_item(job, request)
            if item is None:
                return
            if item is DONE:
                tail = enc.finish()   # the resampler's last samples, a muxer's last packets
                if tail:
                    yield _delta(tail)
                if words is not None:
                    try:
                        last = await words.finish()
                    except Exception as e:  # noqa: BLE001 - the status line is gone: an error event
                        yield _event({"type": "error",
                                      "error": error_body(status_for(e), public(one_line(e)))["error"]})
                        return
                    if last:
                        yield _words_event(last)
                yield _event({"type": "speech.audio.done", "sample_rate": enc.sample_rate,
                              "duration_s": round(enc.samples / enc.sample_rate, 3)})
                return
            if isinstance(item, BaseException):
                log.warning("%s: %s", worker.model_id, one_line(item))
                note_error()
                yield _event({"type": "error", "error": error_body(status_for(item), public(one_line(item)))["error"]})
                return
            data = enc.push(_plain(item, words))
            if data:
                yield _delta(data)
            if words is not None and words.words:
                yield _words_event(words.fresh())
    finally:
        worker.cancel(job)


# ---- request bodies ---------------------------------------------------------------------------

async def read_body(request, limit: int) -> tuple[dict, tuple[str, bytes] | None]:
    """The fields of a JSON or multipart body, read with a bound; and an uploaded reference.

    Multipart is for a reference upload only: it is what a web page's form can post anywhere
    without asking (as are urlencoded and text/plain bodies, refused outright), so any other
    request must be JSON, which a browser sends cross-origin only after a CORS preflight."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in ("application/json", "multipart/form-data", "") and not ctype.endswith("+json"):
        raise HTTPFailure(415, "send the request as application/json or multipart/form-data (with a ref_audio "
                               f"upload), not {shown(ctype)}")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HTTPFailure(413, f"request body is {int(declared):,} bytes; the limit is {limit:,} bytes")
    chunks, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise HTTPFailure(413, f"request body is over the limit of {limit:,} bytes")
        chunks.append(part)
    body = b"".join(chunks)
    if ctype == "multipart/form-data":
        data, upload = await _form(request, body)
        if upload is None:
            raise HTTPFailure(415, "multipart/form-data is for requests that upload ref_audio; "
                                   "send the others as application/json")
        return data, upload
    data = parse_json(body)
    if not isinstance(data, dict):
        raise HTTPFailure(400, "request body must be a JSON object with at least `input`")
    upload = None
    if data.get("ref_audio") is not None:
        raw = data.pop("ref_audio")
        if not isinstance(raw, str):
            raise UsageError("ref_audio must be the reference audio file, base64-encoded")
        try:
            upload = ("ref_audio", base64.b64decode(raw, validate=True))
        except ValueError:
            raise UsageError("ref_audio is not valid base64; send the audio file's bytes base64-encoded") from None
    return data, upload


async def _form(request, body: bytes):
    sent = False

    async def replay():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, replay).form(max_files=1, max_fields=64)
    except Exception as e:  # noqa: BLE001 - Starlette's multipart parser raises many types; all mean a malformed body
        raise HTTPFailure(400, f"malformed multipart body: {getattr(e, 'detail', e)}") from None
    data, upload = {}, None
    for key, value in form.multi_items():
        if hasattr(value, "read"):
            if key != "ref_audio":
                raise HTTPFailure(400, f"unexpected file field {shown(key)}; the reference goes in `ref_audio`")
            upload = (value.filename or "ref_audio", await value.read())
        else:
            data[key] = value
    return data, upload


def parse_json(body: bytes) -> Any:
    """The body as JSON, or a 400. Refused here so that nothing later meets them: NaN and
    Infinity (not JSON), integers longer than MAX_DIGITS and floats past float's range (no field
    takes them; a huge integer overflows float()), strings that are not Unicode text (a lone
    surrogate escape) and nesting deeper than MAX_DEPTH (recursion, in the parser or after it)."""
    try:
        data = json.loads(body, parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_finite_float)
    except RecursionError:
        raise HTTPFailure(400, f"request body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise HTTPFailure(400, f"request body is not valid JSON: {str(e).splitlines()[0]}") from None
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                raise HTTPFailure(400, "request body has a string with a lone surrogate (\\ud800-\\udfff); "
                                       "send UTF-8 text") from None
        elif isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                raise HTTPFailure(400, f"request body is nested deeper than {MAX_DEPTH} levels")
            items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
            stack += [(x, depth + 1) for x in items]
    return data


def _no_constant(name: str):
    raise HTTPFailure(400, f"request body has {name}, which is not JSON (JSON numbers are finite)")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise HTTPFailure(400, f"request body has an integer of {len(text.lstrip('-')):,} digits; "
                               f"no field takes more than {MAX_DIGITS}")
    return int(text)


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise HTTPFailure(400, f"request body has a number past the range of a float: {clip(text)}")
    return x


def resolve_model(cfg: ServeConfig, name: Any) -> str:
    if name is None or name in OPENAI_MODELS:
        return cfg.default_model
    if not isinstance(name, str):
        raise UsageError("model must be a string")
    if name in cfg.workers:
        return name
    try:
        spec = cfg.registry.resolve(name)
    except TTSError:
        spec = None
    if spec is not None and spec.id in cfg.workers:
        return spec.id
    hint = name if name.isprintable() and len(name) <= MAX_SHOWN else "MODEL"
    raise ModelNotFoundError(f"model {shown(name)} is not served here (serving: {', '.join(cfg.workers)}; "
                             f"start `ttscli serve -m {hint}` to serve it)")


def model_card(cfg: ServeConfig, model_id: str) -> dict:
    """A served model in OpenAI's model shape, plus what a request to it may carry: its rate,
    the common fields it honours and its settings (each a request field of the same name)."""
    from ttscli.generate import honoured

    spec, family = cfg.specs[model_id], cfg.families[model_id]
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "ttscli", "root": model_id,
            "sample_rate": cfg.workers[model_id].pipeline.sample_rate,
            "honours": [API_FIELDS.get(n, n) for n in honoured(spec, family) if n != "save_voice"],
            "settings": [k.name for k in family.knobs], "random_weights": cfg.random_weights,
            **model_extras(cfg, model_id)}


def preset_voices(cfg: ServeConfig, model_id: str) -> list[str]:
    spec, fam = cfg.specs[model_id], cfg.families[model_id]
    return list(fam.voices(spec, None) if fam.voices else spec.voices)


def model_extras(cfg: ServeConfig, model_id: str) -> dict:
    """What a client needs to offer a model's choices (the playground's pickers): its voices,
    whether it clones from a reference upload, and the response formats this server can write."""
    clone = cfg.specs[model_id].can("clone")
    return {"voices": preset_voices(cfg, model_id) + (saved_voices(cfg) if clone else []),
            "clone": clone, "response_formats": writable_formats()}


def writable_formats() -> list[str]:
    out = []
    for fmt in RESPONSE_FORMATS:
        try:
            check_format(fmt)
        except TTSError:
            continue
        out.append(fmt)
    return out


def saved_voices(cfg: ServeConfig) -> list[str]:
    d = cfg.voices_dir
    if d is None or not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.safetensors") if SAVED_VOICE.match(p.stem))


def map_voice(cfg: ServeConfig, model_id: str, voice: Any, ignored: list[str]) -> str | None:
    """OpenAI's voice field: a preset of the model, a saved voice by name, or OpenAI's own names
    (the model's default voice, and `voice` reported ignored). Never a path: a client must not
    make the server read files."""
    if voice is None or voice == "":
        return None
    if not isinstance(voice, str):
        raise UsageError("voice must be a string (a preset or saved voice name)")
    presets = preset_voices(cfg, model_id)
    if voice.lower() in (v.lower() for v in presets):
        return voice
    if cfg.specs[model_id].can("clone") and SAVED_VOICE.match(voice) and cfg.voices_dir is not None:
        path = cfg.voices_dir / f"{voice}.safetensors"
        if path.is_file():
            return str(path)
    if voice.lower() in OPENAI_VOICES:
        ignore(cfg, cfg.specs[model_id], "voice", ignored, f" {shown(voice)} (an OpenAI voice)")
        return None
    if "/" in voice or "\\" in voice or voice.endswith(".safetensors"):
        raise UsageError(f"voice {shown(voice)}: give a preset or saved voice name, not a path "
                         "(see GET /v1/audio/voices)")
    return voice  # check_request names the voices the model has


def _number(data: dict, name: str, kind: type, lo: float, hi: float):
    v = data.get(name)
    if v is None:
        return None
    try:
        if isinstance(v, bool) or (kind is int and isinstance(v, float) and not v.is_integer()):
            raise ValueError
        x = kind(v)
    except (TypeError, ValueError):
        raise UsageError(f"{name} takes {'an' if kind is int else 'a'} {kind.__name__}, not {shown(v)}") from None
    if isinstance(x, float) and not math.isfinite(x) or not lo <= x <= hi:
        raise UsageError(f"{name} must be in [{lo:g}..{hi:g}], got {clip(str(v))}")
    return x


def ignore(cfg: ServeConfig, spec, name: str, ignored: list[str], what: str = "") -> None:
    """Note a field this model cannot honour as ignored; under --strict, refuse it instead."""
    if cfg.strict:
        raise UsageError(f"{spec.id} cannot honour `{name}`{what}; drop it (see GET /v1/models/{spec.id}; "
                         "this server runs with --strict, which refuses what it would ignore)")
    ignored.append(name)


def _instructions(cfg: ServeConfig, spec, family, data: dict, ignored: list[str]) -> str | None:
    """OpenAI's ``instructions``: passed on to a model that takes them, else ignored (OpenAI's own
    tts-1 ignores them too) and reported."""
    from ttscli.generate import honoured
    from ttscli.text import check_text

    instruct = data.get("instructions")
    if instruct is None or instruct == "":
        return None
    if not isinstance(instruct, str):
        raise UsageError("instructions must be a string")
    instruct = check_text(instruct, "instructions")
    if "instruct" in honoured(spec, family):
        return instruct
    ignore(cfg, spec, "instructions", ignored)
    return None


def _lang_code(spec, data: dict) -> str | None:
    """Kokoro-FastAPI's one-letter ``lang_code`` as the language it names, checked against
    ``language`` when both are given."""
    code, language = data.get("lang_code"), data.get("language")
    if code is None:
        return language
    if not isinstance(code, str) or code.lower() not in LANG_CODES:
        raise UsageError(f"lang_code must be one of {', '.join(LANG_CODES)} (Kokoro's language letters), "
                         f"not {shown(code)}")
    named = LANG_CODES[code.lower()]
    if language is not None and str(language).lower() != named:
        raise UsageError(f"lang_code {code!r} means {named}, but language is {shown(language)}; send one of them")
    known = [x.lower() for x in spec.languages]
    if known and named not in known:
        raise UsageError(f"{spec.id} does not speak lang_code {code!r} ({named}); it takes "
                         f"{', '.join(spec.languages)} (see GET /v1/models/{spec.id})")
    return named


def _kokoro_extras(cfg: ServeConfig, spec, data: dict, fmt: str, ignored: list[str]) -> float:
    """Check Kokoro-FastAPI's extra fields (`lang_code` is read with `language`): the volume to
    apply; ``download_format`` other than the response's and ``normalization_options`` are
    reported ignored, a download link (a file kept on the server) is refused."""
    link = data.get("return_download_link")
    if link is not None and not isinstance(link, bool):
        raise UsageError(f"return_download_link must be true or false, not {shown(link)}")
    if link:
        raise UsageError("return_download_link: this server keeps no files to download; the audio is the "
                         "response body (send false or leave it out)")
    download = data.get("download_format")
    if download is not None:
        if str(download).lower() not in RESPONSE_FORMATS:
            raise UsageError(f"download_format must be one of {', '.join(RESPONSE_FORMATS)}, not {shown(download)}")
        if str(download).lower() != fmt:
            ignore(cfg, spec, "download_format", ignored)
    norm = data.get("normalization_options")
    if norm is not None:
        if not isinstance(norm, dict):
            raise UsageError("normalization_options must be an object of true/false switches")
        for key, value in norm.items():
            if key not in NORMALIZATION_OPTIONS:
                raise UsageError(f"normalization_options has no switch {shown(key)} "
                                 f"(it has {', '.join(NORMALIZATION_OPTIONS)})")
            if not isinstance(value, bool):
                raise UsageError(f"normalization_options.{key} must be true or false, not {shown(value)}")
        ignore(cfg, spec, "normalization_options", ignored)
    volume = _number(data, "volume_multiplier", float, 0.0, MAX_VOLUME)
    return 1.0 if volume is None else volume


def input_text(cfg: ServeConfig, data: dict) -> str:
    """The body's ``input``, checked as the CLI checks text, within --max-input-chars."""
    from ttscli.text import check_text

    text = data.get("input")
    if not isinstance(text, str):
        raise UsageError("no text: give it as `input` (a string)")
    text = check_text(text)
    if len(text) > cfg.max_input_chars:
        raise InputTooLongError(f"input is {len(text):,} characters; this server takes at most "
                                f"{cfg.max_input_chars:,} (ttscli serve --max-input-chars)")
    return text


async def build_request(cfg: ServeConfig, data: dict, upload, text: str | None = None):
    """(model id, checked Request, how the reply carries the audio) from the body's fields.
    ``text``: what to say, where it does not come from the body's ``input`` (a stream's
    settings are checked before its text arrives)."""
    from starlette.concurrency import run_in_threadpool

    from ttscli.generate import Request, check_request, honoured, needs_ref_text, plain_request
    from ttscli.ssml import looks_like_ssml
    from ttscli.text import check_text

    model_id = resolve_model(cfg, data.get("model"))
    spec, family = cfg.specs[model_id], cfg.families[model_id]
    if text is None:
        text = input_text(cfg, data)
    ignored: list[str] = []
    instruct = _instructions(cfg, spec, family, data, ignored)
    fmt = check_format(data.get("response_format") or "mp3")
    stream_format = str(data.get("stream_format") or "audio").lower()
    if stream_format not in ("audio", "sse"):
        raise UsageError(f"stream_format must be audio or sse, not {shown(stream_format)}")
    rate = _number(data, "sample_rate", int, MIN_RATE, MAX_RATE) or DEFAULT_RATE
    stream = data.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise UsageError(f"stream must be true or false, not {shown(stream)}")
    volume = _kokoro_extras(cfg, spec, data, fmt, ignored)
    speed = _number(data, "speed", float, 0.25, 4.0)
    seed = _number(data, "seed", int, 0, 2**32 - 1)
    max_frames = _number(data, "max_frames", int, 1, 1 << 20)
    language = _lang_code(spec, data)
    if language is not None and not isinstance(language, str):
        raise UsageError("language must be a string")
    normalize_text = data.get("normalize_text", True)
    if not isinstance(normalize_text, bool):
        raise UsageError(f"normalize_text must be true or false, not {shown(normalize_text)}")
    sentence_silence = _number(data, "sentence_silence", float, 0.0, MAX_PAUSE_S) or 0.0
    knobs = {k: v for k, v in data.items() if k not in FIELDS}
    local = [k for k in knobs if (kn := family.knob(k)) is not None and kn.local_file]
    if local:
        raise UsageError(f"{local[0]} names a file on the server's machine, which the server never reads; "
                         "use it from the command line or the library")
    ref_text = data.get("ref_text")
    if ref_text is not None:
        if not isinstance(ref_text, str):
            raise UsageError("ref_text must be a string")
        ref_text = check_text(ref_text, "ref_text")
    voice = map_voice(cfg, model_id, data.get("voice"), ignored)
    sse = stream_format == "sse"
    words = data.get("return_timestamps", False)
    if not isinstance(words, bool):
        raise UsageError(f"return_timestamps must be true or false, not {shown(words)}")
    # timestamps outside SSE: one JSON body (Kokoro-FastAPI's captioned shape), so the whole audio
    whole = (fmt in ("wav", "flac") and not stream or words) and not sse
    reply = Reply(fmt, rate, sse=sse, whole=whole, volume=volume, ignored=tuple(ignored), words=words)
    req = Request(text=text, voice=voice, instruct=instruct,
                  language=language or None, seed=seed, speed=speed if speed is not None else 1.0,
                  max_frames=max_frames, knobs=knobs, normalize_text=normalize_text, ssml=looks_like_ssml(text),
                  sentence_silence=sentence_silence)
    if upload is not None:
        if not spec.can("clone"):
            raise UsageError(f"{spec.id} cannot clone voices; pick a model with clone support (see `ttscli models`)")
        if ref_text is None and needs_ref_text(family, family.check_knobs(knobs, spec.id, API_NAMING)):
            raise UsageError("give ref_text (the reference transcript) for in-context cloning, "
                             "or x_vector_only: true")
        mono, sr = await run_in_threadpool(_reference, upload, float(spec.defaults.get("max_ref_seconds", 30.0)))
        req.ref_audio, req.ref_sample_rate, req.ref_text = mono, sr, ref_text
    elif ref_text is not None:
        raise UsageError("ref_text goes with ref_audio (the reference recording)")
    req.stream = "stream" in honoured(spec, family)
    req.timestamps = words
    req = check_request(spec, family, req, API_NAMING)
    if cfg.random_weights:
        run_fixed_frames(req, family)
    pipeline = cfg.workers[model_id].pipeline
    if words and not pipeline.word_durations:
        await run_in_threadpool(cfg.aligner)   # its absence is a 400 now, not an error after the audio
    if pipeline.rows() is not None:
        plain_request(spec, req)     # rows of one batch hold no pauses: refused here, before any audio
    if req.ref_audio is not None:
        rate = cfg.workers[model_id].pipeline.ref_sample_rate or req.ref_sample_rate
        from ttscli.audio import resample

        req.ref_audio = await run_in_threadpool(resample, req.ref_audio, req.ref_sample_rate, rate)
        req.ref_sample_rate = rate
    return model_id, req, reply


def run_fixed_frames(req, family) -> None:
    """At random weights a model that makes frames never says stop: without this every request
    would run to the model's longest and end in the max-frames error. Instead it runs exactly its
    ``max_frames`` (RANDOM_WEIGHTS_FRAMES unless it asks), as ``ttscli bench --random-weights``
    times them, so a load test's requests are of a length it chose and all succeed."""
    from ttscli.models.base import RANDOM_WEIGHTS_FRAMES

    if "max_frames" in family.honours:
        req.ignore_eos = True
        req.max_frames = req.max_frames or RANDOM_WEIGHTS_FRAMES


def _reference(upload: tuple[str, bytes], max_seconds: float):
    """Decode an uploaded reference with the CLI's checks; messages name the upload, not a temp path."""
    from ttscli.audio import read_reference

    name = Path(upload[0]).name or "ref_audio"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:100] or "ref_audio"
    with tempfile.TemporaryDirectory(prefix="ttscli-ref-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(upload[1])
        try:
            return read_reference(path, max_seconds=max_seconds)
        except TTSError as e:
            raise type(e)(str(e).replace(str(path), f"upload {name}")) from None

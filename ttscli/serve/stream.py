"""``/v1/audio/speech/stream``: streaming text input over a WebSocket (text deltas in, audio out).

The text arrives in deltas (an LLM's tokens); the library's :class:`ttscli.stream_input.SentenceBuffer`
finds each sentence as soon as it is complete, and each sentence is one job of the model's worker,
as a POST /v1/audio/speech request is. The model's thread therefore never waits on a client's
next token (other requests keep their turns meanwhile), and a sentence queues, batches and times
out like any request. Sentences are spoken one after another and joined with
:class:`ttscli.stream_input.SentenceJoin`, the same crossfade :func:`ttscli.synthesize_stream`
puts between them, so the audio equals the library's for the same deltas.

Audio goes out as binary frames, in the ``response_format`` asked (``pcm``, the default: signed
16-bit little-endian mono). Binary frames carry it without base64's extra third and the decode
on the client, and a WebSocket keeps its messages apart, so the audio needs no envelope: a
client tells audio from control messages by the frame's kind.

Every read is bounded: a message is at most MAX_MESSAGE bytes (the protocol drops a message
over MAX_FRAMES_BYTES without reading it), and a client that sends nothing for
``idle_timeout`` seconds while nothing is being spoken, or reads nothing for as long while
audio waits, is closed. Host, Origin and the connection cap apply as to every request
(guard.py, protocol.py); the API key is checked before the handshake completes.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from fastapi import WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from ttscli.errors import TTSError
from ttscli.generate import Chunk
from ttscli.serve.app import (
    HTTPFailure,
    ServeConfig,
    Timed,
    build_request,
    error_body,
    one_line,
    parse_json,
    shown,
    status_for,
)
from ttscli.serve.worker import DONE, QueueFull
from ttscli.stream_input import EMPTY_STREAM, PROBE_TEXT, SentenceBuffer, SentenceJoin, StreamLimits, sentence_request

log = logging.getLogger("ttscli.serve")

PATH = "/v1/audio/speech/stream"
MAX_MESSAGE = 64 << 10         # bytes of one client message: a start message or a delta is far smaller
MAX_FRAMES_BYTES = 4 * MAX_MESSAGE   # the protocol's own bound, past which a message is not even read
# POST /v1/audio/speech fields with no meaning here: the text comes in deltas, the audio as frames,
# and a reference upload does not fit a message (a saved voice clones instead)
NOT_HERE = ("input", "stream", "stream_format", "ref_audio", "ref_text")
NORMAL_CLOSE = 1000


def close_code(status: int) -> int:
    """The WebSocket close code for an error's HTTP status: message too big, try again later
    (a full queue), a server error, else a policy violation (the client's input)."""
    if status == 413:
        return 1009
    if status == 503:
        return 1013
    return 1011 if status >= 500 else 1008


class StreamFailure(Exception):
    """Ends the stream with an error message in OpenAI's shape and the matching close code."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class ClientGone(Exception):
    """The client closed the socket: nothing more to send, and its synthesis stops."""


@dataclass
class Said:
    """What the stream has said so far, for the ``done`` message."""

    characters: int = 0
    sentences: int = 0


class StreamSession:
    """One WebSocket stream: a reader task (messages in, sentences to ``todo``) and a speaker task
    (each sentence through the worker, its audio out); the first to fail ends both."""

    def __init__(self, ws: WebSocket, cfg: ServeConfig, public, idle_timeout: float):
        self.ws, self.cfg, self.public = ws, cfg, public
        self.idle_timeout = idle_timeout
        self.todo: asyncio.Queue = asyncio.Queue()   # ("say", sentence) | ("flush",) | ("end",)
        self.speaking = False
        self.said = Said()

    # ---- the whole stream
    async def run(self) -> None:
        try:
            await self.start(await self.receive())
            await self.both()
        except ClientGone:
            return
        except StreamFailure as e:
            await self.fail(e.status, e.message)
        except Exception as e:  # anything else is the server's fault: logged, one line out
            log.error("%s: %s", PATH, one_line(e), exc_info=True)
            await self.fail(500, f"internal error ({type(e).__name__}); the server's log has the details")

    async def both(self) -> None:
        reader = asyncio.create_task(self.read_messages())
        speaker = asyncio.create_task(self.speak())
        try:
            await asyncio.wait({reader, speaker}, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in (reader, speaker):
                task.cancel()
            await asyncio.gather(reader, speaker, return_exceptions=True)
        for task in (reader, speaker):
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()

    async def fail(self, status: int, message: str) -> None:
        """The error message, then the close; nothing if the client has gone meanwhile."""
        body = error_body(status, self.public(message))
        try:
            await self.send(self.ws.send_json({"type": "error", **body}))
            await self.send(self.ws.close(close_code(status)))
        except ClientGone:
            pass  # the client left (or stalled) first: there is no one to tell

    # ---- client messages
    async def receive(self) -> dict:
        """The next message as a JSON object; waits past the idle timeout only while speaking."""
        while True:
            try:
                message = await asyncio.wait_for(self.ws.receive(), self.idle_timeout)
                break
            except asyncio.TimeoutError:
                if not (self.speaking or not self.todo.empty()):
                    raise StreamFailure(408, f"no message for {self.idle_timeout:g} s; the stream is closed "
                                             "(ttscli serve --ws-idle-timeout)") from None
        if message["type"] == "websocket.disconnect":
            raise ClientGone
        text = message.get("text")
        if text is None:
            raise StreamFailure(400, "send JSON text messages; binary messages carry nothing here")
        size = len(text.encode("utf-8", errors="surrogatepass"))
        if size > MAX_MESSAGE:
            raise StreamFailure(413, f"a message of {size:,} bytes; the limit is {MAX_MESSAGE:,} bytes "
                                     "(send the text in smaller deltas)")
        try:
            data = parse_json(text.encode("utf-8", errors="surrogatepass"))
        except HTTPFailure as e:
            raise StreamFailure(e.status, e.message.replace("request body", "message")) from None
        if not isinstance(data, dict):
            raise StreamFailure(400, 'a message must be a JSON object with a "type"')
        return data

    async def start(self, data: dict) -> None:
        """The first message's settings, checked as POST /v1/audio/speech checks its fields."""
        if data.get("type") != "start":
            raise StreamFailure(400, 'the first message must be {"type": "start", ...} with the stream\'s '
                                     f"settings, not type {shown(data.get('type'))}")
        fields = {k: v for k, v in data.items() if k != "type"}
        for name in NOT_HERE:
            if name in fields:
                raise StreamFailure(400, f"`{name}` has no place in a stream's start message (the text comes in "
                                         '{"type": "text"} messages, the audio as binary messages, and a voice to '
                                         "clone by its saved name)")
        fields["response_format"] = fields.get("response_format") or "pcm"
        try:
            self.model_id, self.request, self.reply = await build_request(self.cfg, fields, None, text=PROBE_TEXT)
        except HTTPFailure as e:
            raise StreamFailure(e.status, e.message) from None
        except Exception as e:  # noqa: BLE001 - every settings error becomes a status through status_for
            raise StreamFailure(status_for(e), one_line(e)) from None
        from ttscli.encode import make_encoder
        from ttscli.serve.app import Gain

        self.worker = self.cfg.workers[self.model_id]
        pipeline = self.worker.pipeline
        self.limits = StreamLimits()
        self.buffer = SentenceBuffer(self.limits)
        self.join = SentenceJoin(pipeline.sample_rate)
        enc = make_encoder(self.reply.fmt, pipeline.sample_rate, self.reply.rate)
        self.encoder = Gain(enc, self.reply.volume) if self.reply.volume != 1.0 else enc

    async def read_messages(self) -> None:
        """Deltas into sentences for the speaker, until ``end``."""
        while True:
            data = await self.receive()
            kind = data.get("type")
            if kind == "text":
                text = data.get("text")
                if not isinstance(text, str):
                    raise StreamFailure(400, f'a "text" message needs "text" (a string), not {shown(text)}')
                self.said.characters += len(text)
                self.queue_sentences(self.buffer.push, text)
            elif kind in ("flush", "end"):
                self.queue_sentences(self.buffer.flush)
                self.todo.put_nowait((kind,))
                if kind == "end":
                    return
            elif kind == "start":
                raise StreamFailure(400, 'a stream takes one "start" message, its first')
            else:
                raise StreamFailure(400, f'unknown message type {shown(kind)}; a stream takes "start", then "text", '
                                         '"flush" and "end"')

    def queue_sentences(self, step, *args) -> None:
        try:
            done = step(*args)
        except TTSError as e:   # the stream's text limits
            raise StreamFailure(status_for(e), one_line(e)) from None
        for sentence in done:
            self.todo.put_nowait(("say", sentence))

    # ---- audio out
    async def speak(self) -> None:
        """Each queued sentence, flush and end, in order."""
        while True:
            item = await self.todo.get()
            self.speaking = True
            if item[0] == "say":
                await self.say(item[1])
            elif item[0] == "flush":
                await self.send_audio(self.join.finish())
                await self.send_json({"type": "flushed", "duration_s": self.seconds()})
            else:
                await self.finish()
                return
            self.speaking = False

    async def say(self, sentence: str) -> None:
        """One sentence as a worker job; its audio joined to the stream's and sent as it comes."""
        from ttscli.generate import plain_request

        try:
            said = sentence_request(self.request, sentence, self.limits)
            if self.worker.pipeline.rows() is not None:
                plain_request(self.cfg.specs[self.model_id], said)   # rows of one batch hold no pauses
            job = self.worker.submit(said, asyncio.get_running_loop())
        except QueueFull as e:
            raise StreamFailure(503, str(e)) from None
        except TTSError as e:
            raise StreamFailure(status_for(e), one_line(e)) from None
        self.said.sentences += 1
        self.join.next_sentence()
        words = Timed(said.text, said.language, self.cfg, self.worker.pipeline) if self.reply.words else None
        try:
            while (item := await job.out.get()) is not DONE:
                if isinstance(item, BaseException):
                    log.info("%s: %s", self.model_id, one_line(item))
                    raise StreamFailure(status_for(item), one_line(item))
                audio = words.take(item) if words is not None else item
                await self.send_audio(self.join.push(Chunk(audio, words.fresh() if words is not None else [])))
        finally:
            self.worker.cancel(job)    # a client that left stops the sentence at its next chunk
        if words is not None and words.audio is not None:   # the aligner's words, once the audio is complete
            try:
                found = await words.finish()
            except Exception as e:  # noqa: BLE001 - the aligner's failure, with its status
                raise StreamFailure(status_for(e), one_line(e)) from None
            await self.send_words(self.join.place(found))

    async def finish(self) -> None:
        if not self.said.sentences:
            raise StreamFailure(400, EMPTY_STREAM)
        await self.send_audio(self.join.finish())
        tail = self.encoder.finish()
        if tail:
            await self.send(self.ws.send_bytes(tail))
        await self.send_json({"type": "done", "sample_rate": self.encoder.sample_rate,
                              "duration_s": self.seconds(),
                              "usage": {"input_characters": self.said.characters,
                                        "sentences": self.said.sentences},
                              **({"ignored_fields": list(self.reply.ignored)} if self.reply.ignored else {})})
        await self.send(self.ws.close(NORMAL_CLOSE))

    def seconds(self) -> float:
        return round(self.encoder.samples / self.encoder.sample_rate, 3)

    async def send_audio(self, chunk: Chunk) -> None:
        if len(chunk.audio):
            data = self.encoder.push(chunk.audio)
            if data:
                await self.send(self.ws.send_bytes(data))
        await self.send_words(chunk.words)

    async def send_words(self, words: list) -> None:
        if words:
            await self.send_json({"type": "words", "words": [
                {"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3)} for w in words]})

    async def send_json(self, obj: dict) -> None:
        await self.send(self.ws.send_json(obj))

    async def send(self, sending) -> None:
        """One send, bounded: a client that reads nothing for ``idle_timeout`` seconds is gone."""
        try:
            await asyncio.wait_for(sending, self.idle_timeout)
        except asyncio.TimeoutError:
            raise ClientGone from None
        except (WebSocketDisconnect, RuntimeError, OSError) as e:   # the client closed the socket meanwhile
            raise ClientGone from e


def add_stream_route(app, cfg: ServeConfig, authorized, public) -> None:
    @app.websocket(PATH)
    async def speech_stream(ws: WebSocket):
        """Text deltas in, audio out, over a WebSocket (JSON text messages in; binary audio and
        JSON messages out).

        In: ``{"type": "start", ...}`` first, once, with the fields of POST /v1/audio/speech
        less ``input``, ``stream``, ``stream_format``, ``ref_audio`` and ``ref_text``
        (``response_format`` defaults to ``pcm``, ``sample_rate`` to 24000); then
        ``{"type": "text", "text": "..."}`` deltas, each sentence spoken as soon as it is
        complete; ``{"type": "flush"}`` to speak what has arrived, an unfinished sentence too;
        ``{"type": "end"}`` to speak the rest and finish.

        Out: binary messages with the audio in ``response_format``; ``{"type": "words",
        "words": [{"word", "start", "end"}]}`` with ``return_timestamps`` (seconds from the
        stream's start); ``{"type": "flushed", "duration_s"}`` once the audio of the text
        before a flush is out (at a ``sample_rate`` other than the model's, less the
        resampler's few milliseconds of delay, which follow with the next audio or the end);
        ``{"type": "done", "sample_rate", "duration_s", "usage": {"input_characters",
        "sentences"}}`` then close 1000. An error is one ``{"type":
        "error", "error": {"message", "type", "param", "code"}}`` message, then close 1008 (the
        client's input), 1009 (a message over 64 KiB), 1013 (the model's queue is full) or
        1011 (the server's fault). A wrong API key is refused before the handshake (HTTP 401).
        """
        if not authorized(ws):
            body = error_body(401, "missing or wrong API key; send the header Authorization: Bearer KEY")
            await ws.send_denial_response(JSONResponse(body, status_code=401,
                                                       headers={"WWW-Authenticate": "Bearer"}))
            return
        await ws.accept()
        await StreamSession(ws, cfg, public, cfg.stream_idle_timeout).run()


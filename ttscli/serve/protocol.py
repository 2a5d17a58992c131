"""uvicorn's h11 protocol with every read bounded in time, and a cap on open connections.

uvicorn closes an idle keep-alive connection and bounds nothing else: a client that sends its
request head a byte at a time, or a body that never ends (a short Content-Length body, a chunked
body without its last chunk), keeps its connection, a file descriptor and its buffers for as long
as it likes, and a few hundred such clients exhaust the process's descriptors. This protocol adds:

- a head deadline: the request line and headers must be complete ``header_timeout`` seconds
  after the connection opens, or after the first byte of a later request on it; else it closes;
- a body deadline: the whole body must arrive ``body_timeout`` seconds after its head; else the
  request gets 408 (when its response has not started) and the connection closes;
- a cap on open connections: at ``max_connections`` a new connection closes one that has no
  request in progress, the oldest of the first kind there is: one that has sent part of a request
  head (a slow sender: whole clients send their head in one go), one idle between requests, one
  that has sent nothing yet, and last one whose bytes are waiting to be read (in a burst of
  connections a client that sent its request at once may not have been read yet). What a flood
  of slow or idle connections consists of goes first; a client whose request is being read or
  answered is never closed, nor one opened less than ``FRESH_S`` ago that has not been read yet
  (in a burst of new connections a whole client's request may still be on its way: it is
  served, and the newcomer is told to retry rather than a client being reset mid-request).
  When no connection may be closed, the new one gets 503 with Retry-After and is closed.

A connection upgraded to a WebSocket stays counted (and is never closed to make room: a stream
is a request in progress) until it closes; its handshake is bounded by the head deadline, and
from then on the stream route bounds its reads (serve/stream.py).
"""
from __future__ import annotations

import collections
import fcntl
import functools
import json
import struct
import termios
from http import HTTPStatus

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.wsproto_impl import WSProtocol

from ttscli.serve import HTTPOptions
from ttscli.serve.app import error_body

REFUSED_LINGER_S = 1.0   # a refused client has this long to read its 503 before the socket closes
FRESH_S = 0.5            # a connection not read yet is kept this long after it opens


def _error_response(status: int, message: str) -> list:
    """The h11 events of a whole JSON error response that closes the connection."""
    body = json.dumps(error_body(status, message), separators=(",", ":")).encode()
    headers = [("content-type", "application/json"), ("content-length", str(len(body))), ("connection", "close")]
    return [h11.Response(status_code=status, reason=HTTPStatus(status).phrase, headers=headers),
            h11.Data(data=body), h11.EndOfMessage()]


class ConnectionStats:
    """The open connections of one server, the idle ones among them (oldest first), and counts."""

    def __init__(self, max_connections: int):
        self.max_connections = max_connections
        self.live: set[GuardedH11Protocol] = set()
        self.idle: collections.OrderedDict[GuardedH11Protocol, None] = collections.OrderedDict()
        self.counts = {"refused": 0, "evicted": 0, "header_timeouts": 0, "body_timeouts": 0}
        # sent before any request is read, so written out here rather than through h11
        message = (f"the server has {max_connections} connections open (its limit), each with a request in "
                   "progress or just opened; retry in a moment")
        body = json.dumps(error_body(503, message), separators=(",", ":")).encode()
        self.refusal = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\nconnection: close\r\nretry-after: 1\r\n\r\n" % len(body) + body)

    def snapshot(self) -> dict:
        return {"open": len(self.live), "idle": len(self.idle), "max": self.max_connections, **self.counts}

    def make_room(self) -> bool:
        """Whether a new connection may open: below the cap, or once the oldest idle one is closed."""
        if len(self.live) < self.max_connections:
            return True
        if not self.idle:
            self.counts["refused"] += 1
            return False
        victim, best = None, None
        for conn in self.idle:  # oldest first
            rank = conn.eviction_rank()
            if rank is not None and (best is None or rank < best):
                victim, best = conn, rank
            if rank == 0:
                break
        if victim is None:
            self.counts["refused"] += 1
            return False
        self.counts["evicted"] += 1
        victim.drop()
        return True

    def opened(self, conn: GuardedH11Protocol) -> None:
        self.live.add(conn)

    def set_idle(self, conn: GuardedH11Protocol, idle: bool) -> None:
        if not idle:
            self.idle.pop(conn, None)
        elif conn in self.live and conn not in self.idle:
            self.idle[conn] = None

    def release(self, conn: GuardedH11Protocol) -> None:
        self.live.discard(conn)
        self.idle.pop(conn, None)


class GuardedH11Protocol(H11Protocol):
    """One connection: uvicorn's h11 protocol plus the head and body deadlines and the cap."""

    def __init__(self, *args, options: HTTPOptions, stats: ConnectionStats, **kwargs):
        super().__init__(*args, **kwargs)
        self.options, self.stats = options, stats
        self._head_timer = None
        self._body_timer = None
        self._refused = None     # for a refused connection: the timer that closes it
        self._partial_head = False   # bytes of a request head received, the head not complete
        self._served = False         # a request was received on this connection
        self._opened_at = 0.0        # loop time when the connection was accepted
        self._upgraded = False       # handed to the WebSocket protocol: its deadlines are not ours

    # ---- asyncio.Protocol
    def connection_made(self, transport) -> None:  # type: ignore[override]
        if not self.stats.make_room():
            self._refuse(transport)
            return
        super().connection_made(transport)
        self._opened_at = self.loop.time()
        self.stats.opened(self)
        self.stats.set_idle(self, True)
        self._arm_head()

    def data_received(self, data: bytes) -> None:
        if self._refused is not None:
            return  # the 503 is on its way; what the client sends does not matter
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_head()  # the first byte of a request on a kept-alive connection
        super().data_received(data)
        self._partial_head = self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self.stats.release(self)
        if self._refused is not None:
            self._refused.cancel()
            return
        super().connection_lost(exc)

    # ---- uvicorn's hooks
    def handle_events(self) -> None:
        super().handle_events()
        self._track()

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse, in the API's error shape (uvicorn answers plain text)."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            self.transport.close()
            return
        events = _error_response(400, "invalid HTTP request: malformed, or its head (request line and headers) "
                                      "is over 16 KiB")
        self.transport.write(b"".join(self.conn.send(e) for e in events))
        self.transport.close()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        """Hand the connection to the WebSocket protocol; it stays counted until it closes."""
        self._upgraded = True
        self._cancel_timers()
        self.stats.set_idle(self, False)
        super().handle_websocket_upgrade(event)
        ws = self.transport.get_protocol()
        if isinstance(ws, TrackedWSProtocol):
            ws.on_lost = functools.partial(self.stats.release, self)

    # ---- the deadlines
    def _track(self) -> None:
        """Follow the client's side of the exchange: no request in progress (idle, evictable),
        head received (its deadline off), body in progress (its deadline on) or done (off)."""
        if self._upgraded:
            return
        state = self.conn.their_state
        self.stats.set_idle(self, state is h11.IDLE)
        if state is h11.IDLE:
            return
        self._partial_head, self._served = False, True
        self._head_timer = self._cancel(self._head_timer)
        if state is h11.SEND_BODY:
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.options.body_timeout, self._body_expired)
        else:
            self._body_timer = self._cancel(self._body_timer)

    def _arm_head(self) -> None:
        self._head_timer = self.loop.call_later(self.options.header_timeout, self._head_expired)

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.stats.counts["header_timeouts"] += 1
            self.transport.close()

    def _body_expired(self) -> None:
        self._body_timer = None
        if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
            return
        self.stats.counts["body_timeouts"] += 1
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            events = _error_response(408, f"the request body did not arrive within {self.options.body_timeout:g} s "
                                          "(--body-timeout)")
            self.transport.write(b"".join(self.conn.send(e) for e in events))
        if cycle is not None:
            # the route reading the body sees the client leave, and writes nothing more
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    @staticmethod
    def _cancel(timer):
        if timer is not None:
            timer.cancel()
        return None

    def _cancel_timers(self) -> None:
        self._head_timer = self._cancel(self._head_timer)
        self._body_timer = self._cancel(self._body_timer)

    # ---- the cap
    def eviction_rank(self) -> int | None:
        """Which idle connection goes first to make room (lowest first; None: not this one yet;
        see the module docstring)."""
        fresh = self.loop.time() - self._opened_at < FRESH_S
        if self.unread():
            return None if fresh else 3
        if self._partial_head or self._served:
            return 0 if self._partial_head else 1
        return None if fresh else 2

    def unread(self) -> int:
        """Bytes the client has sent that the server has not read yet (FIONREAD on the socket)."""
        sock = self.transport.get_extra_info("socket")
        if sock is None or self.transport.is_closing():
            return 0
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]

    def drop(self) -> None:
        """Close this idle connection to make room for a new one."""
        self.stats.release(self)
        self._cancel_timers()
        if not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, transport) -> None:
        """503 and close: every open connection has a request in progress."""
        self.transport = transport
        transport.write(self.stats.refusal)
        if transport.can_write_eof():
            transport.write_eof()  # the client reads the 503, then end of stream (not a reset)
        self._refused = self.loop.call_later(REFUSED_LINGER_S, transport.close)


class TrackedWSProtocol(WSProtocol):
    """uvicorn's wsproto WebSocket protocol that tells the connection count when it closes."""

    on_lost = None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.on_lost is not None:
            self.on_lost()


def protocol_factory(options: HTTPOptions, stats: ConnectionStats):
    """What uvicorn.Config(http=...) takes: a callable it constructs each connection's protocol with."""
    return functools.partial(GuardedH11Protocol, options=options, stats=stats)

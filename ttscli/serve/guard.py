"""Which requests the server takes at all: by the Host they name and the Origin a browser sends.

A server on 127.0.0.1 is still within reach of every web page its user opens. A page can post a
form to it (a "simple" request: no CORS preflight, and the server acts before the browser
decides whether the page may read the answer), or point its own DNS name at 127.0.0.1 and then
read every answer as its own (DNS rebinding). Two checks close both:

- Host must name this server: localhost, a loopback address, the address it is bound to (any
  address literal when it is bound to all of them: no DNS trick yields a literal), or an
  ``--allowed-host``. A rebinding page's requests carry the page's own name.
- a request carrying Origin (browsers send it on every cross-origin request and on every POST)
  must come from the server's own origin or a ``--cors-origin``; otherwise 403. Form posts
  (urlencoded, multipart, text/plain bodies: what a page may send without a preflight) are
  taken from the server's own origin or from clients that send no Origin (not browsers) only.

Both answer in the API's error shape before the request reaches a route; the allowed origins
get CORS headers (and their preflights answered) from Starlette's CORSMiddleware. A WebSocket
handshake is held to the same rules (a page may open a WebSocket to any address, and browsers
apply no CORS to it: the server's Origin check is all there is), and refused before it
completes, with the same status and body.
"""
from __future__ import annotations

import ipaddress
import json
import re

from ttscli.errors import UsageError
from ttscli.serve import HTTPOptions, is_loopback
from ttscli.serve.app import error_body, shown

WILDCARDS = frozenset({"0.0.0.0", "::", ""})
# what a Host header may hold: a name or IPv4 address, or a bracketed IPv6 address; then a port
HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::(\d{1,5}))?", re.IGNORECASE)
# a serialized origin, as browsers send it: scheme://host[:port], nothing after
ORIGIN = re.compile(r"(https?)://(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::(\d{1,5}))?", re.IGNORECASE)
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def host_name(value: str) -> str:
    """A host as compared here: lower case, no brackets, no trailing dot."""
    return value.strip().lower().strip("[]").rstrip(".")


def check_allowed_host(value: str) -> str:
    """An --allowed-host value (a name or address, or *), normalised; a UsageError otherwise."""
    if value.strip() == "*":
        return "*"
    m = HOST.fullmatch(value.strip())
    if not m or m.group(2) is not None:
        raise UsageError(f"--allowed-host takes a host name or address (no scheme, port or path), or *, "
                         f"not {value!r}")
    return host_name(m.group(1))


def check_cors_origin(value: str) -> str:
    """A --cors-origin value (scheme://host[:port], or *), normalised; a UsageError otherwise."""
    value = value.strip().rstrip("/")
    if value == "*":
        return "*"
    m = ORIGIN.fullmatch(value)
    if not m:
        raise UsageError(f"--cors-origin takes a web origin such as http://localhost:3000 (scheme://host[:port]) "
                         f"or *, not {value!r}")
    return origin_key(value)


def origin_key(origin: str) -> str | None:
    """An origin in one spelling (lower case, the scheme's default port left out); None if malformed."""
    m = ORIGIN.fullmatch(origin)
    if not m:
        return None
    scheme, name, port = m.group(1).lower(), m.group(2).lower(), m.group(3)
    return f"{scheme}://{name}" if port is None or int(port) == DEFAULT_PORTS[scheme] else f"{scheme}://{name}:{port}"


def is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class RequestGuard:
    """ASGI middleware: refuse a request whose Host is not this server's, or that comes from a web
    page of another origin the server was not told to trust (see the module docstring)."""

    def __init__(self, app, bound_host: str, options: HTTPOptions):
        self.app = app
        bound = host_name(bound_host)
        self.any_host = "*" in options.allowed_hosts
        self.any_address = bound in WILDCARDS
        self.hosts = {bound} | {host_name(h) for h in options.allowed_hosts}
        self.any_origin = "*" in options.cors_origins
        self.origins = frozenset(options.cors_origins)

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        refusal = self.refusal(scope.get("method", "GET"), headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        body = json.dumps(error_body(status, message), separators=(",", ":")).encode()
        # a refused WebSocket handshake gets the same answer, through ASGI's denial response
        kind = "http" if scope["type"] == "http" else "websocket.http"
        if kind != "http":
            await receive()   # websocket.connect
        await send({"type": f"{kind}.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
        await send({"type": f"{kind}.response.body", "body": body})

    def refusal(self, method: str, headers: dict[str, str]) -> tuple[int, str] | None:
        """(status, message) for a request this server must not take; None for one it may."""
        host = headers.get("host")
        if host is not None and not self.host_allowed(host):
            return 400, (f"this server does not answer to the host {shown(host)}; start it with "
                         "--allowed-host NAME to allow a name (it answers to localhost, loopback addresses and "
                         "the address it listens on)")
        origin = headers.get("origin")
        if origin is None or self.same_origin(origin, host):
            return None
        if not (self.any_origin or origin_key(origin) in self.origins):
            return 403, (f"cross-origin request from {shown(origin)} refused; start the server with "
                         "--cors-origin ORIGIN to let that site's pages use it")
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if method == "POST" and ctype in FORM_TYPES:
            return 403, (f"cross-origin {ctype} posts are refused (a page can send them without asking); "
                         "send JSON, or upload ref_audio from the server's own origin")
        return None

    def host_allowed(self, host: str) -> bool:
        m = HOST.fullmatch(host.strip())
        if not m:
            return False
        name = host_name(m.group(1))
        return self.any_host or is_loopback(name) or name in self.hosts or (self.any_address and is_address(name))

    @staticmethod
    def same_origin(origin: str, host: str | None) -> bool:
        """Whether the Origin names the host:port the request was sent to (the scheme's default
        port when Host has none), as a page served by this server would."""
        m, h = ORIGIN.fullmatch(origin), HOST.fullmatch((host or "").strip())
        if not m or not h:
            return False
        scheme = m.group(1).lower()
        port = int(m.group(3) or DEFAULT_PORTS[scheme])
        return host_name(m.group(2)) == host_name(h.group(1)) and port == int(h.group(2) or DEFAULT_PORTS[scheme])


def guarded(app, bound_host: str, options: HTTPOptions):
    """The app behind the Host/Origin checks, with CORS headers for the --cors-origin pages."""
    if options.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        # the guard has refused every other origin; "*" methods and headers only mirror what an
        # allowed page asks for in its preflight (a route still answers 405 to a method it lacks)
        app = CORSMiddleware(app, allow_origins=list(options.cors_origins), allow_methods=["*"],
                             allow_headers=["*"], allow_private_network=True,
                             expose_headers=["X-Sample-Rate", "Retry-After"])
    return RequestGuard(app, bound_host, options)

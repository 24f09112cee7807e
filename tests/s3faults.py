"""A loopback HTTP proxy in front of an S3 (or Azure Blob) endpoint that injects faults on the real network path.

Every request the client sends reaches the proxy over TCP; the proxy either forwards it to the upstream (moto's
server) and relays the reply, or injects one of these faults:

- ``slowdown``: answer ``503 SlowDown`` without forwarding;
- ``internal``: answer ``500 InternalError`` without forwarding;
- ``hang``: forward nothing and say nothing until the client's read timeout has passed, then reset;
- ``reset``: reset the connection (TCP RST) without forwarding;
- ``lost_reply``: forward the request (the upstream applies it), then reset the connection instead of replying;
- ``throttle``: answer ``429 Too Many Requests`` without forwarding (GCS's throttling; only when asked for by name,
  never among the default kinds).

Faults are drawn at a configurable rate from a seeded generator, or forced for the next matching requests
(:meth:`FaultProxy.force`). With ``strip_conditional`` the proxy drops ``If-None-Match`` / ``If-Match`` headers and
GCS's ``ifGeneration*`` / ``ifMetageneration*`` query parameters, imitating a store that ignores conditional
writes. With ``read_only`` every write (PUT, POST, DELETE) is refused with ``403 AccessDenied``, as a read-only IAM
policy does; :attr:`FaultLog.refused` counts them. The error replies name their code in the body and in an
``x-ms-error-code`` header; ``codes`` replaces S3's codes with another service's (:data:`AZURE_CODES`: ``503
ServerBusy``, ``500 InternalError``).
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

SLOWDOWN = "slowdown"
INTERNAL = "internal"
HANG = "hang"
RESET = "reset"
LOST_REPLY = "lost_reply"
ALL_FAULTS: tuple[str, ...] = (SLOWDOWN, INTERNAL, HANG, RESET, LOST_REPLY)
THROTTLE = "throttle"
KNOWN_FAULTS: tuple[str, ...] = (*ALL_FAULTS, THROTTLE)

#: (code, message) of the injected error replies, by fault kind.
S3_CODES: dict[str, tuple[str, str]] = {
    SLOWDOWN: ("SlowDown", "Please reduce your request rate."),
    INTERNAL: ("InternalError", "We encountered an internal error. Please try again."),
}
AZURE_CODES: dict[str, tuple[str, str]] = {
    SLOWDOWN: ("ServerBusy", "The server is busy."),
    INTERNAL: ("InternalError", "The server encountered an internal error. Please retry the request."),
}

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade"}
_CONDITIONAL = {"if-none-match", "if-match"}


@dataclass
class _Forced:
    kind: str
    method: str | None
    left: int


@dataclass
class FaultLog:
    """What the proxy did: requests seen, faults injected by kind, and the (method, path, fault) sequence."""

    requests: int = 0
    refused: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    events: list[tuple[str, str, str]] = field(default_factory=list)


class FaultProxy:
    """A fault-injecting HTTP proxy on ``127.0.0.1`` (an ephemeral port) in front of ``upstream``.

    Args:
        upstream: the real endpoint, e.g. ``http://127.0.0.1:5000``.
        rate: probability that a request gets a fault (0 to 1).
        seed: seed of the fault generator; the same seed and request order give the same faults.
        kinds: the faults to draw from.
        methods: only requests with these HTTP methods are eligible for drawn faults (None: all).
        hang_seconds: how long a ``hang`` keeps the connection silent; set it above the client's read timeout.
        strip_conditional: drop ``If-None-Match`` and ``If-Match`` request headers and GCS's ``ifGeneration*`` /
            ``ifMetageneration*`` query parameters.
        codes: the error codes of the injected ``slowdown`` and ``internal`` replies (default :data:`S3_CODES`).

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.0,
        seed: int = 0,
        kinds: Iterable[str] = ALL_FAULTS,
        methods: Iterable[str] | None = None,
        hang_seconds: float = 1.0,
        strip_conditional: bool = False,
        read_only: bool = False,
        codes: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream {upstream!r} must be http://host:port")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.kinds = tuple(kinds)
        for k in self.kinds:
            if k not in KNOWN_FAULTS:
                raise ValueError(f"unknown fault {k!r}; known: {KNOWN_FAULTS}")
        self.rate = rate
        self.seed = seed
        self.methods = None if methods is None else frozenset(m.upper() for m in methods)
        self.hang_seconds = hang_seconds
        self.strip_conditional = strip_conditional
        self.read_only = read_only
        self.codes = codes or S3_CODES
        self.log = FaultLog()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._forced: list[_Forced] = []
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler, self)
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The proxy's URL, to give the client as its S3 endpoint."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def set_rate(self, rate: float) -> None:
        """Change the fault rate from now on."""
        with self._lock:
            self.rate = rate

    def force(self, kind: str, *, method: str | None = None, count: int = 1) -> None:
        """Inject ``kind`` into the next ``count`` requests with HTTP ``method`` (any method when None), ahead of
        any drawn fault."""
        if kind not in KNOWN_FAULTS:
            raise ValueError(f"unknown fault {kind!r}")
        with self._lock:
            self._forced.append(_Forced(kind, None if method is None else method.upper(), count))

    def describe(self) -> str:
        """Seed, rate and fault counts, for failure messages."""
        return (
            f"fault proxy seed={self.seed} rate={self.rate} requests={self.log.requests} "
            f"faults={dict(self.log.faults)}"
        )

    def _decide(self, method: str, path: str) -> str | None:
        with self._lock:
            self.log.requests += 1
            kind: str | None = None
            for forced in self._forced:
                if forced.method is None or forced.method == method:
                    kind = forced.kind
                    forced.left -= 1
                    if forced.left <= 0:
                        self._forced.remove(forced)
                    break
            else:
                eligible = self.rate > 0 and (self.methods is None or method in self.methods)
                if eligible and self._rng.random() < self.rate:
                    kind = self._rng.choice(self.kinds)
            if kind is not None:
                self.log.faults[kind] += 1
                self.log.events.append((method, path, kind))
            return kind


def _strip_query_conditions(path: str) -> str:
    """``path`` without GCS's precondition query parameters (``ifGenerationMatch=0`` and its kin)."""
    base, sep, query = path.partition("?")
    if not sep:
        return path
    kept = [p for p in query.split("&") if not p.lower().startswith(("ifgeneration", "ifmetageneration"))]
    return base + ("?" + "&".join(kept) if kept else "")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], proxy: FaultProxy) -> None:
        self.proxy = proxy
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Injected resets make handlers fail on purpose; nothing to report."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silent."""

    def do_GET(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def finish(self) -> None:
        try:
            super().finish()
        except (OSError, ValueError):
            pass

    def _handle(self) -> None:
        proxy = self.server.proxy
        body = self._read_body()
        if proxy.read_only and self.command in ("PUT", "POST", "DELETE"):
            with proxy._lock:
                proxy.log.requests += 1
                proxy.log.refused += 1
            self._error(403, "AccessDenied", "Access Denied")
            return
        fault = proxy._decide(self.command, self.path)
        if fault == SLOWDOWN:
            self._error(503, *proxy.codes[SLOWDOWN])
        elif fault == THROTTLE:
            self._error(429, "TooManyRequests", "The rate of change requests to the object is too high.")
        elif fault == INTERNAL:
            self._error(500, *proxy.codes[INTERNAL])
        elif fault == HANG:
            proxy._stopping.wait(proxy.hang_seconds)
            self._reset()
        elif fault == RESET:
            self._reset()
        else:
            status, reason, headers, reply = self._forward(body)
            if fault == LOST_REPLY:
                self._reset()
                return
            self.send_response_only(status, reason)
            for name, value in headers:
                if name.lower() in _HOP_BY_HOP or name.lower() == "transfer-encoding":
                    continue
                if name.lower() == "content-length" and self.command != "HEAD":
                    continue
                self.send_header(name, value)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply)

    def _read_body(self) -> bytes:
        """The raw request body: Content-Length bytes, or the raw chunked encoding, forwarded as it came."""
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length))
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            return b""
        raw = bytearray()
        while True:
            line = self.rfile.readline()
            raw += line
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:
                    trailer = self.rfile.readline()
                    raw += trailer
                    if trailer in (b"\r\n", b"\n", b""):
                        return bytes(raw)
            raw += self.rfile.read(size + 2)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        proxy = self.server.proxy
        headers = {
            k: v
            for k, v in self.headers.items()
            if k.lower() not in _HOP_BY_HOP and not (proxy.strip_conditional and k.lower() in _CONDITIONAL)
        }
        conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=30)
        try:
            path = _strip_query_conditions(self.path) if proxy.strip_conditional else self.path
            conn.request(self.command, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            reply = resp.read()
            return resp.status, resp.reason, resp.getheaders(), reply
        finally:
            conn.close()

    def _error(self, status: int, code: str, message: str) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>FAULT</RequestId></Error>"
        ).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-ms-error-code", code)
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self) -> None:
        """Drop the connection with a TCP RST, replying nothing."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

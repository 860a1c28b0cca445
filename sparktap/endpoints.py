"""The one HTTP endpoint server of the services: ``/metrics`` through ``prometheus_client``, ``/healthz``,
``/readyz`` and JSON routes (``/findings``).

Used by the collector (``collector/health.py``), the alerter (``detection/alerter.py`` ``serve_metrics``) and the
follower; it imports no part, so all may use it.

Hardened for a shared network (promises 21 and 28 of the reliability list):

- **no thread per connection**: one thread accepts connections and reads their requests without blocking (a
  ``selectors`` loop); only a *complete* request goes to a bounded pool of ``workers`` threads, which answer it. So
  idle and slow clients hold a socket each, never a thread: the server runs ``1 + workers`` threads whatever the
  clients do;
- **a whole-request deadline** (``socket_timeout``): a request not complete that long after its connection was
  accepted is dropped, however the bytes trickle in (a slowloris cannot renew it byte by byte); the answer's send is
  bounded by the same time in total;
- **a connection cap** (``max_connections``): beyond it, the oldest connection still waiting for its request is
  closed to make room, so a flood of idle connections cannot lock a probe out; requests larger than
  ``MAX_REQUEST_BYTES`` are dropped; the listen queue holds ``backlog`` connections;
- a route may require a bearer token (``Authorization: Bearer …``, compared in constant time): 401 without it or
  with a wrong one;
- a route that fails answers 500 with a generic body; the cause goes to the log only.
"""

from __future__ import annotations

import hmac
import io
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import SecretStr

from sparktap.errors import ServiceError

log = logging.getLogger("sparktap.endpoints")

JsonAnswer = tuple[int, Any]
Route = Callable[[dict[str, list[str]]], JsonAnswer]
"""A JSON endpoint: query parameters -> (HTTP status, JSON-able body)."""
Probe = Callable[[], JsonAnswer]
"""``/healthz`` or ``/readyz``: () -> (HTTP status, JSON-able body)."""
SOCKET_TIMEOUT_SECONDS = 30.0
BACKLOG = 128
WORKERS = 64
"""Threads answering complete requests, started as needed: a scrape or a probe holds one for milliseconds, but a
burst of ``/findings`` requests each holds one while it waits for its turn (one query at a time, up to its limit)."""
MAX_CONNECTIONS = 1024
MAX_REQUEST_BYTES = 16 * 1024
"""A GET with its headers; a request larger than this is dropped (the routes take no body)."""
_ACCEPTS_PER_TURN = 256
"""Connections accepted per turn of the loop, so that reading the open ones keeps its turn under a flood."""


@dataclass(frozen=True)
class _Registered:
    route: Route
    token: SecretStr | None


@dataclass
class _Pending:
    """A connection whose request is still arriving."""

    sock: socket.socket
    address: Any
    deadline: float
    data: bytearray = field(default_factory=bytearray)


class _Handler(BaseHTTPRequestHandler):
    """Answers one complete request: it reads from the bytes the loop received and writes into a buffer sent at the
    end in one ``sendall`` (bounded in total by the socket's timeout)."""

    server: _Server  # type: ignore[assignment]  # ours, not a socketserver
    protocol_version = "HTTP/1.0"

    def __init__(self, pending: _Pending, server: _Server) -> None:
        self.pending = pending
        super().__init__(pending.sock, pending.address, server)  # type: ignore[arg-type]

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BytesIO(bytes(self.pending.data))
        self.answer = io.BytesIO()
        self.wfile = self.answer

    def finish(self) -> None:
        try:
            self.connection.settimeout(self.server.socket_timeout)  # total, for sendall (Python >= 3.5)
            self.connection.sendall(self.answer.getvalue())
        except OSError:  # the client went away or reads nothing: nothing to tell it
            pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path, _, raw_query = self.path.partition("?")
        server = self.server
        if path == "/metrics" and server.registries:
            body = b"".join(generate_latest(r) for r in server.registries)
            self._send(200, body, CONTENT_TYPE_LATEST)
        elif path == "/healthz" and server.health is not None:
            self._answer(path, server.health)
        elif path == "/readyz" and server.ready is not None:
            self._answer(path, server.ready)
        elif path in server.routes:
            registered = server.routes[path]
            if registered.token is not None and not self._authorized(registered.token):
                self._json(401, {"error": "a bearer token is required (Authorization: Bearer <token>)"})
                return
            query = parse_qs(raw_query)
            self._answer(path, lambda: registered.route(query))
        else:
            self._json(404, {"error": f"not found: try {', '.join(server.paths())}"})

    def _authorized(self, token: SecretStr) -> bool:
        given = self.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        expected = token.get_secret_value().encode()
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), expected)

    def _answer(self, path: str, produce: Callable[[], JsonAnswer]) -> None:
        try:
            code, body = produce()
        except Exception as exc:  # a route's failure is the caller's answer, never the server's end
            log.warning("HTTP route failed path=%s error=%s: %s", path, type(exc).__name__, exc)
            code, body = 500, {"error": "internal error; see the service's log"}
        self._json(code, body)

    def _json(self, code: int, body: Any) -> None:
        self._send(code, orjson.dumps(body), "application/json")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        """Requests are not logged (one line per scrape would drown the service's own log)."""


def _complete(data: bytearray) -> bool:
    """Whether a request's headers have ended (the routes are GETs: no body follows)."""
    return b"\r\n\r\n" in data or b"\n\n" in data


class _Server:
    """The accepting and reading loop (one thread) and the pool of workers that answer complete requests."""

    def __init__(
        self, address: tuple[str, int], socket_timeout: float, workers: int, max_connections: int, name: str
    ) -> None:
        self.socket_timeout = socket_timeout
        self.max_connections = max_connections
        self.request_queue_size = BACKLOG
        self.registries: list[CollectorRegistry] = []
        self.health: Probe | None = None
        self.ready: Probe | None = None
        self.routes: dict[str, _Registered] = {}
        self.listener = _listen(address)
        self.listener.setblocking(False)
        self.server_address: tuple[str, int] = self.listener.getsockname()[:2]
        self._wake_read, self._wake_write = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._pending: dict[int, _Pending] = {}
        """by file descriptor, oldest first: the deadlines are in the same order (one timeout for all)"""
        self._answering = 0
        self._lock = threading.Lock()
        self._stopping = False
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-worker")

    def paths(self) -> list[str]:
        fixed = [("/metrics", bool(self.registries)), ("/healthz", self.health), ("/readyz", self.ready)]
        return [p for p, on in fixed if on] + sorted(self.routes)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pending) + self._answering

    def serve_forever(self) -> None:
        while not self._stopping:
            wait = 1.0
            if self._pending:
                wait = max(0.0, min(wait, next(iter(self._pending.values())).deadline - time.monotonic()))
            for key, _ in self._selector.select(wait):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj is self._wake_read:
                    return
                else:
                    self._read(key.fd)
            self._expire(time.monotonic())

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_TURN):
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, mostly: the ones open are still served
                log.warning("HTTP endpoints cannot accept a connection: %s", exc.strerror)
                return
            if self.open_connections >= self.max_connections and not self._evict_oldest():
                sock.close()  # every connection is being answered: this one waits for none of them
                continue
            sock.setblocking(False)
            with self._lock:
                self._pending[sock.fileno()] = _Pending(sock, address, time.monotonic() + self.socket_timeout)
            self._selector.register(sock, selectors.EVENT_READ)

    def _evict_oldest(self) -> bool:
        if not self._pending:
            return False
        self._drop(next(iter(self._pending)))
        return True

    def _read(self, fd: int) -> None:
        pending = self._pending.get(fd)
        if pending is None:
            return
        try:
            chunk = pending.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk or len(pending.data) + len(chunk) > MAX_REQUEST_BYTES:
            self._drop(fd)
            return
        pending.data += chunk
        if _complete(pending.data):
            self._selector.unregister(pending.sock)
            with self._lock:
                del self._pending[fd]
                self._answering += 1
            pending.sock.setblocking(True)
            self._pool.submit(self._answer, pending)

    def _answer(self, pending: _Pending) -> None:
        try:
            _Handler(pending, self)
        except Exception as exc:  # noqa: BLE001 - one bad request must not take a worker down
            log.warning("HTTP request failed: %s: %s", type(exc).__name__, exc)
        finally:
            _close(pending.sock)
            with self._lock:
                self._answering -= 1

    def _expire(self, now: float) -> None:
        while self._pending:
            fd, oldest = next(iter(self._pending.items()))
            if oldest.deadline > now:
                return
            self._drop(fd)

    def _drop(self, fd: int) -> None:
        with self._lock:
            pending = self._pending.pop(fd)
        self._selector.unregister(pending.sock)
        _close(pending.sock)

    def shutdown(self) -> None:
        self._stopping = True
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass

    def server_close(self) -> None:
        for fd in list(self._pending):
            self._drop(fd)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._selector.close()
        for sock in (self.listener, self._wake_read, self._wake_write):
            sock.close()


def _listen(address: tuple[str, int]) -> socket.socket:
    """A listening socket (OSError with the system's reason, e.g. 'Address already in use')."""
    sock = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart binds while old sockets linger
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class HttpEndpoints:
    """The server in a daemon thread. ``port`` is the bound port (useful when 0 asked for a random one)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        registries: Sequence[CollectorRegistry] = (),
        health: Probe | None = None,
        ready: Probe | None = None,
        socket_timeout: float = SOCKET_TIMEOUT_SECONDS,
        workers: int = WORKERS,
        max_connections: int = MAX_CONNECTIONS,
        name: str = "sparktap-http",
    ) -> None:
        self._server = _Server((host, port), socket_timeout, workers, max_connections, name)
        self._server.registries.extend(registries)
        self._server.health = health
        self._server.ready = ready
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

    def start(self) -> HttpEndpoints:
        self._thread.start()
        return self

    def route(self, path: str, handler: Route, token: SecretStr | None = None) -> None:
        """Serve ``GET path`` with ``handler(query parameters) -> (status, JSON-able body)``; with ``token``, only
        to requests that carry ``Authorization: Bearer <token>``."""
        self._server.routes[path] = _Registered(handler, token)

    @property
    def paths(self) -> list[str]:
        return self._server.paths()

    @property
    def open_connections(self) -> int:
        """Connections held now: waiting for their request, or being answered."""
        return self._server.open_connections

    def close(self) -> None:
        self._server.shutdown()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._server.server_close()

    # the names of socketserver, for callers that held the old alerter server
    def shutdown(self) -> None:
        self.close()

    def server_close(self) -> None:
        """Closed by ``close``/``shutdown`` already."""

    @property
    def server_address(self) -> tuple[str, int]:
        return self.host, self.port


def serve(
    host: str,
    port: int,
    what: str,
    setting: str,
    routes: Mapping[str, tuple[Route, SecretStr | None]] | None = None,
    **kwargs: Any,
) -> HttpEndpoints:
    """Start endpoints on ``host:port`` (0: any free port); ServiceError naming ``setting`` when it cannot bind."""
    try:
        endpoints = HttpEndpoints(host, port, **kwargs)
    except OSError as exc:
        raise ServiceError(
            f'cannot serve {what} host="{host}" port={port}: {exc.strerror}; set {setting} to a free port (0: any)'
        ) from exc
    for path, (route, token) in (routes or {}).items():
        endpoints.route(path, route, token)
    return endpoints.start()

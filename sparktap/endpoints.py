"""The one HTTP endpoint server of the services: ``/metrics`` through ``prometheus_client``, ``/healthz``,
``/readyz`` and JSON routes (``/findings``), in a daemon thread.

Used by the collector (``collector/health.py``) and the alerter (``detection/alerter.py`` ``serve_metrics``); it
imports no part, so both may use it.

Hardened for a shared network:

- every connection gets a socket timeout (``socket_timeout``): a client that sends nothing, or reads nothing,
  frees its thread after that long;
- the listen queue holds ``backlog`` connections (http.server's default is 5);
- a route may require a bearer token (``Authorization: Bearer …``, compared in constant time): 401 without it or
  with a wrong one;
- a route that fails answers 500 with a generic body; the cause goes to the log only.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


@dataclass(frozen=True)
class _Registered:
    route: Route
    token: SecretStr | None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def setup(self) -> None:
        self.connection = self.request
        self.connection.settimeout(self.server.socket_timeout)  # a silent client frees its thread
        super().setup()

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
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client went away or timed out: nothing to tell it
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        """Requests are not logged (one line per scrape would drown the service's own log)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], socket_timeout: float) -> None:
        self.socket_timeout = socket_timeout
        self.registries: list[CollectorRegistry] = []
        self.health: Probe | None = None
        self.ready: Probe | None = None
        self.routes: dict[str, _Registered] = {}
        super().__init__(address, _Handler)

    def paths(self) -> list[str]:
        fixed = [("/metrics", bool(self.registries)), ("/healthz", self.health), ("/readyz", self.ready)]
        return [p for p, on in fixed if on] + sorted(self.routes)


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
        name: str = "sparktap-http",
    ) -> None:
        self._server = _Server((host, port), socket_timeout)
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

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

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

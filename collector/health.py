"""The collector's HTTP endpoints: ``/metrics`` (Prometheus text), ``/healthz`` (liveness), ``/readyz`` (readiness).

``/healthz`` answers 200 while the service loop is making rounds, *also* while ClickHouse or Kafka is away (the
body says ``degraded``): restarting the collector cannot bring ClickHouse back, and a restart loop is exactly what
must not happen during a short outage. Messages waiting ``SLOW_INSERT_SECONDS`` with no insert succeeding (a
frozen server: the insert call has not even failed yet) make it ``degraded`` too, with the reason. It answers 503
when the loop has not come round for ``stall_seconds``, or when no insert succeeded for ``insert_stall_seconds``
while messages wait (``status`` says which, ``reason`` why).
``/readyz`` answers 200 when ClickHouse accepted the last operation and the consumer has partitions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import orjson
from prometheus_client import CONTENT_TYPE_LATEST

from sparktap.collector.logfmt import fields
from sparktap.collector.metrics import CollectorMetrics
from sparktap.errors import ServiceError

log = logging.getLogger("sparktap.collector")
SLOW_INSERT_SECONDS = 10.0
"""messages waiting this long with no insert succeeding: /healthz says degraded, and the collector logs it"""


@dataclass
class HealthState:
    """What the service loop reports about itself; read by the HTTP thread (plain attribute writes)."""

    stall_seconds: float = 120.0
    started_at: float = field(default_factory=time.monotonic)
    heartbeat_at: float = field(default_factory=time.monotonic)
    storage_up: bool = False
    kafka_up: bool = True
    paused: bool = False
    assigned: int = 0
    stopping: bool = False
    phase: str = "starting"
    last_error: str = ""
    last_commit_at: float | None = None
    insert_stall_seconds: float = 300.0
    pending_messages: int = 0
    pending_since: float | None = None
    """when the oldest message not yet inserted arrived (None: nothing waits)"""
    last_insert_at: float | None = None

    def beat(self) -> None:
        self.heartbeat_at = time.monotonic()

    def waiting(self, now: float | None = None) -> float:
        """Seconds messages have waited with no insert succeeding (0 when nothing waits)."""
        if self.pending_since is None or self.pending_messages == 0:
            return 0.0
        now = time.monotonic() if now is None else now
        return now - max(self.pending_since, self.last_insert_at or self.pending_since)

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        now = time.monotonic()
        silent = now - self.heartbeat_at
        alive = silent < self.stall_seconds
        waiting = self.waiting(now)
        inserting = waiting < self.insert_stall_seconds
        degraded = not self.storage_up or not self.kafka_up or self.paused or waiting >= SLOW_INSERT_SECONDS
        status = "stalled" if not alive else "insert_stalled" if not inserting else "degraded" if degraded else "ok"
        reason = ""
        if not alive:
            reason = f"the service loop has not come round for {silent:.0f} s (stall_seconds={self.stall_seconds:g})"
        elif waiting >= SLOW_INSERT_SECONDS:
            reason = (
                f"no insert into ClickHouse succeeded for {waiting:.0f} s while {self.pending_messages} messages "
                f"wait (unhealthy after insert_stall_seconds={self.insert_stall_seconds:g})"
            )
        body = {
            "status": status,
            "reason": reason,
            "phase": self.phase,
            "storage_up": self.storage_up,
            "kafka_up": self.kafka_up,
            "paused": self.paused,
            "assigned_partitions": self.assigned,
            "stopping": self.stopping,
            "seconds_since_heartbeat": round(silent, 3),
            "seconds_since_commit": None if self.last_commit_at is None else round(now - self.last_commit_at, 3),
            "seconds_waiting_for_insert": round(waiting, 3),
            "pending_messages": self.pending_messages,
            "last_error": self.last_error,
        }
        return (200 if alive and inserting else 503), body

    def ready(self) -> bool:
        return self.storage_up and self.assigned > 0 and not self.stopping


class InsertWatchdog:
    """Logs, from its own thread, when messages wait with no insert succeeding: an insert into a frozen server
    blocks the service loop until the driver's timeout, and nothing else would say so meanwhile."""

    def __init__(self, health: HealthState, url: str) -> None:
        self.health = health
        self.url = url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparktap-insert-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        level = 0  # 1: warned after SLOW_INSERT_SECONDS, 2: after insert_stall_seconds
        health = self.health
        while not self._stop.wait(1.0):
            waiting = health.waiting()
            reached = 2 if waiting >= health.insert_stall_seconds else 1 if waiting >= SLOW_INSERT_SECONDS else 0
            if reached > level:
                (log.error if reached == 2 else log.warning)(
                    "no insert into ClickHouse succeeded while messages wait"
                    + (": /healthz reports insert_stalled (503)" if reached == 2 else ""),
                    extra=fields(
                        url=self.url,
                        seconds=round(waiting, 1),
                        pending_messages=health.pending_messages,
                        storage_up=health.storage_up,
                        last_error=health.last_error,
                    ),
                )
            elif reached == 0 and level:
                log.info("inserts into ClickHouse succeed again", extra=fields(url=self.url))
            level = reached


Route = Callable[[dict[str, list[str]]], tuple[int, Any]]
"""An extra JSON endpoint: query parameters -> (HTTP status, body)."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, self.server.metrics.text(), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            code, body = self.server.health.snapshot()
            self._send(code, orjson.dumps(body), "application/json")
        elif path == "/readyz":
            ready = self.server.health.ready()
            self._send(200 if ready else 503, orjson.dumps({"ready": ready}), "application/json")
        elif path in self.server.routes:
            query = parse_qs(self.path.split("?", 1)[1]) if "?" in self.path else {}
            try:
                code, body = self.server.routes[path](query)
            except Exception as exc:  # a route's failure is the caller's answer, never the server's end
                log.warning("route failed", extra=fields(path=path, error=str(exc)))
                code, body = 500, {"error": str(exc)}
            self._send(code, orjson.dumps(body), "application/json")
        else:
            self._send(404, b'{"error": "not found: try /metrics, /healthz or /readyz"}', "application/json")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        """Scrapes are not logged (one line per scrape would drown the service's own log)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], metrics: CollectorMetrics, health: HealthState) -> None:
        self.metrics = metrics
        self.health = health
        self.routes: dict[str, Route] = {}
        super().__init__(address, _Handler)


class HttpEndpoints:
    """The HTTP server in a daemon thread. ``port`` is the bound port (useful when 0 asked for a random one)."""

    def __init__(self, host: str, port: int, metrics: CollectorMetrics, health: HealthState) -> None:
        self._server = _Server((host, port), metrics, health)
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="sparktap-http", daemon=True)

    def start(self) -> HttpEndpoints:
        self._thread.start()
        return self

    def route(self, path: str, handler: Route) -> None:
        """Serve ``GET path`` with ``handler(query parameters) -> (status, JSON-able body)``."""
        self._server.routes[path] = handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_endpoints(
    host: str, port: int | None, metrics: CollectorMetrics, health: HealthState
) -> HttpEndpoints | None:
    """Start the endpoints (``port`` None: none; 0: any free port); ServiceError when the port is taken."""
    if port is None:
        return None
    try:
        endpoints = HttpEndpoints(host, port, metrics, health).start()
    except OSError as exc:
        raise ServiceError(
            f'cannot serve /metrics host="{host}" port={port}: {exc.strerror}; '
            "set SPARKTAP_COLLECTOR__METRICS_PORT to a free port (0: any)"
        ) from exc
    log.info("serving /metrics, /healthz and /readyz", extra=fields(host=host, port=endpoints.port))
    return endpoints

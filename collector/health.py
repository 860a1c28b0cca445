"""The collector's HTTP endpoints: ``/metrics`` (Prometheus text), ``/healthz`` (liveness), ``/readyz`` (readiness).

``/healthz`` answers 200 while the service loop is making rounds, *also* while ClickHouse or Kafka is away (the
body says ``degraded``): restarting the collector cannot bring ClickHouse back, and a restart loop is exactly what
must not happen during an outage. It answers 503 only when the loop has not come round for ``stall_seconds``.
``/readyz`` answers 200 when ClickHouse accepted the last operation and the consumer has partitions.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST

from sparktap.collector.logfmt import fields
from sparktap.collector.metrics import CollectorMetrics
from sparktap.errors import ServiceError

log = logging.getLogger("sparktap.collector")


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

    def beat(self) -> None:
        self.heartbeat_at = time.monotonic()

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        now = time.monotonic()
        silent = now - self.heartbeat_at
        alive = silent < self.stall_seconds
        degraded = not self.storage_up or not self.kafka_up or self.paused
        status = "stalled" if not alive else ("degraded" if degraded else "ok")
        body = {
            "status": status,
            "phase": self.phase,
            "storage_up": self.storage_up,
            "kafka_up": self.kafka_up,
            "paused": self.paused,
            "assigned_partitions": self.assigned,
            "stopping": self.stopping,
            "seconds_since_heartbeat": round(silent, 3),
            "seconds_since_commit": None if self.last_commit_at is None else round(now - self.last_commit_at, 3),
            "last_error": self.last_error,
        }
        return (200 if alive else 503), body

    def ready(self) -> bool:
        return self.storage_up and self.assigned > 0 and not self.stopping


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

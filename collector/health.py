"""The collector's HTTP endpoints: ``/metrics`` (Prometheus text), ``/healthz`` (liveness), ``/readyz`` (readiness).

``/healthz`` answers 200 while the service loop is making rounds, *also* while ClickHouse or Kafka is away (the
body says ``degraded``): restarting the collector cannot bring ClickHouse back, and a restart loop is exactly what
must not happen during a short outage. Messages waiting ``SLOW_INSERT_SECONDS`` with no insert succeeding (a
frozen server: the insert call has not even failed yet) make it ``degraded`` too, with the reason. It answers 503
when the loop has not come round for ``stall_seconds``, or when no insert succeeded for ``insert_stall_seconds``
while messages wait, or when a component running in the collector (the embedded alerter) reports its loop
stalled or dead (``status`` says which, ``reason`` why).
``/readyz`` answers 200 when ClickHouse accepted the last operation and the consumer has partitions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparktap.collector.logfmt import fields
from sparktap.collector.metrics import CollectorMetrics
from sparktap.collector.settings import CollectorSettings
from sparktap.endpoints import HttpEndpoints, Route, serve
from sparktap.errors import ServiceError

__all__ = ["CollectorEndpoints", "HealthState", "HttpEndpoints", "InsertWatchdog", "Route", "serve_endpoints"]

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
    kafka_client: str = ""
    """the group consumer in use and its version (``librdkafka 2.16.0``): which native path runs, for an operator"""
    checks: dict[str, Callable[[], str]] = field(default_factory=dict)
    """more liveness checks (the embedded alerter's heartbeat): name -> '' when alive, else why not (503)"""

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
        failed = {name: why for name, why in ((n, check()) for n, check in self.checks.items()) if why}
        if failed and alive and inserting:
            status = "component_stalled"
            reason = "; ".join(f"{name}: {why}" for name, why in sorted(failed.items()))
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
            "kafka_client": self.kafka_client,
        }
        return (200 if alive and inserting and not failed else 503), body

    def ready(self) -> bool:
        return self.storage_up and self.assigned > 0 and not self.stopping

    def readiness(self) -> tuple[int, dict[str, Any]]:
        """``/readyz``: 200 when ClickHouse accepted the last operation and the consumer has partitions."""
        ready = self.ready()
        return (200 if ready else 503), {"ready": ready}


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


class CollectorEndpoints:
    """The collector's endpoints: ``/metrics``, ``/healthz`` and ``/readyz`` on ``metrics_host:metrics_port`` (any
    interface by default: Prometheus and the kubelet reach them), and the private routes (``/findings``) on their
    own listener, ``findings_host:findings_port`` (127.0.0.1 by default), only with a bearer token: without
    ``findings_token`` they are off. ``port`` is the public port, ``findings_port`` the private one (None: off)."""

    def __init__(self, public: HttpEndpoints, private: HttpEndpoints | None) -> None:
        self.public = public
        self.private = private
        self.host = public.host
        self.port = public.port
        self.findings_port: int | None = None if private is None else private.port

    def close(self) -> None:
        for endpoints in (self.private, self.public):
            if endpoints is not None:
                endpoints.close()


def serve_endpoints(
    cfg: CollectorSettings, metrics: CollectorMetrics, health: HealthState, routes: Mapping[str, Route] | None = None
) -> CollectorEndpoints | None:
    """Start the endpoints (``metrics_port`` None: none; 0: any free port); ServiceError when a port is taken."""
    if cfg.metrics_port is None:
        return None
    timeout = cfg.http_timeout_seconds
    public = serve(
        cfg.metrics_host,
        cfg.metrics_port,
        "/metrics",
        "SPARKTAP_COLLECTOR__METRICS_PORT",
        registries=[metrics.registry],
        health=health.snapshot,
        ready=health.readiness,
        socket_timeout=timeout,
    )
    log.info("serving /metrics, /healthz and /readyz", extra=fields(host=cfg.metrics_host, port=public.port))
    private = None
    token = cfg.findings_token
    if routes and (token is None or not token.get_secret_value()):
        log.info(
            "not serving %s: set SPARKTAP_COLLECTOR__FINDINGS_TOKEN to serve them (with that bearer token)",
            ", ".join(sorted(routes)),
        )
    elif routes and cfg.findings_port is not None:
        try:
            private = serve(
                cfg.findings_host,
                cfg.findings_port,
                ", ".join(sorted(routes)),
                "SPARKTAP_COLLECTOR__FINDINGS_PORT",
                routes={path: (route, token) for path, route in routes.items()},
                socket_timeout=timeout,
                name="sparktap-http-findings",
            )
        except ServiceError:
            public.close()
            raise
        log.info(
            "serving %s (bearer token required)",
            ", ".join(sorted(routes)),
            extra=fields(host=cfg.findings_host, port=private.port),
        )
    return CollectorEndpoints(public, private)

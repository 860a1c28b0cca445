"""What the collector reports about its outside world: ClickHouse and Kafka up or down, the pending batch's size,
the assigned partitions — kept in ``/healthz`` (``HealthState``) and ``/metrics`` (``CollectorMetrics``) at once,
with the log lines that go with each change."""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError

from sparktap.collector.health import HealthState
from sparktap.collector.logfmt import fields
from sparktap.collector.metrics import CollectorMetrics
from sparktap.store import StorageError

log = logging.getLogger("sparktap.collector")

_KAFKA_LOG_EVERY = 30.0


class ServiceState:
    """Health and metrics of one collector, changed together."""

    def __init__(self, health: HealthState, metrics: CollectorMetrics, url: str, bootstrap: str) -> None:
        self.health = health
        self.metrics = metrics
        self.url = url
        """the store's URL without its password (logs)"""
        self.bootstrap = bootstrap
        self._kafka_error_logged: dict[int, float] = {}

    def storage_down(self, exc: StorageError, what: str, pending_messages: int) -> None:
        again = not self.health.storage_up and self.health.last_error != ""
        self.health.storage_up = False
        self.health.last_error = str(exc)
        self.metrics.storage_up.set(0)
        self.metrics.retries.labels("clickhouse").inc()
        log.warning(
            f"{what}; retrying with backoff" + (" (still failing)" if again else ""),
            extra=fields(url=self.url, code=exc.code, name=exc.name, error=str(exc), pending_messages=pending_messages),
        )

    def storage_up(self) -> None:
        self.health.last_insert_at = time.monotonic()  # called after every successful insert, and at start
        if not self.health.storage_up:
            if self.health.last_error:
                log.info("ClickHouse accepts writes again", extra=fields(url=self.url))
            self.health.storage_up = True
            self.health.last_error = ""
            self.metrics.storage_up.set(1)

    def kafka_up(self) -> None:
        self.health.kafka_up = True
        self.metrics.kafka_up.set(1)

    def kafka_error(self, err: KafkaError) -> bool:
        """Record and log (once per 30 s per kind) a librdkafka error; True if it is fatal (the collector stops)."""
        code = err.code()
        if code == KafkaError._ALL_BROKERS_DOWN:
            self.health.kafka_up = False
            self.metrics.kafka_up.set(0)
        now = time.monotonic()
        if now - self._kafka_error_logged.get(code, -1e9) < _KAFKA_LOG_EVERY and not err.fatal():
            return False  # librdkafka repeats itself while a broker is away
        self._kafka_error_logged[code] = now
        log.warning(
            "Kafka: " + ("fatal error" if err.fatal() else "librdkafka retries by itself"),
            extra=fields(bootstrap=self.bootstrap, code=err.name(), error=err.str()),
        )
        if err.fatal():
            self.health.last_error = err.str()
            return True
        return False

    def pending(self, messages: int, rows: int) -> None:
        """The pending batch grew to ``messages`` / ``rows``."""
        self.health.pending_messages = messages
        if self.health.pending_since is None:
            self.health.pending_since = time.monotonic()
        self.metrics.pending_rows.set(rows)
        self.metrics.pending_messages.set(messages)

    def nothing_pending(self, inserted: bool) -> None:
        self.metrics.pending_rows.set(0)
        self.metrics.pending_messages.set(0)
        self.health.pending_messages = 0
        self.health.pending_since = None
        if inserted:
            self.health.last_insert_at = time.monotonic()

    def assigned(self, partitions: int) -> None:
        self.health.assigned = partitions
        self.metrics.assigned.set(partitions)

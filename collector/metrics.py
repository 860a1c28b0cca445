"""Prometheus metrics of the collector (prometheus_client, one registry per collector instance).

Names are ``sparktap_collector_*`` for the service itself and ``sparktap_listener_*`` for what the listeners report
in their ``listener_health`` events (drops and Kafka losses, summed per cluster from the cumulative counters).
Cluster names come from Spark users: at most ``max_clusters`` get their own series (a body of 50,000 names was
23.5 MB); the rest are summed under ``cluster="_other"``, and ``sparktap_collector_metrics_clusters_overflow``
says how many distinct names that is.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sparktap.collector.arrowpath import as_list, take
from sparktap.collector.decode import REJECT_KINDS

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0)
_BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_ROWS_BUCKETS = (1, 10, 100, 1_000, 2_500, 5_000, 10_000, 20_000, 50_000, 100_000)
OVERFLOW_CLUSTER = "_other"
"""the cluster label of listener counts from clusters beyond ``metrics_max_clusters``"""
OVERFLOW_MEMORY = 100_000
"""distinct overflow cluster names remembered (to count each once): about 10 MB; beyond, summed but not counted"""
LATENCY_SAMPLES = 64
"""events per batch whose emitted -> inserted latency is observed (evenly spaced): cheap, and unbiased enough"""


class CollectorMetrics:
    """Every metric the collector exports, on its own registry (several collectors can live in one process)."""

    def __init__(self, registry: CollectorRegistry | None = None, max_clusters: int = 1_000) -> None:
        self.max_clusters = max_clusters
        self._clusters: set[str] = set()
        self._overflow: set[str] = set()
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.consumed = Counter("sparktap_collector_consumed_messages", "Messages consumed from Kafka", registry=r)
        self.consumed_bytes = Counter(
            "sparktap_collector_consumed_bytes", "Bytes of message values consumed", registry=r
        )
        self.inserted = Counter(
            "sparktap_collector_inserted_rows", "Rows ClickHouse accepted, by table", ["table"], registry=r
        )
        self.dead_letters = Counter(
            "sparktap_collector_dead_letters", "Messages sent to the dead-letter topic", ["reason"], registry=r
        )
        for kind in REJECT_KINDS:
            self.dead_letters.labels(kind)
        self.validated = Counter(
            "sparktap_collector_validated_events", "Events validated one by one by pydantic (the slow path)", registry=r
        )
        self.batches = Counter("sparktap_collector_batches", "Batches inserted and committed", registry=r)
        self.batch_seconds = Histogram(
            "sparktap_collector_batch_seconds",
            "Time to insert a batch into ClickHouse and commit its offsets",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.batch_rows = Histogram(
            "sparktap_collector_batch_rows", "Rows per batch", buckets=_ROWS_BUCKETS, registry=r
        )
        self.event_latency = Histogram(
            "sparktap_collector_event_latency_seconds",
            f"Event emitted (emitted_at_ms) -> row inserted; {LATENCY_SAMPLES} sampled events per batch",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.insert_streams = Counter(
            "sparktap_collector_insert_streams",
            "INSERTs kept open over several batches (a backlog on a server), by outcome: confirmed, or failed (their "
            "messages are read again and inserted batch by batch)",
            ["outcome"],
            registry=r,
        )
        for outcome in ("confirmed", "failed"):
            self.insert_streams.labels(outcome)
        self.commits = Counter("sparktap_collector_commits", "Offset commits that succeeded", registry=r)
        self.commit_failures = Counter(
            "sparktap_collector_commit_failures", "Offset commits that failed", ["error"], registry=r
        )
        self.retries = Counter(
            "sparktap_collector_retries", "Retries after a failure, by what failed", ["target"], registry=r
        )
        self.abandoned = Counter(
            "sparktap_collector_abandoned_messages",
            "Uncommitted messages given up (partitions revoked or shutdown deadline): they are redelivered, never lost",
            registry=r,
        )
        self.lag = Gauge(
            "sparktap_collector_lag_messages",
            "Approximate lag: high watermark minus committed offset, per partition",
            ["topic", "partition"],
            registry=r,
        )
        self.lag_total = Gauge(
            "sparktap_collector_lag_messages_total_approx",
            "Approximate lag summed over the assigned partitions",
            registry=r,
        )
        self.pending_rows = Gauge("sparktap_collector_pending_rows", "Rows decoded, not yet inserted", registry=r)
        self.pending_messages = Gauge(
            "sparktap_collector_pending_messages", "Messages consumed, not yet inserted", registry=r
        )
        self.uncommitted = Gauge(
            "sparktap_collector_uncommitted_messages",
            "Messages whose rows are in ClickHouse but whose offsets are not committed yet",
            registry=r,
        )
        self.assigned = Gauge(
            "sparktap_collector_assigned_partitions", "Partitions assigned to this collector", registry=r
        )
        self.storage_up = Gauge(
            "sparktap_collector_storage_up", "1 when the last ClickHouse operation succeeded", registry=r
        )
        self.kafka_up = Gauge("sparktap_collector_kafka_up", "0 while librdkafka reports all brokers down", registry=r)
        self.paused = Gauge(
            "sparktap_collector_consumption_paused",
            "1 while consumption is paused (ClickHouse away: memory stays bounded)",
            registry=r,
        )
        self.kafka_client = Gauge(
            "sparktap_collector_kafka_client_info",
            "The group consumer in use (client: librdkafka, the collector's own; or confluent-kafka) and its version",
            ["client", "version"],
            registry=r,
        )
        self.last_commit = Gauge(
            "sparktap_collector_last_commit_timestamp_seconds", "When offsets were last committed", registry=r
        )
        self.listener_dropped = Counter(
            "sparktap_listener_events_dropped",
            "Events the listeners dropped (queue full), from listener_health",
            ["cluster"],
            registry=r,
        )
        self.listener_lost = Counter(
            "sparktap_listener_kafka_events_lost",
            "Events the relays could not deliver to Kafka, from listener_health",
            ["cluster"],
            registry=r,
        )
        self.clusters_overflow = Gauge(
            "sparktap_collector_metrics_clusters_overflow",
            "Distinct cluster names beyond metrics_max_clusters: their listener counts are summed under "
            f'cluster="{OVERFLOW_CLUSTER}"',
            registry=r,
        )
        self.storage_up.set(0)
        self.kafka_up.set(1)
        self._health = ListenerHealthTracker()

    def text(self) -> bytes:
        """The exposition (what ``/metrics`` serves)."""
        return generate_latest(self.registry)

    @staticmethod
    def latency_sample(emitted_at_ms: Sequence[Any]) -> list[Any]:
        """Up to LATENCY_SAMPLES evenly spaced values of a batch's ``emitted_at_ms`` (what ``observe_latency``
        observes: kept instead of the column while the rows wait for an INSERT stream's confirmation)."""
        n = len(emitted_at_ms)
        return as_list(take(emitted_at_ms, range(0, n, max(1, n // LATENCY_SAMPLES)))) if n else []

    def observe_latency(self, emitted_at_ms: Sequence[Any], now: float | None = None) -> None:
        """Observe up to LATENCY_SAMPLES evenly spaced events of a batch (emitted_at_ms -> now)."""
        now_ms = (time.time() if now is None else now) * 1000.0
        for value in self.latency_sample(emitted_at_ms):
            if isinstance(value, int):
                self.event_latency.observe(max(0.0, (now_ms - value) / 1000.0))

    def observe_listener_health(self, columns: Mapping[str, Sequence[Any]]) -> None:
        """Add the growth of the listeners' cumulative drop/loss counters (listener_health rows of a batch)."""
        for name, dropped, lost in self._health.deltas(columns):
            cluster = self._cluster_label(name)
            if dropped:
                self.listener_dropped.labels(cluster).inc(dropped)
            if lost:
                self.listener_lost.labels(cluster).inc(lost)

    def _cluster_label(self, cluster: str) -> str:
        """The cluster itself while fewer than ``max_clusters`` have a series, else OVERFLOW_CLUSTER (counted once
        per distinct name, remembering at most OVERFLOW_MEMORY names)."""
        if cluster in self._clusters:
            return cluster
        if len(self._clusters) < self.max_clusters:
            self._clusters.add(cluster)
            return cluster
        if cluster not in self._overflow and len(self._overflow) < OVERFLOW_MEMORY:
            self._overflow.add(cluster)
            self.clusters_overflow.set(len(self._overflow))
        return OVERFLOW_CLUSTER


class ListenerHealthTracker:
    """Turns the cumulative per-application counters of listener_health events into increments.

    The last value per (cluster, app_id, app_attempt) is remembered (bounded, least recently seen forgotten);
    a redelivered or reordered older report is never counted twice because only growth is added.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._last: OrderedDict[tuple[str, str, str], tuple[int, int]] = OrderedDict()

    def deltas(self, columns: Mapping[str, Sequence[Any]]) -> list[tuple[str, int, int]]:
        out: list[tuple[str, int, int]] = []
        keys = zip(columns["cluster"], columns["app_id"], columns["app_attempt"], strict=True)
        values = zip(columns["events_dropped"], columns["kafka_events_lost"], strict=True)
        for key, (dropped, lost) in zip(keys, values, strict=True):
            before = self._last.get(key, (0, 0))
            now = (max(before[0], int(dropped)), max(before[1], int(lost)))
            self._last[key] = now
            self._last.move_to_end(key)
            if now != before:
                out.append((str(key[0]), now[0] - before[0], now[1] - before[1]))
        while len(self._last) > self.capacity:
            self._last.popitem(last=False)
        return out

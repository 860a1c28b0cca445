"""The collector's shared state and its control: what the batching (``batching.py``), the commits and rebalances
(``rebalance.py``) and the service loop (``consumer.py``) all read — the consumer, the pending batch, the offsets,
the stop request — and the waiting every step of it does (polling the consumer, so the group keeps it).

``Collector`` (``consumer.py``) is ``CollectorCore`` + ``Batching`` + ``Rebalancing``: one object, one thread,
split by concern so each part reads on its own.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from sparktap.collector.batch import PendingBatch, scan_messages
from sparktap.collector.decode import Decoder
from sparktap.collector.health import CollectorEndpoints, HealthState, InsertWatchdog, Route
from sparktap.collector.kafka.client import GroupConsumer, Pauses
from sparktap.collector.kafka.dlq import DeadLetterQueue
from sparktap.collector.kafka.offsets import OffsetBook
from sparktap.collector.logfmt import fields
from sparktap.collector.metrics import CollectorMetrics
from sparktap.collector.service_state import ServiceState
from sparktap.collector.settings import IngestSettings
from sparktap.collector.writer import Backoff, BatchWriter
from sparktap.store import Storage, StorageError

log = logging.getLogger("sparktap.collector")

IDLE_POLL = 0.25
_FIRST_MESSAGE_SIZE = 64 << 10  # until a chunk was seen: a 32 MiB budget takes 512 messages in the first call


@dataclass
class BatchReport:
    """What ``on_batch`` hooks get once a batch is in ClickHouse (benchmarks and tests use it)."""

    messages: int
    rows: dict[str, int]
    dead_letters: int
    seconds: float
    emitted_at_ms: dict[str, list[int]] = field(default_factory=dict)
    inserted_at: dict[str, float] = field(default_factory=dict)


@dataclass
class CollectorHooks:
    """What other parts attach to the collector without it knowing them (the composition root, ``sparktap.cli``,
    wires the alerter here in embedded mode): ``ready(storage)`` once the schema is in place, ``inserted(apps)``
    after each batch is in ClickHouse with its (cluster, app_id) pairs, ``stopped()`` at shutdown. A hook that
    raises is logged, never stops ingest."""

    ready: list[Callable[[Storage], None]] = field(default_factory=list)
    inserted: list[Callable[[set[tuple[str, str]]], None]] = field(default_factory=list)
    stopped: list[Callable[[], None]] = field(default_factory=list)
    routes: dict[str, Route] = field(default_factory=dict)
    """private JSON endpoints, with a bearer token on their own port (``/findings``: what ``sparktap findings``
    reads)"""
    checks: dict[str, Callable[[], str]] = field(default_factory=dict)
    """liveness of attached components for ``/healthz``: name -> '' when alive, else why not"""


def call_hooks(what: str, hooks: list[Callable[..., None]], *args: Any) -> None:
    for hook in hooks:
        try:
            hook(*args)
        except Exception:  # a hook never stops ingest
            log.exception("collector hook failed", extra=fields(hook=what))


class Abandoned(Exception):  # noqa: N818 - control flow inside the collector, never escapes it
    """The uncommitted work must be given up (partitions revoked, or the shutdown deadline passed)."""


class CollectorCore:
    """The state every concern of the collector shares, its control (stop, signals, the shutdown deadline) and its
    waiting (``_wait``/``_sleep`` keep polling the consumer, so the group keeps it)."""

    _storage: Storage | None
    _consumer: GroupConsumer | None
    _batch: PendingBatch
    _lag_at: float
    _unconfirmed: list[tuple[set[tuple[str, str]], BatchReport | None]]
    _stream_off: dict[tuple[str, int], int]

    def __init__(
        self,
        settings: IngestSettings,
        *,
        storage: Storage | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        install_signal_handlers: bool = True,
        hooks: CollectorHooks | None = None,
    ) -> None:
        self.settings = settings
        self.cfg = settings.collector
        self.topic = settings.kafka.topic
        self.metrics = CollectorMetrics(max_clusters=self.cfg.metrics_max_clusters)
        self.health = HealthState(
            stall_seconds=self.cfg.stall_seconds, insert_stall_seconds=self.cfg.insert_stall_seconds
        )
        self._url = settings.clickhouse.target().redacted
        self.state = ServiceState(self.health, self.metrics, self._url, settings.kafka.bootstrap_servers)
        self.http: CollectorEndpoints | None = None
        self.on_batch = on_batch
        self.hooks = hooks or CollectorHooks()
        self.started = threading.Event()
        """set once the storage is ready and the consumer subscribed"""
        self._install_signals = install_signal_handlers
        self._storage = storage
        self._owns_storage = storage is None
        self._schema_ready = False
        self._decoder: Decoder | None = None
        self._writer: BatchWriter | None = None
        self._consumer = None
        self._dlq: DeadLetterQueue | None = None
        self._batch = PendingBatch()
        self._offsets = OffsetBook(self.metrics)
        self._unconfirmed: list[tuple[set[tuple[str, str]], BatchReport | None]] = []
        """batches written, not yet confirmed (an open INSERT stream holds some of their rows): their reports"""
        self._stream_off: dict[tuple[str, int], int] = {}
        """after a failed INSERT stream: per partition, the offset until which batches are inserted one by one"""
        self._stop = threading.Event()
        self._stop_requested_at: float | None = None
        self._force = False
        self._busy = False  # inside a flush or commit that polls the consumer while it waits
        self._lost = False
        self._pauses = Pauses(self.health, self.metrics)
        self._lag_at = 0.0
        self._message_size = float(_FIRST_MESSAGE_SIZE)
        """recent consumed message size, bytes (sizes consume calls against the byte budget)"""
        self._batches = 0
        self._watchdog = InsertWatchdog(self.health, self._url)

    def stop(self) -> None:
        """Ask the service to stop: it inserts, commits and returns from ``run()``. Thread-safe, idempotent."""
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        self._stop.set()
        self.health.stopping = True

    def _signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._stop.is_set():
            self._force = True
            log.warning("second signal: exiting without waiting", extra=fields(signal=name))
        else:
            log.info("stopping: flushing and committing", extra=fields(signal=name))
        self.stop()

    def _check(self) -> None:
        """Raise Abandoned when the uncommitted work must be given up now."""
        if self._lost:
            raise Abandoned("partitions revoked or lost before the offsets were committed")
        if self._force or (
            self._stop_requested_at is not None
            and time.monotonic() - self._stop_requested_at > self.cfg.shutdown_timeout_seconds
        ):
            raise Abandoned("shutdown deadline passed before the offsets were committed")

    @property
    def storage(self) -> Storage | None:
        """The store, once its schema is created or migrated (None before: its tables, even its database, may not
        exist yet)."""
        return self._storage if self._schema_ready else None

    def _backoff(self) -> Backoff:
        return Backoff(self.cfg.retry_backoff_seconds, self.cfg.retry_backoff_max_seconds)

    def _rewind(self, messages: Sequence[Message]) -> None:
        """Seek back to the first of ``messages`` per partition and pause it (read again when resumed)."""
        spans = scan_messages(messages)[5]  # per partition, (first, last) offset: a partition's come in order
        parts = [TopicPartition(t, p, first) for (t, p), (first, _) in spans.items()]
        self._seek(parts)
        self._pauses.pause(self._consumer, parts)

    def _seek(self, parts: list[TopicPartition]) -> None:
        consumer = self._consumer
        for tp in parts:
            try:
                if consumer is not None:
                    consumer.seek(tp)
            except KafkaException as exc:
                log.warning("cannot seek back", extra=fields(partition=tp.partition, error=str(exc)))

    def _wait(self, seconds: float) -> None:
        """Wait ``seconds`` while polling the consumer (group membership, callbacks); Abandoned if it must stop."""
        end = time.monotonic() + seconds
        while True:
            self._check()
            remaining = end - time.monotonic()
            if remaining <= 0:
                return
            self._poll_idle(min(IDLE_POLL, remaining))

    def _poll_idle(self, seconds: float) -> None:
        """Poll the consumer for ``seconds`` (``Batching``: what it fetches while busy is rewound)."""
        raise NotImplementedError

    def _streams_off(self, batch: PendingBatch) -> None:
        """An INSERT stream failed: no stream opens until the offsets of what it held and of ``batch`` (the batch
        being written) are committed (``_stream_off``), so their messages, read again, go in batch by batch."""
        ends = self._offsets.streamed_ends()
        for key, (_, last) in batch.offsets.items():
            ends[key] = max(ends.get(key, 0), last + 1)
        for key, end in ends.items():
            self._stream_off[key] = max(self._stream_off.get(key, 0), end)

    def _written(self, batch: PendingBatch, seconds: float, inserted_at: dict[str, float]) -> None:
        """Keep what is reported of a written batch until it is confirmed (``Batching``)."""
        raise NotImplementedError

    def _confirmed(self, stream_inserted_at: dict[str, float] | None = None) -> None:
        """The batches written since the last confirmation are in ClickHouse (``Batching``)."""
        raise NotImplementedError

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self._stop.is_set() and (remaining := end - time.monotonic()) > 0:
            self.health.beat()
            self._stop.wait(min(IDLE_POLL, remaining))

    def _stop_deadline_passed(self) -> bool:
        try:
            self._check()
        except Abandoned:
            return True
        return False

    def _storage_down(self, exc: StorageError, what: str) -> None:
        self.state.storage_down(exc, what, self._batch.messages)
        if self._consumer is not None and not self._pauses:
            try:
                assignment = self._consumer.assignment()
            except KafkaException:
                assignment = []
            if assignment:
                self._pauses.pause(self._consumer, assignment)
                log.warning(
                    "consumption paused until ClickHouse accepts the batch",
                    extra=fields(partitions=len(assignment), pending_rows=self._batch.rows),
                )

    def _storage_up(self) -> None:
        self.state.storage_up()

    def _on_kafka_error(self, err: KafkaError) -> None:
        if self.state.kafka_error(err):
            self.stop()

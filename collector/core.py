"""What the collector's parts share, each as an object of its own: ``Control`` (the stop request, the shutdown
deadline, the flags of the step in progress), ``Links`` (the consumer, the dead-letter producer, the decoder and
the writer, once started) and ``Pending`` (the pending batch and the reports of batches written, not yet
confirmed).

``Collector`` (``consumer.py``) makes them and hands them (``Shared``) to its parts: the ``Batcher``
(``batching.py``), the ``Committer`` (``rebalance.py``) and the ``Loop`` (``loop.py``). One thread runs them all.
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

from sparktap.collector.arrowpath import as_list
from sparktap.collector.batch import PendingBatch, scan_messages
from sparktap.collector.decode import Decoder
from sparktap.collector.health import HealthState, Route
from sparktap.collector.kafka.client import GroupConsumer, Pauses
from sparktap.collector.kafka.dlq import DeadLetterQueue
from sparktap.collector.logfmt import fields
from sparktap.collector.metrics import CollectorMetrics
from sparktap.collector.service_state import ServiceState
from sparktap.collector.settings import CollectorSettings, IngestSettings
from sparktap.collector.writer import Backoff, BatchWriter
from sparktap.store import Storage

log = logging.getLogger("sparktap.collector")

IDLE_POLL = 0.25


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


class Control:
    """Stop requests (``stop()``, SIGTERM/SIGINT), the shutdown deadline, and the flags of the step in progress: a
    flush or commit that polls the consumer while it waits is ``busy``; a rebalance meanwhile sets ``lost``."""

    def __init__(self, cfg: CollectorSettings, health: HealthState, state: ServiceState) -> None:
        self.cfg = cfg
        self.health = health
        self.state = state
        self.stopped = threading.Event()
        self.stop_requested_at: float | None = None
        self.force = False
        self.busy = False  # inside a flush or commit that polls the consumer while it waits
        self.lost = False

    def stop(self) -> None:
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
        self.stopped.set()
        self.health.stopping = True

    def signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.stopped.is_set():
            self.force = True
            log.warning("second signal: exiting without waiting", extra=fields(signal=name))
        else:
            log.info("stopping: flushing and committing", extra=fields(signal=name))
        self.stop()

    def check(self) -> None:
        """Raise Abandoned when the uncommitted work must be given up now."""
        if self.lost:
            raise Abandoned("partitions revoked or lost before the offsets were committed")
        if self.force or (
            self.stop_requested_at is not None
            and time.monotonic() - self.stop_requested_at > self.cfg.shutdown_timeout_seconds
        ):
            raise Abandoned("shutdown deadline passed before the offsets were committed")

    def deadline_passed(self) -> bool:
        try:
            self.check()
        except Abandoned:
            return True
        return False

    def backoff(self) -> Backoff:
        return Backoff(self.cfg.retry_backoff_seconds, self.cfg.retry_backoff_max_seconds)

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopped.is_set() and (remaining := end - time.monotonic()) > 0:
            self.health.beat()
            self.stopped.wait(min(IDLE_POLL, remaining))

    def on_kafka_error(self, err: KafkaError) -> None:
        if self.state.kafka_error(err):
            self.stop()


class Links:
    """What the collector starts after its constructor: the storage's decoder and writer (once the schema is ready),
    the group's consumer and the dead-letter producer (once subscribed), and the partitions paused meanwhile."""

    def __init__(self, health: HealthState, metrics: CollectorMetrics) -> None:
        self.consumer: GroupConsumer | None = None
        self.dlq: DeadLetterQueue | None = None
        self.decoder: Decoder | None = None
        self.writer: BatchWriter | None = None
        self.pauses = Pauses(health, metrics)

    def rewind(self, messages: Sequence[Message]) -> None:
        """Seek back to the first of ``messages`` per partition and pause it (read again when resumed)."""
        spans = scan_messages(messages)[5]  # per partition, (first, last) offset: a partition's come in order
        parts = [TopicPartition(t, p, first) for (t, p), (first, _) in spans.items()]
        self.seek(parts)
        self.pauses.pause(self.consumer, parts)

    def seek(self, parts: list[TopicPartition]) -> None:
        consumer = self.consumer
        for tp in parts:
            try:
                if consumer is not None:
                    consumer.seek(tp)
            except KafkaException as exc:
                log.warning("cannot seek back", extra=fields(partition=tp.partition, error=str(exc)))


class Pending:
    """The pending batch, and what the hooks and ``on_batch`` are told of the batches written since the last
    confirmation (an open INSERT stream holds some of their rows), once they are confirmed."""

    def __init__(self, hooks: CollectorHooks, on_batch: Callable[[BatchReport], None] | None) -> None:
        self.hooks = hooks
        self.on_batch = on_batch
        self.batch = PendingBatch()
        self.unconfirmed: list[tuple[set[tuple[str, str]], BatchReport | None]] = []

    def take(self) -> PendingBatch:
        """The pending batch, a new empty one pending in its place."""
        batch, self.batch = self.batch, PendingBatch()
        return batch

    def drop(self) -> PendingBatch:
        """Give up the pending batch and the unreported batches written (their messages are read again)."""
        self.unconfirmed = []
        return self.take()

    def written(self, batch: PendingBatch, seconds: float, inserted_at: dict[str, float]) -> None:
        """Keep what the hooks and ``on_batch`` are told of a written batch once it is confirmed (its applications
        and report, never its columns)."""
        apps = batch.applications() if self.hooks.inserted else set()
        report = None
        if self.on_batch is not None:
            report = BatchReport(
                messages=batch.messages,
                rows={n: t.rows for n, t in batch.tables.items()},
                dead_letters=len(batch.rejects),
                seconds=seconds,
                emitted_at_ms={n: as_list(t.columns.get("emitted_at_ms", [])) for n, t in batch.tables.items()},
                inserted_at=dict(inserted_at),
            )
        self.unconfirmed.append((apps, report))

    def confirmed(self, stream_inserted_at: dict[str, float] | None = None) -> None:
        """The batches written since the last confirmation are in ClickHouse: tell the hooks and ``on_batch``
        (``stream_inserted_at``: when the stream holding some of their tables was confirmed)."""
        done, self.unconfirmed = self.unconfirmed, []
        for apps, report in done:
            if self.hooks.inserted:
                call_hooks("inserted", self.hooks.inserted, apps)
            if report is not None and self.on_batch is not None:
                report.inserted_at.update(stream_inserted_at or {})
                self.on_batch(report)


@dataclass(frozen=True)
class Shared:
    """What the batcher, the committer and the loop are each handed: the settings, the control, the links, the
    pending batch, the metrics and the service state."""

    settings: IngestSettings
    control: Control
    links: Links
    pending: Pending
    metrics: CollectorMetrics
    state: ServiceState

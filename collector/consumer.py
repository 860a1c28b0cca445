"""The consumer-group collector: Kafka -> ClickHouse, offsets committed only after ClickHouse accepted the rows.

One loop, one thread (librdkafka fetches in its own threads meanwhile):

    consume a chunk -> decode (decode.py) -> dead letters out (dlq.py) -> add to the pending batch (batch.py)
    batch due (rows or age)? -> insert every table (writer.py) -> wait for the dead letters' acks
    commit due (after every batch, or every commit_interval_seconds)? -> commit the next offsets

Failures never lose data and never crash-loop:

- ClickHouse unavailable: the assignment is paused (librdkafka stops fetching: memory stays at one batch plus the
  prefetch queue), the insert is retried with exponential backoff while the consumer keeps polling (it stays in its
  group), and consumption resumes once the batch is in.
- Kafka away: librdkafka reconnects; commits and dead letters are retried with backoff.
- Partitions revoked between batches: the pending batch is inserted and everything committed while the partitions
  are still ours. Revoked or lost while ClickHouse or Kafka is failing: the uncommitted work is given up; its
  messages are read again by whoever owns the partitions next, and rows inserted already are deduplicated.
- SIGTERM/SIGINT: stop consuming, insert and commit (for up to ``shutdown_timeout_seconds``), leave the group,
  return. A second signal skips the wait.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from sparktap.collector.batching import Batcher
from sparktap.collector.core import BatchReport, CollectorHooks, Control, Links, Pending, Shared, call_hooks
from sparktap.collector.decode import Decoder
from sparktap.collector.health import CollectorEndpoints, HealthState, InsertWatchdog, serve_endpoints
from sparktap.collector.kafka.client import (
    GroupConsumer,
    ProtocolChoice,
    client_of,
    consumer_config,
    group_consumer,
    producer_config,
)
from sparktap.collector.kafka.dlq import DeadLetterQueue
from sparktap.collector.logfmt import fields
from sparktap.collector.loop import Loop
from sparktap.collector.metrics import CollectorMetrics
from sparktap.collector.rebalance import Committer
from sparktap.collector.service_state import ServiceState
from sparktap.collector.settings import IngestSettings
from sparktap.collector.writer import BatchWriter, prepare_storage
from sparktap.store import Storage, StorageUnavailableError, open_storage

log = logging.getLogger("sparktap.collector")

__all__ = ["BatchReport", "Collector", "CollectorHooks"]

_SERVER_OPTIONS: dict[str, Any] = {"connect_timeout": 5, "send_receive_timeout": 30}


GC_GEN0_THRESHOLD = 100_000
"""Python's young-generation threshold while the loop consumes with confluent-kafka's consumer (700 by default):
its consume calls make a ``Message`` per record, a GC-tracked object, so the default runs a young collection every
700 records; those objects hold no cycles and are freed by their reference counts, so collecting them is wasted
work. The collector's own consumer makes no object per record and is left the process's settings: there the tuning
measured at noise (``bench/collector_gc.py``, docs/benchmarks.md)."""

_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, int, int] = (700, 10, 10)


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """While a collector's loop runs: what exists at its start (modules, the schema, the reader's tables) is frozen
    (``gc.freeze``: the full collections no longer walk it), and young collections run every ``GC_GEN0_THRESHOLD``
    allocations instead of 700. The process's settings come back when the last collector running in it leaves its
    loop."""
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(GC_GEN0_THRESHOLD, _gc_saved[0]), _gc_saved[1], _gc_saved[2])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)
                gc.unfreeze()


class Collector:
    """The consumer-group service. ``run()`` blocks until ``stop()`` (or SIGTERM/SIGINT) and a final commit.

    It composes its parts, each an object of its own with the few others it needs handed to its constructor: the
    ``Loop`` (``loop.py``: poll, dispatch, shut down), the ``Batcher`` (``batching.py``: decoded rows, the pending
    batch, its insert), the ``Committer`` (``rebalance.py``: offsets, commits, the group's assignment), over the
    shared ``Control``, ``Links`` and ``Pending`` (``core.py``); health and metrics in ``service_state.py``. Here,
    the service's lifecycle: the storage opened, Kafka started, everything closed."""

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
        self._protocol: ProtocolChoice | None = None
        self._object_per_message = False
        self._watchdog = InsertWatchdog(self.health, self._url)
        self.control = Control(self.cfg, self.health, self.state)
        self.links = Links(self.health, self.metrics)
        self.pending = Pending(self.hooks, on_batch)
        shared = Shared(settings, self.control, self.links, self.pending, self.metrics, self.state)
        self.committer = Committer(shared)
        self.batcher = Batcher(shared, self.committer)
        self.loop = Loop(shared, self.batcher, self.committer)

    def stop(self) -> None:
        """Ask the service to stop: it inserts, commits and returns from ``run()``. Thread-safe, idempotent."""
        self.control.stop()

    @property
    def storage(self) -> Storage | None:
        """The store, once its schema is created or migrated (None before: its tables, even its database, may not
        exist yet)."""
        return self._storage if self._schema_ready else None

    @property
    def _consumer(self) -> GroupConsumer | None:
        """The group's consumer while subscribed (tests read which client it is)."""
        return self.links.consumer

    def run(self) -> None:
        """Serve until stopped. Expected failures (a busy port, a chDB store held elsewhere, a login refused at
        start) raise a SparktapError with one clear line; outages are waited out, never raised."""
        previous: dict[signal.Signals, Any] = {}
        if self._install_signals and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, self.control.signal)
        try:
            self.health.checks.update(self.hooks.checks)
            self.http = serve_endpoints(self.cfg, self.metrics, self.health, self.hooks.routes)
            self._protocol = ProtocolChoice(self.settings, self.topic)  # asks the broker while the storage opens
            if not self._open_storage():
                return
            assert self._storage is not None  # noqa: S101 - set by _open_storage
            call_hooks("ready", self.hooks.ready, self._storage)
            self._start_kafka()
            self._watchdog.start()
            self.started.set()
            with quiet_gc() if self._object_per_message else contextlib.nullcontext():
                self.loop.run()
        finally:
            self._watchdog.stop()
            call_hooks("stopped", self.hooks.stopped)
            self._shutdown()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _open_storage(self) -> bool:
        """Open the storage and create or migrate the schema, waiting out outages; False if stopped meanwhile."""
        target = self.settings.clickhouse.target()
        backoff = self.control.backoff()
        batcher = self.batcher
        self.health.phase = "opening storage"
        while not self.control.stopped.is_set():
            try:
                if self._storage is None:
                    self._storage = open_storage(target, **(_SERVER_OPTIONS if target.capabilities.remote else {}))
                storage = self._storage
                schema = prepare_storage(
                    storage,
                    self.settings.clickhouse.retention_days,
                    self.cfg.plain_copy,
                    self.settings.clickhouse.readers(),
                )
                self._schema_ready = True
            except StorageUnavailableError as exc:
                batcher.storage_down(exc, "cannot reach ClickHouse to create the schema")
                self.control.sleep(backoff.next())
                continue
            # task_end is read straight into Arrow columns (arrowpath.py): chDB inserts them as they are, a server
            # gets them as a Native block built from their buffers (storage/native.py)
            decoder = Decoder(
                schema,
                self.cfg.max_message_bytes,
                arrow=True,
                max_future_skew_seconds=self.cfg.max_future_skew_seconds,
            )
            self.links.decoder = decoder
            self.links.writer = BatchWriter(
                storage,
                self.metrics,
                retention_days=self.settings.clickhouse.retention_days,
                plain_copy=self.cfg.plain_copy,
                dead_letters=batcher.dead_letters,
                on_down=batcher.storage_down,
                on_up=batcher.storage_up,
                backoff=self.control.backoff,
                max_attempts=self.cfg.max_insert_attempts,
                on_stream_confirmed=batcher.stream_confirmed,
            )
            batcher.storage_up()
            log.info(
                "storage ready",
                extra=fields(
                    url=self._url,
                    version=".".join(map(str, storage.version())),
                    database=schema.database,
                    tables=len(schema.tables),
                ),
            )
            for event_type, why in decoder.slow_types.items():
                log.info("validated by pydantic only", extra=fields(event_type=event_type, why=why))
            return True
        return False

    def _start_kafka(self) -> None:
        kafka = self.settings.kafka
        on_error = self.control.on_kafka_error
        self.links.dlq = DeadLetterQueue(
            producer_config(self.settings, on_error),
            kafka.dead_letter_topic,
            truncate_to=min(self.cfg.max_message_bytes, 900_000),
            on_retry=lambda: self.metrics.retries.labels("kafka").inc(),
        )
        assert self._protocol is not None  # noqa: S101 - asked in run()
        protocol, why = self._protocol.result()
        if protocol == "classic" and self.cfg.group_protocol == "auto" and not self.cfg.instance_id:
            log.info("joining with the classic group protocol", extra=fields(group=kafka.group_id, why=why))
        consumer = group_consumer(consumer_config(self.settings, on_error, protocol), self.cfg.kafka_client)
        self.links.consumer = consumer
        client, version = client_of(consumer)
        self._object_per_message = client == "confluent-kafka"  # quiet_gc pays there only
        self.metrics.kafka_client.labels(client, version).set(1)
        self.health.kafka_client = f"{client} {version}"
        committer = self.committer
        consumer.subscribe(
            [self.topic], on_assign=committer.on_assign, on_revoke=committer.on_revoke, on_lost=committer.on_lost
        )
        self.health.phase = "joining group"
        log.info(
            "consuming",
            extra=fields(
                bootstrap=kafka.bootstrap_servers,
                topic=self.topic,
                group=kafka.group_id,
                dlq=kafka.dead_letter_topic,
                instance_id=self.cfg.instance_id or "",
                group_protocol=protocol or "from SPARKTAP_KAFKA__EXTRA",
                batch_rows=self.cfg.batch_rows,
                batch_bytes=self.cfg.batch_bytes,
                batch_interval_seconds=self.cfg.batch_interval_seconds,
                stream_rows=self.cfg.stream_rows,
                commit_interval_seconds=self.cfg.commit_interval_seconds,
            ),
        )

    def _shutdown(self) -> None:
        self.loop.close()
        self._schema_ready = False
        if self._storage is not None and self._owns_storage:
            self._storage.close()
            self._storage = None
        if self.http is not None:
            self.http.close()
            self.http = None
        self.health.phase = "stopped"
        log.info("stopped", extra=fields(batches=self.batcher.batches))

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

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sparktap.collector.arrowpath import as_list
from sparktap.collector.batch import PendingBatch
from sparktap.collector.decode import Decoder, RejectKind
from sparktap.collector.dlq import DeadLetter, DeadLetterQueue
from sparktap.collector.health import HealthState, HttpEndpoints, InsertWatchdog, Route, serve_endpoints
from sparktap.collector.kafka import Pauses, consumer_config, producer_config
from sparktap.collector.logfmt import fields
from sparktap.collector.metrics import CollectorMetrics
from sparktap.collector.offsets import OffsetBook
from sparktap.collector.settings import IngestSettings
from sparktap.collector.storage import Storage, StorageError, StorageUnavailableError, open_storage
from sparktap.collector.writer import Backoff, BatchWriter, prepare_storage

log = logging.getLogger("sparktap.collector")

# commit errors meaning "these partitions are not ours any more"
_GONE = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError._ASSIGNMENT_LOST,
    }
)
_LAG_INTERVAL = 5.0
_IDLE_POLL = 0.25
_FIRST_POLL = 0.05
_SERVER_OPTIONS: dict[str, Any] = {"connect_timeout": 5, "send_receive_timeout": 30}


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
    """extra JSON endpoints on the collector's HTTP port (``/findings``: what ``sparktap findings`` reads)"""


def _call_hooks(what: str, hooks: list[Callable[..., None]], *args: Any) -> None:
    for hook in hooks:
        try:
            hook(*args)
        except Exception:  # a hook never stops ingest
            log.exception("collector hook failed", extra=fields(hook=what))


class _Abandoned(Exception):  # noqa: N818 - control flow inside the collector, never escapes it
    """The uncommitted work must be given up (partitions revoked, or the shutdown deadline passed)."""


class Collector:
    """The consumer-group service. ``run()`` blocks until ``stop()`` (or SIGTERM/SIGINT) and a final commit."""

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
        self.metrics = CollectorMetrics()
        self.health = HealthState(
            stall_seconds=self.cfg.stall_seconds, insert_stall_seconds=self.cfg.insert_stall_seconds
        )
        self.http: HttpEndpoints | None = None
        self.on_batch = on_batch
        self.hooks = hooks or CollectorHooks()
        self.started = threading.Event()
        """set once the storage is ready and the consumer subscribed"""
        self._install_signals = install_signal_handlers
        self._storage = storage
        self._owns_storage = storage is None
        self._schema_ready = False
        self._url = settings.clickhouse.target().redacted
        self._decoder: Decoder | None = None
        self._writer: BatchWriter | None = None
        self._consumer: Consumer | None = None
        self._dlq: DeadLetterQueue | None = None
        self._batch = PendingBatch()
        self._offsets = OffsetBook(self.metrics)
        self._stop = threading.Event()
        self._stop_requested_at: float | None = None
        self._force = False
        self._busy = False  # inside a flush or commit that polls the consumer while it waits
        self._lost = False
        self._pauses = Pauses(self.health, self.metrics)
        self._lag_at = 0.0
        self._kafka_error_logged: dict[int, float] = {}
        self._batches = 0
        self._watchdog = InsertWatchdog(self.health, self._url)

    # ------------------------------------------------------------------------------------------------ control

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
        """Raise _Abandoned when the uncommitted work must be given up now."""
        if self._lost:
            raise _Abandoned("partitions revoked or lost before the offsets were committed")
        if self._force or (
            self._stop_requested_at is not None
            and time.monotonic() - self._stop_requested_at > self.cfg.shutdown_timeout_seconds
        ):
            raise _Abandoned("shutdown deadline passed before the offsets were committed")

    @property
    def storage(self) -> Storage | None:
        """The store, once its schema is created or migrated (None before: its tables, even its database, may not
        exist yet)."""
        return self._storage if self._schema_ready else None

    # ------------------------------------------------------------------------------------------------ run

    def run(self) -> None:
        """Serve until stopped. Expected failures (a busy port, a chDB store held elsewhere, a login refused at
        start) raise a SparktapError with one clear line; outages are waited out, never raised."""
        previous: dict[signal.Signals, Any] = {}
        if self._install_signals and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, self._signal)
        try:
            self.http = serve_endpoints(self.cfg.metrics_host, self.cfg.metrics_port, self.metrics, self.health)
            for path, route in self.hooks.routes.items():
                if self.http is not None:
                    self.http.route(path, route)
            if not self._open_storage():
                return
            assert self._storage is not None  # noqa: S101 - set by _open_storage
            _call_hooks("ready", self.hooks.ready, self._storage)
            self._start_kafka()
            self._watchdog.start()
            self.started.set()
            self._loop()
        finally:
            self._watchdog.stop()
            _call_hooks("stopped", self.hooks.stopped)
            self._shutdown()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _open_storage(self) -> bool:
        """Open the storage and create or migrate the schema, waiting out outages; False if stopped meanwhile."""
        target = self.settings.clickhouse.target()
        backoff = self._backoff()
        self.health.phase = "opening storage"
        while not self._stop.is_set():
            try:
                if self._storage is None:
                    self._storage = open_storage(target, **(_SERVER_OPTIONS if target.kind == "clickhouse" else {}))
                storage = self._storage
                schema = prepare_storage(storage, self.settings.clickhouse.retention_days, self.cfg.plain_copy)
                self._schema_ready = True
            except StorageUnavailableError as exc:
                self._storage_down(exc, "cannot reach ClickHouse to create the schema")
                self._sleep(backoff.next())
                continue
            # chDB inserts Arrow: task_end is read straight into Arrow columns there (arrowpath.py)
            self._decoder = Decoder(
                schema,
                self.cfg.max_message_bytes,
                arrow=storage.kind == "chdb",
                max_future_skew_seconds=self.cfg.max_future_skew_seconds,
            )
            self._writer = BatchWriter(
                storage,
                self.metrics,
                retention_days=self.settings.clickhouse.retention_days,
                plain_copy=self.cfg.plain_copy,
                dead_letters=self._dead_letters,
                on_down=self._storage_down,
                on_up=self._storage_up,
                backoff=self._backoff,
                max_attempts=self.cfg.max_insert_attempts,
            )
            self._storage_up()
            log.info(
                "storage ready",
                extra=fields(
                    url=self._url,
                    version=".".join(map(str, storage.version())),
                    database=schema.database,
                    tables=len(schema.tables),
                ),
            )
            for event_type, why in self._decoder.slow_types.items():
                log.info("validated by pydantic only", extra=fields(event_type=event_type, why=why))
            return True
        return False

    def _backoff(self) -> Backoff:
        return Backoff(self.cfg.retry_backoff_seconds, self.cfg.retry_backoff_max_seconds)

    def _start_kafka(self) -> None:
        kafka = self.settings.kafka
        self._dlq = DeadLetterQueue(
            producer_config(self.settings, self._on_kafka_error),
            kafka.dead_letter_topic,
            truncate_to=min(self.cfg.max_message_bytes, 900_000),
            on_retry=lambda: self.metrics.retries.labels("kafka").inc(),
        )
        self._consumer = Consumer(consumer_config(self.settings, self._on_kafka_error))
        self._consumer.subscribe(
            [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
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
                batch_rows=self.cfg.batch_rows,
                batch_interval_seconds=self.cfg.batch_interval_seconds,
                commit_interval_seconds=self.cfg.commit_interval_seconds,
            ),
        )

    def _loop(self) -> None:
        consumer = self._consumer
        assert consumer is not None  # noqa: S101 - set by _start_kafka
        cfg = self.cfg
        while not self._stop.is_set():
            self.health.beat()
            # an empty batch polls briefly: librdkafka returns a chunk only when it is full or the timeout is over,
            # and a batch's age starts when its first chunk returns (a long first wait would add to the latency)
            timeout = _FIRST_POLL
            if not self._batch.empty:
                timeout = min(_IDLE_POLL, self._batch.seconds_until_due(cfg.batch_interval_seconds))
            messages = consumer.consume(num_messages=cfg.consume_chunk, timeout=timeout)
            if messages:
                self._ingest(messages)
            if self._batch.due(cfg.batch_rows, cfg.batch_interval_seconds):
                self._guarded(self._flush)
            if self._offsets.due(cfg.commit_interval_seconds):
                self._guarded(self._commit)
            if time.monotonic() - self._lag_at >= _LAG_INTERVAL:
                self._lag_at = time.monotonic()
                self._offsets.update_lag(consumer)
        self.health.phase = "stopping"
        self._guarded(self._flush)
        self._guarded(self._commit)

    def _guarded(self, step: Callable[[], None]) -> None:
        self._busy, self._lost = True, False
        try:
            step()
        except _Abandoned as exc:
            self._abandon(str(exc))
        finally:
            self._busy = False

    def _shutdown(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            if not self._batch.empty or self._offsets:
                self._abandon("stopped before the offsets were committed")
            try:
                consumer.close()  # leaves the group: the partitions move on at once
            except (KafkaException, RuntimeError) as exc:
                log.warning("closing the Kafka consumer failed", extra=fields(error=str(exc)))
        if self._dlq is not None:
            self._dlq.close()
        self._schema_ready = False
        if self._storage is not None and self._owns_storage:
            self._storage.close()
            self._storage = None
        if self.http is not None:
            self.http.close()
            self.http = None
        self.health.phase = "stopped"
        log.info("stopped", extra=fields(batches=self._batches))

    # ------------------------------------------------------------------------------------------------ consuming

    def _ingest(self, messages: list[Message]) -> None:
        good: list[Message] = []
        for msg in messages:
            err = msg.error()
            if err is None:
                good.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                self._on_kafka_error(err)
        if not good:
            return
        self._kafka_up()
        if self._busy:  # fetched while a flush or commit waits (a fresh assignment): read again later
            self._rewind(good)
            return
        decoder = self._decoder
        assert decoder is not None  # noqa: S101 - set by _open_storage
        values = [m.value() for m in good]
        decoded = decoder.decode(values)
        self.metrics.consumed.inc(len(good))
        self.metrics.consumed_bytes.inc(sum(len(v) for v in values if v is not None))
        if decoded.validated:
            self.metrics.validated.inc(decoded.validated)
        if decoded.rejects:
            self._dead_letters([(good[r.index], r.kind, r.reason) for r in decoded.rejects])
        self._batch.add(good, decoded)
        self.health.pending_messages = self._batch.messages
        if self.health.pending_since is None:
            self.health.pending_since = time.monotonic()
        health = decoded.tables.get("listener_health")
        if health is not None:
            self.metrics.observe_listener_health(health.columns)
        self.metrics.pending_rows.set(self._batch.rows)
        self.metrics.pending_messages.set(self._batch.messages)

    def _dead_letters(self, items: list[tuple[Message, RejectKind, str]]) -> None:
        dlq = self._dlq
        assert dlq is not None  # noqa: S101 - set by _start_kafka
        for msg, kind, reason in items:
            dlq.send(DeadLetter.of(msg, kind, reason))
            self.metrics.dead_letters.labels(kind).inc()
        msg, kind, reason = items[0]
        log.warning(
            "dead-lettered messages",
            extra=fields(
                count=len(items),
                dlq=dlq.topic,
                topic=msg.topic(),
                partition=msg.partition(),
                offset=msg.offset(),
                kind=kind,
                reason=reason,
            ),
        )

    def _rewind(self, messages: list[Message]) -> None:
        """Seek back to the first of ``messages`` per partition and pause it (read again when resumed)."""
        first: dict[tuple[str, int], int] = {}
        for msg in messages:
            key, offset = (msg.topic() or "", msg.partition() or 0), msg.offset() or 0
            first[key] = min(first.get(key, offset), offset)
        parts = [TopicPartition(t, p, o) for (t, p), o in first.items()]
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

    # ------------------------------------------------------------------------------------------------ writing

    def _flush(self) -> None:
        """Insert the pending batch and settle its dead letters; its offsets become committable."""
        batch = self._batch
        if batch.empty:
            return
        writer = self._writer
        assert writer is not None  # noqa: S101 - set by _open_storage
        started = time.monotonic()
        writer.write(batch, self._wait)
        self._settle_dead_letters()
        self._batch = PendingBatch()
        self._offsets.inserted(batch)
        self._nothing_pending(inserted=True)
        seconds = time.monotonic() - started
        self._batches += 1
        self.metrics.batches.inc()
        self.metrics.batch_seconds.observe(seconds)
        self.metrics.batch_rows.observe(batch.rows)
        self._pauses.resume(self._consumer)
        if self.hooks.inserted:
            _call_hooks("inserted", self.hooks.inserted, batch.applications())
        if self.on_batch is not None:
            self.on_batch(
                BatchReport(
                    messages=batch.messages,
                    rows={n: t.rows for n, t in batch.tables.items()},
                    dead_letters=len(batch.rejects),
                    seconds=seconds,
                    emitted_at_ms={n: as_list(t.columns.get("emitted_at_ms", [])) for n, t in batch.tables.items()},
                    inserted_at=dict(writer.inserted_at),
                )
            )
        log.debug("batch inserted", extra=fields(messages=batch.messages, rows=batch.rows, seconds=round(seconds, 4)))

    def _settle_dead_letters(self) -> None:
        dlq = self._dlq
        if dlq is None or dlq.pending == 0:
            return
        backoff = self._backoff()
        if not dlq.settle(lambda: self._lost or self._stop_deadline_passed(), self._poll_idle, backoff.next):
            self._check()

    def _stop_deadline_passed(self) -> bool:
        try:
            self._check()
        except _Abandoned:
            return True
        return False

    def _commit(self) -> None:
        """Commit the next offset of every partition whose rows are in ClickHouse, retrying until it works."""
        if not self._offsets:
            return
        consumer = self._consumer
        assert consumer is not None  # noqa: S101
        offsets = self._offsets.to_commit()
        backoff = self._backoff()
        while True:
            self._check()
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                break
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                self.metrics.commit_failures.labels(err.name()).inc()
                if err.code() in _GONE:
                    raise _Abandoned(f"commit refused: {err.name()}: the partitions moved to another member") from exc
                self.metrics.retries.labels("kafka").inc()
                log.warning(
                    "cannot commit offsets to Kafka; retrying",
                    extra=fields(bootstrap=self.settings.kafka.bootstrap_servers, error=err.str(), code=err.name()),
                )
                self._wait(backoff.next())
        self._committed_now(offsets)

    def _committed_now(self, offsets: list[TopicPartition]) -> None:
        self._offsets.committed_now(offsets)
        self.health.last_commit_at = self._offsets.last_commit_at
        self._kafka_up()

    def _abandon(self, why: str, leaving: set[tuple[str, int]] | None = None) -> None:
        """Give up the pending batch and the uncommitted offsets: their messages are read again (rows inserted
        already are deduplicated). Partitions still ours (not ``leaving``) are rewound to their first uncommitted
        offset; the others are re-read from the last commit by whoever gets them."""
        batch, self._batch = self._batch, PendingBatch()
        first, messages = self._offsets.drop(batch)
        self.metrics.abandoned.inc(messages)
        self._nothing_pending(inserted=False)
        if messages:
            log.warning(
                "offsets not committed: these messages will be delivered again (rows are deduplicated)",
                extra=fields(messages=messages, why=why),
            )
        consumer = self._consumer
        if consumer is None or self._stop.is_set() or not first:
            return
        try:
            owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        except KafkaException:
            return
        staying = owned - (leaving or set())
        self._seek([TopicPartition(t, p, o) for (t, p), o in first.items() if (t, p) in staying])

    # ------------------------------------------------------------------------------------------------ waiting

    def _wait(self, seconds: float) -> None:
        """Wait ``seconds`` while polling the consumer (group membership, callbacks); _Abandoned if it must stop."""
        end = time.monotonic() + seconds
        while True:
            self._check()
            remaining = end - time.monotonic()
            if remaining <= 0:
                return
            self._poll_idle(min(_IDLE_POLL, remaining))

    def _poll_idle(self, seconds: float) -> None:
        self.health.beat()
        if self._consumer is None:
            self._sleep(seconds)
            return
        messages = self._consumer.consume(num_messages=self.cfg.consume_chunk, timeout=seconds)
        if messages:
            self._ingest(messages)  # while busy this rewinds them

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self._stop.is_set() and (remaining := end - time.monotonic()) > 0:
            self.health.beat()
            self._stop.wait(min(_IDLE_POLL, remaining))

    # ------------------------------------------------------------------------------------------------ state

    def _nothing_pending(self, inserted: bool) -> None:
        self.metrics.pending_rows.set(0)
        self.metrics.pending_messages.set(0)
        self.health.pending_messages = 0
        self.health.pending_since = None
        if inserted:
            self.health.last_insert_at = time.monotonic()

    def _storage_down(self, exc: StorageError, what: str) -> None:
        again = not self.health.storage_up and self.health.last_error != ""
        self.health.storage_up = False
        self.health.last_error = str(exc)
        self.metrics.storage_up.set(0)
        self.metrics.retries.labels("clickhouse").inc()
        log.warning(
            f"{what}; retrying with backoff" + (" (still failing)" if again else ""),
            extra=fields(
                url=self._url, code=exc.code, name=exc.name, error=str(exc), pending_messages=self._batch.messages
            ),
        )
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
        self.health.last_insert_at = time.monotonic()  # called after every successful insert, and at start
        if not self.health.storage_up:
            if self.health.last_error:
                log.info("ClickHouse accepts writes again", extra=fields(url=self._url))
            self.health.storage_up = True
            self.health.last_error = ""
            self.metrics.storage_up.set(1)

    def _kafka_up(self) -> None:
        self.health.kafka_up = True
        self.metrics.kafka_up.set(1)

    def _on_kafka_error(self, err: KafkaError) -> None:
        code = err.code()
        if code == KafkaError._ALL_BROKERS_DOWN:
            self.health.kafka_up = False
            self.metrics.kafka_up.set(0)
        now = time.monotonic()
        if now - self._kafka_error_logged.get(code, -1e9) < 30.0 and not err.fatal():
            return  # once per 30 s per kind: librdkafka repeats itself while a broker is away
        self._kafka_error_logged[code] = now
        log.warning(
            "Kafka: " + ("fatal error" if err.fatal() else "librdkafka retries by itself"),
            extra=fields(bootstrap=self.settings.kafka.bootstrap_servers, code=err.name(), error=err.str()),
        )
        if err.fatal():
            self.health.last_error = err.str()
            self.stop()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # eager (classic) rebalances hand over the whole assignment, incremental ones (KIP-848) only what is added
        self._set_assigned(self._owned(consumer) | {(tp.topic, tp.partition) for tp in partitions})
        self.health.phase = "consuming"
        log.info("partitions assigned", extra=fields(partitions=sorted(tp.partition for tp in partitions)))

    @staticmethod
    def _owned(consumer: Consumer | None) -> set[tuple[str, int]]:
        try:
            return {(tp.topic, tp.partition) for tp in consumer.assignment()} if consumer is not None else set()
        except (KafkaException, RuntimeError):
            return set()

    def _set_assigned(self, owned: set[tuple[str, int]]) -> None:
        self.health.assigned = len(owned)
        self.metrics.assigned.set(len(owned))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("partitions revoked", extra=fields(partitions=sorted(tp.partition for tp in partitions)))
        self._partitions_gone(partitions, lost=False)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning(
            "partitions lost (the group session timed out)",
            extra=fields(partitions=sorted(tp.partition for tp in partitions)),
        )
        self._partitions_gone(partitions, lost=True)

    def _partitions_gone(self, partitions: list[TopicPartition], lost: bool) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._offsets.forget(gone)
        self._pauses.forget(gone)
        self._set_assigned(self._owned(self._consumer) - gone)  # incremental revokes (KIP-848) keep the rest
        if not self._offsets.touches(gone, self._batch):
            return
        if self._busy:  # a flush or commit is waiting in a poll: it gives up when the poll returns
            self._lost = True
        elif lost or not self._finish_in_callback():
            self._abandon("partitions revoked or lost before the offsets were committed", leaving=gone)

    def _finish_in_callback(self) -> bool:
        """Insert and commit everything while the partitions are still ours (inside the rebalance callback, where
        the consumer cannot be polled: one attempt, no waiting)."""
        consumer, writer, batch = self._consumer, self._writer, self._batch
        if consumer is None or writer is None:
            return False
        try:
            if not batch.empty:
                writer.write_once(batch)
                if (
                    self._dlq is not None
                    and self._dlq.pending
                    and not self._dlq.settle(lambda: True, lambda s: None, lambda: 0.0)
                ):
                    return False
                self._batch = PendingBatch()
                self._offsets.inserted(batch)
                if self.hooks.inserted:
                    _call_hooks("inserted", self.hooks.inserted, batch.applications())
            offsets = self._offsets.to_commit()
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=False)
                self._committed_now(offsets)
        except (StorageError, KafkaException) as exc:
            log.warning("cannot finish the batch before the rebalance", extra=fields(error=str(exc)))
            return False
        return True

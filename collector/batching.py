"""The collector's batching: consumed messages decoded into the pending batch (their rejects dead-lettered), and
the batch inserted into ClickHouse (``writer.py``) with its dead letters settled, which makes its offsets
committable."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from confluent_kafka import KafkaError, Message

from sparktap.collector.arrowpath import as_list
from sparktap.collector.batch import Origin, PendingBatch, scan_messages
from sparktap.collector.core import Abandoned, BatchReport, CollectorCore, call_hooks
from sparktap.collector.decode import RejectKind
from sparktap.collector.kafka.client import consume_queued, reread_config
from sparktap.collector.kafka.dlq import DeadLetter
from sparktap.collector.kafka.reread import reread
from sparktap.collector.logfmt import fields
from sparktap.collector.writer import BatchWriter, StreamFailed

log = logging.getLogger("sparktap.collector")


class Batching(CollectorCore):
    """Consume -> decode -> pending batch -> insert."""

    # declared in CollectorCore; repeated for mypy, which sees sparktap.* imports as Any
    _batch: PendingBatch
    _message_size: float
    _unconfirmed: list[tuple[set[tuple[str, str]], BatchReport | None]]
    _stream_off: dict[tuple[str, int], int]

    def _ingest(self, messages: Sequence[Message]) -> None:
        """Decode a consumed chunk into the pending batch (its messages are released after: the batch keeps only
        their columns and positions)."""
        try:
            self._ingest_chunk(messages)
        finally:
            release = getattr(messages, "release", None)  # a MessageChunk (collector/kafka/librdkafka.py)
            if release is not None:
                release()

    def _ingest_chunk(self, messages: Sequence[Message]) -> None:
        budget = self.cfg.batch_bytes
        # while busy every message is rewound (a fresh assignment): no budget then
        room = budget - self._batch.bytes if budget > 0 and not self._busy else -1
        where: list[bytes] = []
        good, rest, errors, values, size, offsets = scan_messages(messages, max(room, 0) if room >= 0 else -1, where)
        for msg in errors:
            err = msg.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                self._on_kafka_error(err)
        if not good:
            return
        self.state.kafka_up()
        if self._busy:  # fetched while a flush or commit waits (a fresh assignment): read again later
            self._rewind(good)
            return
        if rest:  # past the byte budget: read again after the flush this makes due (paused until it is in)
            self._rewind(rest)
            self._batch.full = True
        decoder = self._decoder
        assert decoder is not None  # noqa: S101 - set by _open_storage
        decoded = decoder.decode(values)
        self._message_size = max(size / len(good), (self._message_size + size / len(good)) / 2)
        self.metrics.consumed.inc(len(good))
        self.metrics.consumed_bytes.inc(size)
        if decoded.validated:
            self.metrics.validated.inc(decoded.validated)
        if decoded.rejects:
            self._dead_letters([(good[r.index], r.kind, r.reason) for r in decoded.rejects])
        self._batch.add(good, decoded, offsets, where)
        self.state.pending(self._batch.messages, self._batch.rows)
        health = decoded.tables.get("listener_health")
        if health is not None:
            self.metrics.observe_listener_health(health.columns)

    def _dead_letters(self, items: list[tuple[Message | Origin, RejectKind, str]]) -> None:
        """Send dead letters: of consumed messages, or of rows ClickHouse refused (their messages read back from
        Kafka first: the batch keeps only where they are)."""
        dlq = self._dlq
        assert dlq is not None  # noqa: S101 - set by _start_kafka
        origins = [source for source, _, _ in items if isinstance(source, Origin)]
        read = self._read_back(origins) if origins else {}
        for source, kind, reason in items:
            if isinstance(source, Origin):
                msg = read.get(source)
                dlq.send(DeadLetter.of(msg, kind, reason) if msg is not None else DeadLetter.gone(source, kind, reason))
            else:
                dlq.send(DeadLetter.of(source, kind, reason))
            self.metrics.dead_letters.labels(kind).inc()
        first, kind, reason = items[0]  # a Message or an Origin: both tell where they are
        log.warning(
            "dead-lettered messages",
            extra=fields(
                count=len(items),
                dlq=dlq.topic,
                topic=first.topic(),
                partition=first.partition(),
                offset=first.offset(),
                kind=kind,
                reason=reason,
            ),
        )

    def _read_back(self, origins: list[Origin]) -> dict[Origin, Message | None]:
        """The messages of refused rows, read back from Kafka by offset; while Kafka is away this keeps trying
        (with backoff, polling the group's consumer; ``Abandoned`` gives the batch up, uncommitted)."""
        backoff = self._backoff()
        patience = min(10.0, max(2.0, 2 * self.cfg.retry_backoff_max_seconds))

        def waiting(why: str) -> float:
            self.metrics.retries.labels("kafka").inc()
            log.warning(
                "cannot read refused rows back from Kafka for the dead-letter topic; retrying",
                extra=fields(count=len(origins), topic=origins[0].topic(), error=why),
            )
            return backoff.next()

        started = time.monotonic()
        read = reread(
            reread_config(self.settings, self._on_kafka_error),
            origins,
            wait=self._wait,
            waiting=waiting,
            attempt_seconds=patience,
        )
        log.info(
            "refused rows read back from Kafka",
            extra=fields(count=len(origins), seconds=round(time.monotonic() - started, 3)),
        )
        return read

    def _chunk_size(self) -> int:
        """Messages to take from librdkafka in one call: ``consume_chunk``, no more than the rows the batch has room
        for (``batch_rows``: a batch is never consumed past its size), and fewer when the messages seen lately are
        large enough to fill the rest of the byte budget with fewer (each call copies its messages into Python)."""
        chunk = max(1, min(self.cfg.consume_chunk, self.cfg.batch_rows - self._batch.rows))
        budget = self.cfg.batch_bytes
        if budget <= 0:
            return chunk
        room = max(budget - self._batch.bytes, 0)
        return max(1, min(chunk, int(room // max(self._message_size, 1.0))))

    def _poll_idle(self, seconds: float) -> None:
        self.health.beat()
        if self._consumer is None:
            self._sleep(seconds)
            return
        # while busy every message fetched is rewound: take one (the poll is for the group's callbacks)
        messages = consume_queued(self._consumer, 1 if self._busy else self._chunk_size(), seconds)
        if messages:
            self._ingest(messages)  # while busy this rewinds them

    def _flush(self) -> None:
        """Insert the pending batch and settle its dead letters; its offsets become committable (once the open
        INSERT stream is confirmed, when the batch went into one)."""
        batch: PendingBatch = self._batch
        if batch.empty:
            return
        writer = self._writer
        assert writer is not None  # noqa: S101 - set by _open_storage
        started = time.monotonic()
        backlog = batch.due_by_size(self.cfg.batch_rows, self.cfg.batch_bytes)
        try:
            writer.write(batch, self._wait, stream=backlog and self._may_stream())
        except StreamFailed as exc:
            self._stream_failed(exc, batch)
        self._settle_dead_letters()
        self._batch = PendingBatch()
        streamed = writer.streaming
        self._offsets.inserted(batch, streamed=streamed)
        self.state.nothing_pending(inserted=True)
        seconds = time.monotonic() - started
        self._batches += 1
        self.metrics.batches.inc()
        self.metrics.batch_seconds.observe(seconds)
        self.metrics.batch_rows.observe(batch.rows)
        self._pauses.resume(self._consumer)
        self._written(batch, seconds, writer.inserted_at)
        if not streamed:
            self._confirmed()
        elif not backlog or self._stream_due(writer):
            self._finish_stream()
        log.debug("batch inserted", extra=fields(messages=batch.messages, rows=batch.rows, seconds=round(seconds, 4)))

    def _may_stream(self) -> bool:
        """Whether a batch may open an INSERT stream: on, and not while the messages of a failed one are read
        again (``_stream_off``: until their offsets are committed)."""
        return self.cfg.stream_rows > 0 and not self._stream_off

    def _stream_due(self, writer: BatchWriter) -> bool:
        stream = writer.stream
        return stream is not None and (
            stream.rows >= self.cfg.stream_rows or stream.age >= self.cfg.stream_seconds or self._stop.is_set()
        )

    def _finish_stream(self) -> None:
        """End the open INSERT stream and wait for ClickHouse's confirmation: its batches' offsets become
        committable."""
        writer = self._writer
        if writer is None or not writer.streaming:
            return
        try:
            writer.finish_stream()
        except StreamFailed as exc:
            self._stream_failed(exc, PendingBatch())

    def _stream_confirmed(self) -> None:
        """The writer's open stream is in ClickHouse (``BatchWriter``'s callback)."""
        self._offsets.stream_confirmed()
        self._confirmed(self._writer.stream_inserted_at if self._writer is not None else {})

    def _written(self, batch: PendingBatch, seconds: float, inserted_at: dict[str, float]) -> None:
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
        self._unconfirmed.append((apps, report))

    def _confirmed(self, stream_inserted_at: dict[str, float] | None = None) -> None:
        """The batches written since the last confirmation are in ClickHouse: tell the hooks and ``on_batch``
        (``stream_inserted_at``: when the stream holding some of their tables was confirmed)."""
        done, self._unconfirmed = self._unconfirmed, []
        for apps, report in done:
            if self.hooks.inserted:
                call_hooks("inserted", self.hooks.inserted, apps)
            if report is not None and self.on_batch is not None:
                report.inserted_at.update(stream_inserted_at or {})
                self.on_batch(report)

    def _stream_failed(self, exc: StreamFailed, batch: PendingBatch) -> None:
        """An open INSERT failed: give up everything not committed (its rows are no longer held) and read it again,
        inserting batch by batch (no stream) until those offsets are committed."""
        self._streams_off(batch)
        log.warning(
            "an INSERT kept open over several batches failed: its messages are read again and inserted batch by batch",
            extra=fields(error=str(exc)),
        )
        raise Abandoned(f"the open INSERT failed: {exc}")

    def _settle_dead_letters(self) -> None:
        dlq = self._dlq
        if dlq is None or dlq.pending == 0:
            return
        backoff = self._backoff()
        if not dlq.settle(lambda: self._lost or self._stop_deadline_passed(), self._poll_idle, backoff.next):
            self._check()

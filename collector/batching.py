"""The collector's batcher: consumed messages decoded into the pending batch (their rejects dead-lettered), the
flush decision's inputs (how much to take per poll, whether an open INSERT stream is due), and the batch inserted
into ClickHouse (``writer.py``) with its dead letters settled, which makes its offsets committable (``Committer``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException, Message

from sparktap.collector.batch import Origin, PendingBatch, scan_messages
from sparktap.collector.core import IDLE_POLL, Abandoned, Shared
from sparktap.collector.decode import RejectKind
from sparktap.collector.kafka.client import consume_queued, reread_config
from sparktap.collector.kafka.dlq import DeadLetter
from sparktap.collector.kafka.reread import reread
from sparktap.collector.logfmt import fields
from sparktap.collector.rebalance import Committer
from sparktap.collector.writer import BatchWriter, StreamFailed
from sparktap.store import StorageError

log = logging.getLogger("sparktap.collector")

_FIRST_MESSAGE_SIZE = 64 << 10  # until a chunk was seen: a 32 MiB budget takes 512 messages in the first call


class Batcher:
    """Consume -> decode -> pending batch -> insert. The loop asks it how much to poll for (``chunk_size``) and
    whether a stream is due; the committer is told what is in ClickHouse."""

    def __init__(self, shared: Shared, committer: Committer) -> None:
        self.settings, self.cfg = shared.settings, shared.settings.collector
        self.control, self.links, self.pending = shared.control, shared.links, shared.pending
        self.metrics, self.state = shared.metrics, shared.state
        self.committer = committer
        self.message_size = float(_FIRST_MESSAGE_SIZE)
        """recent consumed message size, bytes (sizes consume calls against the byte budget)"""
        self.batches = 0

    def ingest(self, messages: Sequence[Message]) -> None:
        """Decode a consumed chunk into the pending batch (its messages are released after: the batch keeps only
        their columns and positions)."""
        try:
            self._ingest_chunk(messages)
        finally:
            release = getattr(messages, "release", None)  # a MessageChunk (collector/kafka/librdkafka.py)
            if release is not None:
                release()

    def _ingest_chunk(self, messages: Sequence[Message]) -> None:
        batch = self.pending.batch
        busy = self.control.busy
        budget = self.cfg.batch_bytes
        # while busy every message is rewound (a fresh assignment): no budget then
        room = budget - batch.bytes if budget > 0 and not busy else -1
        where: list[bytes] = []
        good, rest, errors, values, size, offsets = scan_messages(messages, max(room, 0) if room >= 0 else -1, where)
        for msg in errors:
            err = msg.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                self.control.on_kafka_error(err)
        if not good:
            return
        self.state.kafka_up()
        if busy:  # fetched while a flush or commit waits (a fresh assignment): read again later
            self.links.rewind(good)
            return
        if rest:  # past the byte budget: read again after the flush this makes due (paused until it is in)
            self.links.rewind(rest)
            batch.full = True
        decoder = self.links.decoder
        assert decoder is not None  # noqa: S101 - set once the storage is open
        decoded = decoder.decode(values)
        self.message_size = max(size / len(good), (self.message_size + size / len(good)) / 2)
        self.metrics.consumed.inc(len(good))
        self.metrics.consumed_bytes.inc(size)
        if decoded.validated:
            self.metrics.validated.inc(decoded.validated)
        if decoded.rejects:
            self.dead_letters([(good[r.index], r.kind, r.reason) for r in decoded.rejects])
        batch.add(good, decoded, offsets, where)
        self.state.pending(batch.messages, batch.rows)
        health = decoded.tables.get("listener_health")
        if health is not None:
            self.metrics.observe_listener_health(health.columns)

    def dead_letters(self, items: Sequence[tuple[Message | Origin, RejectKind, str]]) -> None:
        """Send dead letters: of consumed messages, or of rows ClickHouse refused (their messages read back from
        Kafka first: the batch keeps only where they are)."""
        dlq = self.links.dlq
        assert dlq is not None  # noqa: S101 - set once subscribed
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
        backoff = self.control.backoff()
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
            reread_config(self.settings, self.control.on_kafka_error),
            origins,
            wait=self.wait,
            waiting=waiting,
            attempt_seconds=patience,
        )
        log.info(
            "refused rows read back from Kafka",
            extra=fields(count=len(origins), seconds=round(time.monotonic() - started, 3)),
        )
        return read

    def chunk_size(self) -> int:
        """Messages to take from librdkafka in one call: ``consume_chunk``, no more than the rows the batch has room
        for (``batch_rows``: a batch is never consumed past its size), and fewer when the messages seen lately are
        large enough to fill the rest of the byte budget with fewer (each call copies its messages into Python)."""
        batch = self.pending.batch
        chunk = max(1, min(self.cfg.consume_chunk, self.cfg.batch_rows - batch.rows))
        budget = self.cfg.batch_bytes
        if budget <= 0:
            return chunk
        room = max(budget - batch.bytes, 0)
        return max(1, min(chunk, int(room // max(self.message_size, 1.0))))

    def wait(self, seconds: float) -> None:
        """Wait ``seconds`` while polling the consumer (group membership, callbacks); Abandoned if it must stop."""
        end = time.monotonic() + seconds
        while True:
            self.control.check()
            remaining = end - time.monotonic()
            if remaining <= 0:
                return
            self.poll_idle(min(IDLE_POLL, remaining))

    def poll_idle(self, seconds: float) -> None:
        """Poll the consumer for ``seconds``: what it fetches while busy is rewound."""
        self.control.health.beat()
        consumer = self.links.consumer
        if consumer is None:
            self.control.sleep(seconds)
            return
        # while busy every message fetched is rewound: take one (the poll is for the group's callbacks)
        messages = consume_queued(consumer, 1 if self.control.busy else self.chunk_size(), seconds)
        if messages:
            self.ingest(messages)  # while busy this rewinds them

    def flush(self) -> None:
        """Insert the pending batch and settle its dead letters; its offsets become committable (once the open
        INSERT stream is confirmed, when the batch went into one)."""
        batch: PendingBatch = self.pending.batch
        if batch.empty:
            return
        writer = self.links.writer
        assert writer is not None  # noqa: S101 - set once the storage is open
        started = time.monotonic()
        backlog = batch.due_by_size(self.cfg.batch_rows, self.cfg.batch_bytes)
        try:
            writer.write(batch, self.wait, stream=backlog and self.committer.may_stream())
        except StreamFailed as exc:
            self._stream_failed(exc, batch)
        self._settle_dead_letters()
        self.pending.batch = PendingBatch()
        streamed = writer.streaming
        self.committer.inserted(batch, streamed=streamed)
        self.state.nothing_pending(inserted=True)
        seconds = time.monotonic() - started
        self.batches += 1
        self.metrics.batches.inc()
        self.metrics.batch_seconds.observe(seconds)
        self.metrics.batch_rows.observe(batch.rows)
        self.links.pauses.resume(self.links.consumer)
        self.pending.written(batch, seconds, writer.inserted_at)
        if not streamed:
            self.pending.confirmed()
        elif not backlog or self.stream_due(writer):
            self.finish_stream()
        log.debug("batch inserted", extra=fields(messages=batch.messages, rows=batch.rows, seconds=round(seconds, 4)))

    def stream_due(self, writer: BatchWriter) -> bool:
        """Whether the open INSERT stream is to end now (its rows, its age, or a stop)."""
        stream = writer.stream
        return stream is not None and (
            stream.rows >= self.cfg.stream_rows
            or stream.age >= self.cfg.stream_seconds
            or self.control.stopped.is_set()
        )

    def finish_stream(self) -> None:
        """End the open INSERT stream and wait for ClickHouse's confirmation: its batches' offsets become
        committable."""
        writer = self.links.writer
        if writer is None or not writer.streaming:
            return
        try:
            writer.finish_stream()
        except StreamFailed as exc:
            self._stream_failed(exc, PendingBatch())

    def stream_confirmed(self) -> None:
        """The writer's open stream is in ClickHouse (``BatchWriter``'s callback)."""
        self.committer.stream_confirmed()
        writer = self.links.writer
        self.pending.confirmed(writer.stream_inserted_at if writer is not None else {})

    def _stream_failed(self, exc: StreamFailed, batch: PendingBatch) -> None:
        """An open INSERT failed: give up everything not committed (its rows are no longer held) and read it again,
        inserting batch by batch (no stream) until those offsets are committed."""
        self.committer.streams_off(batch)
        log.warning(
            "an INSERT kept open over several batches failed: its messages are read again and inserted batch by batch",
            extra=fields(error=str(exc)),
        )
        raise Abandoned(f"the open INSERT failed: {exc}")

    def _settle_dead_letters(self) -> None:
        dlq = self.links.dlq
        if dlq is None or dlq.pending == 0:
            return
        backoff = self.control.backoff()
        control = self.control
        if not dlq.settle(lambda: control.lost or control.deadline_passed(), self.poll_idle, backoff.next):
            control.check()

    def storage_down(self, exc: StorageError, what: str) -> None:
        """ClickHouse is away (``BatchWriter``'s callback): consumption pauses until the batch is in."""
        batch = self.pending.batch
        self.state.storage_down(exc, what, batch.messages)
        links = self.links
        if links.consumer is not None and not links.pauses:
            try:
                assignment = links.consumer.assignment()
            except KafkaException:
                assignment = []
            if assignment:
                links.pauses.pause(links.consumer, assignment)
                log.warning(
                    "consumption paused until ClickHouse accepts the batch",
                    extra=fields(partitions=len(assignment), pending_rows=batch.rows),
                )

    def storage_up(self) -> None:
        self.state.storage_up()

"""The collector's committer: offsets committed once their rows are in ClickHouse; partitions assigned, revoked or
lost; uncommitted work finished inside a rebalance callback while the partitions are still ours, or given up (its
messages are read again; rows inserted already are deduplicated)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from sparktap.collector.batch import PendingBatch
from sparktap.collector.core import Abandoned, Shared
from sparktap.collector.kafka.client import GroupConsumer
from sparktap.collector.kafka.offsets import OffsetBook
from sparktap.collector.logfmt import fields
from sparktap.collector.writer import StreamFailed
from sparktap.store import StorageError

log = logging.getLogger("sparktap.collector")

_GONE = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError._ASSIGNMENT_LOST,
    }
)


class Committer:
    """Commit, give up, and follow the group's assignment. The batcher tells it what is in ClickHouse
    (``inserted``, ``stream_confirmed``) and asks whether a batch may open an INSERT stream (``may_stream``)."""

    def __init__(self, shared: Shared) -> None:
        self.settings, self.cfg = shared.settings, shared.settings.collector
        self.control, self.links, self.pending = shared.control, shared.links, shared.pending
        self.metrics, self.state, self.health = shared.metrics, shared.state, shared.control.health
        self.offsets = OffsetBook(self.metrics)
        self.stream_off: dict[tuple[str, int], int] = {}
        """after a failed INSERT stream: per partition, the offset until which batches are inserted one by one"""

    def __bool__(self) -> bool:
        """Whether any offset is uncommitted."""
        return bool(self.offsets)

    def due(self) -> bool:
        return self.offsets.due(self.cfg.commit_interval_seconds)

    def update_lag(self, consumer: GroupConsumer) -> None:
        self.offsets.update_lag(consumer)

    def inserted(self, batch: PendingBatch, streamed: bool = False) -> None:
        """``batch`` is written (into an open INSERT stream when ``streamed``: committable once it is confirmed)."""
        self.offsets.inserted(batch, streamed=streamed)

    def stream_confirmed(self) -> None:
        self.offsets.stream_confirmed()

    def may_stream(self) -> bool:
        """Whether a batch may open an INSERT stream: on, and not while the messages of a failed one are read
        again (``stream_off``: until their offsets are committed)."""
        return self.cfg.stream_rows > 0 and not self.stream_off

    def streams_off(self, batch: PendingBatch) -> None:
        """An INSERT stream failed: no stream opens until the offsets of what it held and of ``batch`` (the batch
        being written) are committed (``stream_off``), so their messages, read again, go in batch by batch."""
        ends = self.offsets.streamed_ends()
        for key, (_, last) in batch.offsets.items():
            ends[key] = max(ends.get(key, 0), last + 1)
        for key, end in ends.items():
            self.stream_off[key] = max(self.stream_off.get(key, 0), end)

    def commit(self, wait: Callable[[float], None]) -> None:
        """Commit the next offset of every partition whose rows are in ClickHouse, retrying until it works
        (``wait`` polls the consumer between attempts)."""
        offsets = self.offsets.to_commit()
        if not offsets:  # nothing, or only batches an open INSERT stream holds
            return
        consumer = self.links.consumer
        assert consumer is not None  # noqa: S101
        backoff = self.control.backoff()
        while True:
            self.control.check()
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                break
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                self.metrics.commit_failures.labels(err.name()).inc()
                if err.code() in _GONE:
                    raise Abandoned(f"commit refused: {err.name()}: the partitions moved to another member") from exc
                self.metrics.retries.labels("kafka").inc()
                log.warning(
                    "cannot commit offsets to Kafka; retrying",
                    extra=fields(bootstrap=self.settings.kafka.bootstrap_servers, error=err.str(), code=err.name()),
                )
                wait(backoff.next())
        self._committed_now(offsets)

    def _committed_now(self, offsets: list[TopicPartition]) -> None:
        self.offsets.committed_now(offsets)
        for tp in offsets:  # the messages of a failed INSERT stream are in: streams may open again
            key = (tp.topic, tp.partition)
            if key in self.stream_off and tp.offset >= self.stream_off[key]:
                del self.stream_off[key]
        self.health.last_commit_at = self.offsets.last_commit_at
        self.state.kafka_up()

    def abandon(self, why: str, leaving: set[tuple[str, int]] | None = None) -> None:
        """Give up the pending batch and the uncommitted offsets: their messages are read again (rows inserted
        already are deduplicated). Partitions still ours (not ``leaving``) are rewound to their first uncommitted
        offset; the others are re-read from the last commit by whoever gets them."""
        batch = self.pending.drop()
        links = self.links
        if links.writer is not None:
            links.writer.cancel_stream()
        first, messages = self.offsets.drop(batch)
        self.metrics.abandoned.inc(messages)
        self.state.nothing_pending(inserted=False)
        if messages:
            log.warning(
                "offsets not committed: these messages will be delivered again (rows are deduplicated)",
                extra=fields(messages=messages, why=why),
            )
        consumer = links.consumer
        if consumer is None or self.control.stopped.is_set() or not first:
            return
        try:
            owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        except KafkaException:
            return
        staying = owned - (leaving or set())
        links.seek([TopicPartition(t, p, o) for (t, p), o in first.items() if (t, p) in staying])
        # partitions paused for this batch (a chunk cut at the byte budget, or fetched while it was being written)
        # were waiting for its insert, which will not come: they are read again from where they were rewound
        links.pauses.resume(consumer)

    def on_assign(self, consumer: GroupConsumer, partitions: list[TopicPartition]) -> None:
        # eager (classic) rebalances hand over the whole assignment, incremental ones (KIP-848) only what is added
        self.state.assigned(len(self._owned(consumer) | {(tp.topic, tp.partition) for tp in partitions}))
        self.health.phase = "consuming"
        log.info("partitions assigned", extra=fields(partitions=sorted(tp.partition for tp in partitions)))

    @staticmethod
    def _owned(consumer: GroupConsumer | None) -> set[tuple[str, int]]:
        try:
            return {(tp.topic, tp.partition) for tp in consumer.assignment()} if consumer is not None else set()
        except (KafkaException, RuntimeError):
            return set()

    def on_revoke(self, consumer: GroupConsumer, partitions: list[TopicPartition]) -> None:
        log.info("partitions revoked", extra=fields(partitions=sorted(tp.partition for tp in partitions)))
        self._partitions_gone(partitions, lost=False)

    def on_lost(self, consumer: GroupConsumer, partitions: list[TopicPartition]) -> None:
        log.warning(
            "partitions lost (the group session timed out)",
            extra=fields(partitions=sorted(tp.partition for tp in partitions)),
        )
        self._partitions_gone(partitions, lost=True)

    def _partitions_gone(self, partitions: list[TopicPartition], lost: bool) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.offsets.forget(gone)
        self.links.pauses.forget(gone)
        for key in gone & set(self.stream_off):
            del self.stream_off[key]
        self.state.assigned(len(self._owned(self.links.consumer) - gone))  # incremental revokes (KIP-848) keep the rest
        if not self.offsets.touches(gone, self.pending.batch):
            return
        if self.control.busy:  # a flush or commit is waiting in a poll: it gives up when the poll returns
            self.control.lost = True
        elif lost or not self._finish_in_callback():
            self.abandon("partitions revoked or lost before the offsets were committed", leaving=gone)

    def _finish_in_callback(self) -> bool:
        """Insert and commit everything while the partitions are still ours (inside the rebalance callback, where
        the consumer cannot be polled: one attempt, no waiting)."""
        consumer, writer, dlq, batch = self.links.consumer, self.links.writer, self.links.dlq, self.pending.batch
        if consumer is None or writer is None:
            return False
        try:
            if not batch.empty:
                writer.write_once(batch)
                if dlq is not None and dlq.pending and not dlq.settle(lambda: True, lambda s: None, lambda: 0.0):
                    return False
            try:
                writer.finish_stream()
            except StreamFailed:
                self.streams_off(batch)
                raise
            if not batch.empty:
                self.pending.batch = PendingBatch()
                self.offsets.inserted(batch)
                self.pending.written(batch, 0.0, writer.inserted_at)
                self.pending.confirmed()
            offsets = self.offsets.to_commit()
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=False)
                self._committed_now(offsets)
        except (StorageError, StreamFailed, KafkaException) as exc:
            log.warning("cannot finish the batch before the rebalance", extra=fields(error=str(exc)))
            return False
        return True

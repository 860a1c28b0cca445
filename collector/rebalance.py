"""The collector's commits and rebalances: offsets committed once their rows are in ClickHouse; partitions
assigned, revoked or lost; uncommitted work finished inside a rebalance callback while the partitions are still
ours, or given up (its messages are read again; rows inserted already are deduplicated)."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from sparktap.collector.batch import PendingBatch
from sparktap.collector.core import Abandoned, BatchReport, CollectorCore
from sparktap.collector.kafka.client import GroupConsumer
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


class Rebalancing(CollectorCore):
    """Commit, give up, and follow the group's assignment."""

    _batch: PendingBatch  # declared in CollectorCore; repeated for mypy, which sees sparktap.* imports as Any
    _unconfirmed: list[tuple[set[tuple[str, str]], BatchReport | None]]
    _stream_off: dict[tuple[str, int], int]

    def _commit(self) -> None:
        """Commit the next offset of every partition whose rows are in ClickHouse, retrying until it works."""
        offsets = self._offsets.to_commit()
        if not offsets:  # nothing, or only batches an open INSERT stream holds
            return
        consumer = self._consumer
        assert consumer is not None  # noqa: S101
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
                    raise Abandoned(f"commit refused: {err.name()}: the partitions moved to another member") from exc
                self.metrics.retries.labels("kafka").inc()
                log.warning(
                    "cannot commit offsets to Kafka; retrying",
                    extra=fields(bootstrap=self.settings.kafka.bootstrap_servers, error=err.str(), code=err.name()),
                )
                self._wait(backoff.next())
        self._committed_now(offsets)

    def _committed_now(self, offsets: list[TopicPartition]) -> None:
        self._offsets.committed_now(offsets)
        for tp in offsets:  # the messages of a failed INSERT stream are in: streams may open again
            key = (tp.topic, tp.partition)
            if key in self._stream_off and tp.offset >= self._stream_off[key]:
                del self._stream_off[key]
        self.health.last_commit_at = self._offsets.last_commit_at
        self.state.kafka_up()

    def _abandon(self, why: str, leaving: set[tuple[str, int]] | None = None) -> None:
        """Give up the pending batch and the uncommitted offsets: their messages are read again (rows inserted
        already are deduplicated). Partitions still ours (not ``leaving``) are rewound to their first uncommitted
        offset; the others are re-read from the last commit by whoever gets them."""
        batch: PendingBatch = self._batch
        self._batch = PendingBatch()
        self._unconfirmed = []
        if self._writer is not None:
            self._writer.cancel_stream()
        first, messages = self._offsets.drop(batch)
        self.metrics.abandoned.inc(messages)
        self.state.nothing_pending(inserted=False)
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
        # partitions paused for this batch (a chunk cut at the byte budget, or fetched while it was being written)
        # were waiting for its insert, which will not come: they are read again from where they were rewound
        self._pauses.resume(consumer)

    def _on_assign(self, consumer: GroupConsumer, partitions: list[TopicPartition]) -> None:
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

    def _on_revoke(self, consumer: GroupConsumer, partitions: list[TopicPartition]) -> None:
        log.info("partitions revoked", extra=fields(partitions=sorted(tp.partition for tp in partitions)))
        self._partitions_gone(partitions, lost=False)

    def _on_lost(self, consumer: GroupConsumer, partitions: list[TopicPartition]) -> None:
        log.warning(
            "partitions lost (the group session timed out)",
            extra=fields(partitions=sorted(tp.partition for tp in partitions)),
        )
        self._partitions_gone(partitions, lost=True)

    def _partitions_gone(self, partitions: list[TopicPartition], lost: bool) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._offsets.forget(gone)
        self._pauses.forget(gone)
        for key in gone & set(self._stream_off):
            del self._stream_off[key]
        self.state.assigned(len(self._owned(self._consumer) - gone))  # incremental revokes (KIP-848) keep the rest
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
            try:
                writer.finish_stream()
            except StreamFailed:
                self._streams_off(batch)
                raise
            if not batch.empty:
                self._batch = PendingBatch()
                self._offsets.inserted(batch)
                self._written(batch, 0.0, writer.inserted_at)
                self._confirmed()
            offsets = self._offsets.to_commit()
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=False)
                self._committed_now(offsets)
        except (StorageError, StreamFailed, KafkaException) as exc:
            log.warning("cannot finish the batch before the rebalance", extra=fields(error=str(exc)))
            return False
        return True

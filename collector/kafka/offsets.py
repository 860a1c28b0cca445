"""Offset bookkeeping: what is in ClickHouse but not committed yet, what was committed, and the lag.

Offsets are Kafka's "next offset to read". A batch's offsets become committable once every row of it is in
ClickHouse and every dead letter of it is acknowledged; they are committed after every batch or every
``commit_interval_seconds``. A batch written while an INSERT stream is open (``writer.py``) is *streamed*: its
offsets wait for that stream's confirmation, and so do those of every batch after it until then. Anything not
committed is read again after a crash or a rebalance — harmless, because rows are deduplicated on (app_id,
app_attempt, seq).
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaException, TopicPartition

from sparktap.collector.batch import PendingBatch
from sparktap.collector.kafka.client import GroupConsumer
from sparktap.collector.metrics import CollectorMetrics

Key = tuple[str, int]


class OffsetBook:
    """Per partition: the first and next offset inserted since the last commit, and the last committed offset."""

    def __init__(self, metrics: CollectorMetrics) -> None:
        self.metrics = metrics
        self.uncommitted: dict[Key, tuple[int, int]] = {}
        self.messages = 0
        self.streamed: dict[Key, tuple[int, int]] = {}
        """offsets of batches in the open INSERT stream: committable once ClickHouse confirms it"""
        self.streamed_messages = 0
        self.committed: dict[Key, int] = {}
        self.last_commit_at = time.monotonic()
        self._lag_labels: set[Key] = set()

    def __bool__(self) -> bool:
        return bool(self.uncommitted or self.streamed)

    def inserted(self, batch: PendingBatch, *, streamed: bool = False) -> None:
        """The batch is in ClickHouse: its offsets may be committed (``streamed``: once the open INSERT stream is
        confirmed, ``stream_confirmed``)."""
        book = self.streamed if streamed else self.uncommitted
        for key, (first, last) in batch.offsets.items():
            seen = book.get(key)
            book[key] = (first if seen is None else seen[0], last + 1)
        if streamed:
            self.streamed_messages += batch.messages
        else:
            self.messages += batch.messages
            self.metrics.uncommitted.set(self.messages)

    def stream_confirmed(self) -> None:
        """The open INSERT stream is in ClickHouse: the offsets of its batches may be committed."""
        for key, (first, nxt) in self.streamed.items():
            seen = self.uncommitted.get(key)
            self.uncommitted[key] = (first if seen is None else min(seen[0], first), max(nxt, seen[1] if seen else nxt))
        self.messages += self.streamed_messages
        self.streamed.clear()
        self.streamed_messages = 0
        self.metrics.uncommitted.set(self.messages)

    def streamed_ends(self) -> dict[Key, int]:
        """Per partition, the next offset after the open stream's batches."""
        return {key: nxt for key, (_, nxt) in self.streamed.items()}

    def due(self, interval: float) -> bool:
        if not self.uncommitted:
            return False
        return interval <= 0 or time.monotonic() - self.last_commit_at >= interval

    def to_commit(self) -> list[TopicPartition]:
        return [TopicPartition(t, p, nxt) for (t, p), (_, nxt) in self.uncommitted.items()]

    def committed_now(self, offsets: list[TopicPartition]) -> None:
        for tp in offsets:
            self.committed[(tp.topic, tp.partition)] = tp.offset
        self.uncommitted.clear()
        self.messages = 0
        self.last_commit_at = time.monotonic()
        self.metrics.uncommitted.set(0)
        self.metrics.commits.inc()
        self.metrics.last_commit.set_to_current_time()

    def drop(self, batch: PendingBatch) -> tuple[dict[Key, int], int]:
        """Give up the uncommitted and streamed offsets and ``batch``: (first offset to read again per partition,
        messages)."""
        first = {key: offsets[0] for key, offsets in self.uncommitted.items()}
        for key, (start, _) in (*self.streamed.items(), *batch.offsets.items()):
            first[key] = min(first.get(key, start), start)
        messages = batch.messages + self.messages + self.streamed_messages
        self.uncommitted.clear()
        self.streamed.clear()
        self.messages = self.streamed_messages = 0
        self.metrics.uncommitted.set(0)
        return first, messages

    def touches(self, keys: set[Key], batch: PendingBatch) -> bool:
        return any(key in keys for key in (*batch.offsets, *self.uncommitted, *self.streamed))

    def forget(self, keys: set[Key]) -> None:
        """Partitions that are no longer ours: forget their committed offset and lag."""
        for key in keys:
            self.committed.pop(key, None)
        for key in keys & self._lag_labels:
            self._lag_labels.discard(key)
            self.metrics.lag.remove(key[0], str(key[1]))

    def update_lag(self, consumer: GroupConsumer) -> None:
        """Approximate lag per partition: librdkafka's cached high watermark (from fetch responses) minus the last
        commit (or the position before the first). tansu's watermarks can stay behind the log: never use this as
        proof that everything was read (the tests compare committed offsets with delivery reports instead)."""
        try:
            assignment = consumer.assignment()
            positions = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(assignment)}
        except KafkaException:
            return
        total = 0
        for tp in assignment:
            key = (tp.topic, tp.partition)
            try:
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            base = self.committed.get(key, positions.get(key, -1))
            if high is None or high < 0 or base is None or base < 0:
                continue
            lag = max(0, high - base)
            total += lag
            self.metrics.lag.labels(tp.topic, str(tp.partition)).set(lag)
            self._lag_labels.add(key)
        self.metrics.lag_total.set(total)

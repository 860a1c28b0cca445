"""The collector's loop: poll the consumer, hand what comes to the batcher, and run each step that is due — a flush
(rows, bytes or age), the end of an open INSERT stream, a commit — until stopped; then the last flush and commit, and
the consumer's close (it leaves the group)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from sparktap.collector.batching import Batcher
from sparktap.collector.core import Abandoned, Shared
from sparktap.collector.kafka.client import GroupConsumer, consume_queued
from sparktap.collector.logfmt import fields
from sparktap.collector.rebalance import Committer

log = logging.getLogger("sparktap.collector")

_LAG_INTERVAL = 5.0

_IDLE_POLL = 0.25

_FIRST_POLL = 0.05


class Loop:
    """Poll, dispatch, shut down. Every step that may wait runs ``guarded``: when it must give up (partitions
    revoked meanwhile, the shutdown deadline) the uncommitted work is abandoned, never half-committed."""

    def __init__(self, shared: Shared, batcher: Batcher, committer: Committer) -> None:
        self.cfg = shared.settings.collector
        self.control, self.links, self.pending = shared.control, shared.links, shared.pending
        self.health = shared.control.health
        self.batcher, self.committer = batcher, committer
        self._lag_at = 0.0

    def run(self) -> None:
        """Consume until stopped, then flush and commit what is pending."""
        consumer = self.links.consumer
        assert consumer is not None  # noqa: S101 - set once subscribed
        cfg, stopped, batcher, committer = self.cfg, self.control.stopped, self.batcher, self.committer
        pending = self.pending
        while not stopped.is_set():
            self.health.beat()
            # a poll waits for one message and takes what librdkafka has queued by then (``consume_queued``: never
            # more than its bounded queue); an empty batch polls briefly, since a batch's age starts when its first
            # chunk returns
            timeout = _FIRST_POLL
            if not pending.batch.empty:
                timeout = min(_IDLE_POLL, pending.batch.seconds_until_due(cfg.batch_interval_seconds))
            messages = consume_queued(consumer, batcher.chunk_size(), timeout)
            if messages:
                batcher.ingest(messages)
            if pending.batch.due(cfg.batch_rows, cfg.batch_interval_seconds, batch_bytes=cfg.batch_bytes):
                self.guarded(batcher.flush)
            writer = self.links.writer
            if writer is not None and batcher.stream_due(writer):  # an open INSERT's time bound
                self.guarded(batcher.finish_stream)
            if committer.due():
                self.guarded(self.commit)
            if time.monotonic() - self._lag_at >= _LAG_INTERVAL:
                self._lag_at = time.monotonic()
                committer.update_lag(consumer)
        self.health.phase = "stopping"
        self.guarded(batcher.flush)
        self.guarded(batcher.finish_stream)
        self.guarded(self.commit)

    def commit(self) -> None:
        self.committer.commit(self.batcher.wait)

    def guarded(self, step: Callable[[], None]) -> None:
        control = self.control
        control.busy, control.lost = True, False
        try:
            step()
        except Abandoned as exc:
            self.committer.abandon(str(exc))
        finally:
            control.busy = False

    def close(self) -> None:
        """Give up what was not committed, leave the group, close the dead-letter producer."""
        links = self.links
        consumer: GroupConsumer | None = links.consumer
        links.consumer = None
        if consumer is not None:
            if not self.pending.batch.empty or self.committer:
                self.committer.abandon("stopped before the offsets were committed")
            try:
                consumer.close()  # leaves the group: the partitions move on at once
            except (KafkaException, RuntimeError) as exc:
                log.warning("closing the Kafka consumer failed", extra=fields(error=str(exc)))
        if links.dlq is not None:
            links.dlq.close()

"""Messages read back from Kafka by their offsets: the rows ClickHouse refuses go to the dead-letter topic with their
original message, which the pending batch does not keep (``batch.py``: only the columns and each row's partition
and offset).

The batch's offsets are not committed before its dead letters are acknowledged, so its messages are still in the
topic (unless retention removed them meanwhile: then the dead letter says so and carries no value). A short-lived
consumer, outside the group (``assign``, never a commit), reads each partition from the lowest offset wanted; while
Kafka is away it keeps trying (librdkafka reconnects), saying so every ``attempt_seconds``, and the collector's
``wait`` between the tries keeps the group membership and gives the batch up when it must (``Abandoned``: its
offsets are never committed, so the next owner reads and refuses the same rows again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sparktap.collector.batch import Origin
from sparktap.collector.kafka.client import consume_queued

READ_CHUNK = 500
"""messages taken from the short-lived consumer per call"""


def reread(
    conf: dict[str, Any],
    origins: Sequence[Origin],
    *,
    wait: Callable[[float], None],
    waiting: Callable[[str], float],
    attempt_seconds: float = 10.0,
) -> dict[Origin, Message | None]:
    """The messages at ``origins``, read back from Kafka (None: no longer in the topic).

    ``wait(seconds)`` is called between polls (the collector's: it polls its own consumer, and raises to give the
    batch up); when nothing came for ``attempt_seconds``, ``waiting(why)`` is told (it logs and counts a retry)
    and returns how long to wait before polling again (the backoff)."""
    wanted: dict[tuple[str, int], set[int]] = {}
    for origin in origins:
        wanted.setdefault((origin.topic(), origin.partition()), set()).add(origin.offset())
    found: dict[Origin, Message | None] = {}

    def missing(key: tuple[str, int], below: int | None) -> None:
        """The wanted offsets of a partition below ``below`` (None: all) are not in the topic any more."""
        offsets = wanted[key]
        for offset in [o for o in offsets if below is None or o < below]:
            found[Origin(key[0], key[1], offset)] = None
            offsets.discard(offset)
        if not offsets:
            del wanted[key]

    if not wanted:
        return found
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(t, p, min(offsets)) for (t, p), offsets in wanted.items()])
        progress_at = time.monotonic()
        last_error = ""
        while wanted:
            try:
                messages = consume_queued(consumer, READ_CHUNK, 0.25)
            except KafkaException as exc:
                messages, last_error = [], str(exc)
            for msg in messages:
                key = (msg.topic() or "", msg.partition() or 0)
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and key in wanted:
                        missing(key, None)
                    else:
                        last_error = err.str()
                    continue
                offsets = wanted.get(key)
                offset = msg.offset() or 0
                if offsets is None:
                    continue
                progress_at = time.monotonic()
                if offset in offsets:
                    found[Origin(key[0], key[1], offset)] = msg
                    offsets.discard(offset)
                    if not offsets:
                        del wanted[key]
                if key in wanted:  # offsets skipped below this one: gone (retention, compaction)
                    missing(key, offset)
            if not wanted:
                break
            if time.monotonic() - progress_at >= attempt_seconds:
                why = last_error or f"nothing read for {attempt_seconds:g}s"
                wait(waiting(why))
                progress_at = time.monotonic()
            else:
                wait(0.0)
    finally:
        consumer.close()
    return found

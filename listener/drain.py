"""``sparktap relay-drain``: resend a spool directory to Kafka now (e.g. after an outage outlived the application).

A running relay resends the spool by itself once Kafka takes its events again; this is for when no application
runs on the host any more. Segments being written or resent by a live relay are left alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from sparktap import DEFAULT_TOPIC
from sparktap.errors import ServiceError
from sparktap.listener.redaction import scrub_text
from sparktap.listener.relay_config import FORCED
from sparktap.listener.spool import Segment, Spool


@dataclass
class DrainResult:
    segments: int = 0
    records: int = 0
    delivered: int = 0
    failed: int = 0
    """Not delivered within the timeout: written back to the spool for the next attempt."""

    def line(self) -> str:
        return (
            f"drained segments={self.segments} records={self.records} delivered={self.delivered} "
            f"left_in_spool={self.failed}"
        )


def drain(spool_dir: Path, kafka: dict[str, Any], *, topic: str | None = None, timeout: float = 60.0) -> DrainResult:
    """Resend every claimable segment of ``spool_dir`` (to its own topic, or ``topic``) within ``timeout`` seconds."""
    if not spool_dir.is_dir():
        return DrainResult()
    spool = Spool(spool_dir, max_bytes=1 << 62, topic=topic or DEFAULT_TOPIC)
    result = DrainResult()
    failures: dict[int, list[tuple[bytes, bytes]]] = {}
    segments: list[Segment] = []

    def callback(index: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                result.delivered += 1
            else:
                failures.setdefault(index, []).append((msg.key() or b"", msg.value() or b""))

        return on_delivery

    conf = {"client.id": "sparktap-relay-drain", "compression.type": "zstd", **kafka}
    conf.update(FORCED)  # the relay's: the Java client's partitioner, so resent events join the live ones
    try:
        producer = Producer(conf)
    except KafkaException as exc:
        raise ServiceError(f"invalid Kafka settings for relay-drain: {scrub_text(str(exc))}") from exc
    deadline = time.monotonic() + timeout
    while (segment := spool.claim_next()) is not None:
        index = len(segments)
        segments.append(segment)
        target = topic or segment.topic
        on_delivery = callback(index)
        for key, value in segment.records:
            while True:
                try:
                    producer.produce(target, value, key, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
            result.records += 1
        producer.poll(0)
    while len(producer) > 0 and (remaining := deadline - time.monotonic()) > 0:
        producer.flush(min(remaining, 0.5))
    if len(producer) > 0:
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.flush(1.0)
    for index, segment in enumerate(segments):
        failed = failures.get(index, [])
        if failed:
            spool.write_back(segment.topic, failed)
            result.failed += len(failed)
        spool.finish(segment)
    result.segments = len(segments)
    return result

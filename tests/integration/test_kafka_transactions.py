"""The ``sparktap-kafka`` streaming source over Kafka semantics tansu could not show, on Apache Kafka: committed,
aborted and still-open transactions under both isolation levels (transaction markers and aborted records leave
offset gaps), and a compacted topic (offsets removed by the log cleaner are gaps, not loss)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparktap.local.ports import wait_until
from tests.fixtures.kafka import KafkaService
from tests.support.streaming_source import source

pytestmark = pytest.mark.integration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def backfill(spark: SparkSession, df: Any, directory: Path) -> tuple[list[Any], list[int]]:
    """One Trigger.AvailableNow run of ``df`` into Parquet under ``directory`` (restartable: same checkpoint);
    returns every row written so far and the row counts of this run's non-empty batches."""
    writer = df.writeStream.format("parquet").option("path", str(directory / "data"))
    query = writer.option("checkpointLocation", str(directory / "chk")).trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(120), "the AvailableNow run did not finish within 120 s"
        assert query.exception() is None
        sizes = [int(p["numInputRows"]) for p in query.recentProgress if int(p["numInputRows"]) > 0]
    finally:
        if query.isActive:
            query.stop()
    return spark.read.parquet(str(directory / "data")).collect(), sizes


def transactional(bootstrap: str, name: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{name}-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    return producer


def transaction(producer: Producer, topic: str, values: list[bytes], commit: bool = True) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    if commit:
        producer.commit_transaction(30)
    else:
        assert producer.flush(30) == 0  # written to the log first: librdkafka drops unsent records on abort
        producer.abort_transaction(30)


def test_read_committed_skips_aborted_and_open_transactions_and_read_uncommitted_sees_them(
    spark: SparkSession, kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    producer = transactional(bootstrap, "committer")
    transaction(producer, topic, [b"a%d" % i for i in range(5)])  # offsets 0-4, commit marker 5
    transaction(producer, topic, [b"x%d" % i for i in range(4)], commit=False)  # 6-9 aborted, abort marker 10
    transaction(producer, topic, [b"c%d" % i for i in range(3)])  # 11-13, commit marker 14
    still_open = transactional(bootstrap, "open")
    still_open.begin_transaction()
    for i in range(2):
        still_open.produce(topic, value=b"o%d" % i, partition=0)  # 15-16, not committed yet
    assert still_open.flush(30) == 0

    committed_only = tmp_path / "committed"
    options = {"subscribe": topic, "maxOffsetsPerTrigger": 4, "kafkaConsumer.pollTimeoutMs": 60_000}
    started = time.monotonic()
    rows, sizes = backfill(
        spark, source(spark, bootstrap, **options, **{"kafka.isolation.level": "read_committed"}), committed_only
    )
    assert time.monotonic() - started < 60  # ends at the last stable offset: no range waits for its poll timeout
    assert sorted((r.offset, r.value) for r in rows) == [
        *[(i, b"a%d" % i) for i in range(5)],
        *[(11 + i, b"c%d" % i) for i in range(3)],
    ]
    assert sum(sizes) == 8

    still_open.commit_transaction(30)  # 15-16 committed, marker 17
    rows, sizes = backfill(
        spark, source(spark, bootstrap, **options, **{"kafka.isolation.level": "read_committed"}), committed_only
    )
    assert sizes == [2]  # the restarted query reads only what became committed
    assert sorted(r.offset for r in rows) == [0, 1, 2, 3, 4, 11, 12, 13, 15, 16]

    rows, sizes = backfill(
        spark, source(spark, bootstrap, **options, **{"kafka.isolation.level": "read_uncommitted"}), tmp_path / "all"
    )
    assert sorted(r.offset for r in rows) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 15, 16]  # aborted ones too
    assert sorted(r.value for r in rows if r.value.startswith(b"x")) == [b"x%d" % i for i in range(4)]
    assert sum(sizes) == 14


def read_to_end(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of partition 0 up to its high watermark: (offset, key, value)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.partition.eof": True})
    try:
        _low, high = consumer.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=10, cached=False)
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if (msg.offset() or 0) >= high:
                    return out
                continue
            out.append((msg.offset() or 0, msg.key(), msg.value()))
            if (msg.offset() or 0) >= high - 1:
                return out
        raise AssertionError(f"partition 0 of {topic} not read to offset {high} within 30 s")
    finally:
        consumer.close()


def test_a_compacted_topic_reads_the_latest_value_per_key_across_the_cleaned_gaps(
    spark: SparkSession, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"sparktap-test-compact-{uuid.uuid4().hex[:8]}"
    config = {
        "cleanup.policy": "compact",
        "segment.ms": "200",
        "min.cleanable.dirty.ratio": "0.001",
        "min.compaction.lag.ms": "0",
    }
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for version in range(10):  # offset = version * 10 + key number
        for key in range(10):
            value = None if (version, key) == (9, 9) else b"k%d-v%d" % (key, version)  # k9 ends with a tombstone
            producer.produce(topic, key=b"k%d" % key, value=value, partition=0)
        assert producer.flush(30) == 0
    # Offset 100 rolls the segment (0-99 become cleanable): the broker rolls by record timestamps, and this one is
    # 5 s past the segment's first, well over segment.ms, so no waiting is needed.
    producer.produce(topic, key=b"roll", value=b"roll", partition=0, timestamp=int(time.time() * 1000) + 5000)
    assert producer.flush(30) == 0
    wait_until(lambda: len(read_to_end(bootstrap, topic)) == 11, 60, f"the log cleaner compacting {topic}", 0.5)

    rows, _sizes = backfill(spark, source(spark, bootstrap, subscribe=topic, maxOffsetsPerTrigger=7), tmp_path)

    assert sorted((r.offset, r.key, r.value) for r in rows) == [
        *[(90 + k, b"k%d" % k, b"k%d-v9" % k) for k in range(9)],
        (99, b"k9", None),  # the tombstone stays (delete.retention.ms) and arrives as a null value
        (100, b"roll", b"roll"),
    ]

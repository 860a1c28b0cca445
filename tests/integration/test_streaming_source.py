"""The ``sparktap-kafka`` streaming source on real Spark local[2] and a real broker (Spark's memory sink).

Ported from Spark's KafkaMicroBatchSourceSuite: AvailableNow with maxOffsetsPerTrigger, minOffsetsPerTrigger
with maxTriggerDelay, new partitions, offsets that are gone, the raw layout. Restarts and exactly-once into
ClickHouse are in test_streaming_pipeline.py.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException

from sparktap.local.broker import create_topic
from sparktap.local.ports import wait_until
from tests.fixtures.kafka import KafkaService
from tests.support.streaming_source import source

pytestmark = pytest.mark.integration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery


def produce(
    bootstrap: str, topic: str, values: Sequence[bytes], partition: int | None = None, key: bytes | None = None
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for value in values:
        if partition is None:
            producer.produce(topic, value=value, key=key)
        else:
            producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(30) == 0


@pytest.fixture
def memory_query(spark: SparkSession, tmp_path: Path) -> Iterator[Callable[..., StreamingQuery]]:
    """Start ``df`` into Spark's memory sink (table = query name); every query is stopped at the end."""
    started: list[StreamingQuery] = []

    def start(df: Any, name: str | None = None, checkpoint: Path | None = None, **trigger: Any) -> StreamingQuery:
        name = name or f"q_{uuid.uuid4().hex[:8]}"
        writer = df.writeStream.format("memory").queryName(name)
        writer = writer.option("checkpointLocation", str(checkpoint or tmp_path / f"chk-{name}"))
        query = writer.trigger(**(trigger or {"processingTime": "500 milliseconds"})).start()
        started.append(query)
        return query

    yield start
    for query in started:
        if query.isActive:
            query.stop()


@pytest.fixture
def file_query(tmp_path: Path) -> Iterator[Callable[..., StreamingQuery]]:
    """Start ``df`` into a Parquet file sink under ``directory`` (restartable from ``directory/chk``)."""
    started: list[StreamingQuery] = []

    def start(df: Any, directory: Path) -> StreamingQuery:
        writer = df.writeStream.format("parquet").option("path", str(directory / "data"))
        query = writer.option("checkpointLocation", str(directory / "chk")).trigger(processingTime="500 milliseconds")
        started.append(query.start())
        return started[-1]

    yield start
    for query in started:
        if query.isActive:
            query.stop()


def files_of(spark: SparkSession, directory: Path) -> list[Any]:
    return spark.read.parquet(str(directory / "data")).collect()


def rows_of(spark: SparkSession, query: StreamingQuery) -> list[Any]:
    return spark.sql(f"SELECT * FROM {query.name}").collect()  # noqa: S608 - our own query name


def batch_sizes(query: StreamingQuery) -> list[int]:
    return [int(p["numInputRows"]) for p in query.recentProgress if int(p["numInputRows"]) > 0]


def test_available_now_with_max_offsets_5_over_15_messages_runs_exactly_3_batches(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    memory_query: Callable[..., StreamingQuery],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=5)
    produce(bootstrap, topic, [f"foo-{i}".encode() for i in range(15)], partition=0)
    group = f"monitor-{uuid.uuid4().hex[:6]}"

    df = source(spark, bootstrap, subscribe=topic, maxOffsetsPerTrigger=5, monitoringGroupId=group)
    query = memory_query(df, availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None

    assert batch_sizes(query) == [5, 5, 5]
    rows = rows_of(spark, query)
    assert sorted(r.value.decode() for r in rows) == sorted(f"foo-{i}" for i in range(15))
    assert sorted((r.partition, r.offset) for r in rows) == [(0, i) for i in range(15)]
    # Spark's Kafka layout
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    first = min(rows, key=lambda r: r.offset)
    assert first.topic == topic and first.timestampType == 0 and first.key is None
    assert abs(first.timestamp.replace(tzinfo=dt.UTC) - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=5)
    # offsets committed to a monitoring group (never read back by the source)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = consumer.committed([KafkaTopicPartition(topic, p) for p in range(5)], timeout=10)
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == [15, 0, 0, 0, 0]


def test_latest_offsets_are_probed_past_a_short_watermark(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    memory_query: Callable[..., StreamingQuery],
) -> None:
    """1000 records in one producer batch: tansu lists a high watermark of 1; the probe finds all 1000."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, "batch.num.messages": 10_000})
    for i in range(1000):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0

    query = memory_query(source(spark, bootstrap, subscribe=topic), availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert batch_sizes(query) == [1000]
    assert sorted(int(r.value) for r in rows_of(spark, query)) == list(range(1000))


def test_min_offsets_per_trigger_waits_for_enough_data_or_the_delay(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    memory_query: Callable[..., StreamingQuery],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    delay = 12.0  # long enough that a slow first batch on a busy machine cannot make the waits overlap
    produce(bootstrap, topic, [b"a%d" % i for i in range(12)])
    df = source(spark, bootstrap, subscribe=topic, minOffsetsPerTrigger=10, maxTriggerDelay=f"{delay:g}s")
    query = memory_query(df)

    def count() -> int:
        return len(rows_of(spark, query))

    wait_until(lambda: count() == 12, 60, "the first batch (always runs)")
    produce(bootstrap, topic, [b"b%d" % i for i in range(10)])  # enough records: runs at once
    wait_until(lambda: count() == 22, 60, "a batch with enough records")
    produce(bootstrap, topic, [b"c%d" % i for i in range(4)])
    # fewer than minOffsetsPerTrigger records and the delay not over: no batch for 2 s
    assert not query.awaitTermination(2.0)
    assert count() == 22
    produce(bootstrap, topic, [b"d%d" % i for i in range(6)])  # 10 waiting now: enough
    wait_until(lambda: count() == 32, 60, "the batch once enough records arrived")
    produce(bootstrap, topic, [b"e%d" % i for i in range(3)])  # 3 < 10: runs only when the delay is over
    wait_until(lambda: count() == 35, 60, "the batch after maxTriggerDelay")

    wait_until(lambda: len(batch_sizes(query)) == 4, 30, "progress of the 4 batches")
    progress = [p for p in query.recentProgress if int(p["numInputRows"]) > 0]
    assert [int(p["numInputRows"]) for p in progress] == [12, 10, 10, 3]
    started = [dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")) for p in progress]
    assert (started[2] - started[1]).total_seconds() < delay  # enough data: did not wait for the delay
    assert (started[3] - started[2]).total_seconds() >= delay - 0.5  # too little data: waited for the delay


def test_partitions_added_while_running_are_read_from_the_start(
    spark: SparkSession,
    kafka_broker: KafkaService,
    memory_query: Callable[..., StreamingQuery],
) -> None:
    """tansu has no CreatePartitions, so new partitions come as a new topic matching subscribePattern (the same
    path: topic-partitions the checkpoint has never seen). On a broker with CreatePartitions, the existing
    topic also grows."""
    bootstrap = kafka_broker.bootstrap_servers
    prefix = f"grow-{uuid.uuid4().hex[:6]}"
    first = f"{prefix}-a"
    create_topic(bootstrap, first, partitions=1)
    produce(bootstrap, first, [b"a%d" % i for i in range(5)])
    query = memory_query(source(spark, bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="latest"))
    query.processAllAvailable()
    assert rows_of(spark, query) == []  # startingOffsets=latest: the 5 earlier records are skipped

    produce(bootstrap, first, [b"b%d" % i for i in range(3)])
    second = f"{prefix}-b"
    create_topic(bootstrap, second, partitions=2)
    produce(bootstrap, second, [b"c%d" % i for i in range(4)], partition=0)
    produce(bootstrap, second, [b"d%d" % i for i in range(2)], partition=1)
    expected = {f"b{i}" for i in range(3)} | {f"c{i}" for i in range(4)} | {f"d{i}" for i in range(2)}

    grown = _grow(bootstrap, first)
    if grown:
        produce(bootstrap, first, [b"e%d" % i for i in range(2)], partition=1)
        expected |= {"e0", "e1"}
    wait_until(lambda: len(rows_of(spark, query)) >= len(expected), 60, "records of the new partitions")
    query.processAllAvailable()
    rows = rows_of(spark, query)
    assert sorted(r.value.decode() for r in rows) == sorted(expected)
    # new partitions were read from their first offset
    assert sorted(r.offset for r in rows if r.topic == second and r.partition == 0) == [0, 1, 2, 3]


def _grow(bootstrap: str, topic: str) -> bool:
    """Add a partition with CreatePartitions; False when the broker lacks it (tansu)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_partitions([NewPartitions(topic, 2)], request_timeout=10)[topic].result(timeout=15)
    except KafkaException as exc:
        if "not supported" in str(exc) or "UNSUPPORTED" in str(exc):
            return False
        raise
    return True


def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete a topic and create it again: every old offset is gone (tansu has no DeleteRecords)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=15)
    wait_until(lambda: topic not in admin.list_topics(timeout=5).topics, 30, f"deletion of {topic}")
    create_topic(bootstrap, topic, partitions=partitions)


def test_offsets_gone_fail_the_query_clearly_by_default(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    file_query: Callable[..., StreamingQuery],
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    produce(bootstrap, topic, [b"a%d" % i for i in range(10)])
    query = file_query(source(spark, bootstrap, subscribe=topic), tmp_path)
    query.processAllAvailable()
    query.stop()

    _recreate(bootstrap, topic, 1)
    produce(bootstrap, topic, [b"b%d" % i for i in range(5)])  # offsets 0..4: the checkpoint says 10
    again = file_query(source(spark, bootstrap, subscribe=topic), tmp_path)
    with pytest.raises(StreamingQueryException) as failure:
        again.awaitTermination(120)
    error = str(failure.value)
    assert f'offset of topic="{topic}" partition=0 went back from 10 to 5: data the query has not read is no ' in error
    assert "set the source option failOnDataLoss=false" in error
    assert len(files_of(spark, tmp_path)) == 10


def test_offsets_gone_with_fail_on_data_loss_false_continue(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    file_query: Callable[..., StreamingQuery],
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    produce(bootstrap, topic, [b"a%d" % i for i in range(10)])
    query = file_query(source(spark, bootstrap, subscribe=topic, failOnDataLoss="false"), tmp_path)
    query.processAllAvailable()
    query.stop()

    _recreate(bootstrap, topic, 1)
    produce(bootstrap, topic, [b"b%d" % i for i in range(5)])  # lost for the query: it was at offset 10
    again = file_query(source(spark, bootstrap, subscribe=topic, failOnDataLoss="false"), tmp_path)
    again.processAllAvailable()
    produce(bootstrap, topic, [b"c%d" % i for i in range(7)])  # offsets 5..11: read
    again.processAllAvailable()
    assert again.exception() is None and again.isActive
    rows = files_of(spark, tmp_path)
    assert sorted(r.value.decode() for r in rows) == sorted([f"a{i}" for i in range(10)] + [f"c{i}" for i in range(7)])
    assert sorted(r.offset for r in rows if r.value.startswith(b"c")) == list(range(5, 12))


def test_a_deleted_topic_fails_with_a_clear_message(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    memory_query: Callable[..., StreamingQuery],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    produce(bootstrap, topic, [b"a%d" % i for i in range(4)])
    query = memory_query(source(spark, bootstrap, subscribe=topic))
    query.processAllAvailable()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=15)
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(120)
    error = str(failure.value)
    assert f"partitions {topic}-0, {topic}-1 are gone: was the topic deleted, or did it shrink?" in error


def test_transaction_markers_are_gaps_not_loss(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    memory_query: Callable[..., StreamingQuery],
) -> None:
    """Two transactions of 5 records: offsets 5 and 11 hold commit markers. Ranges ending on a marker finish at
    once (no wait for a record that never comes), and nothing counts as lost."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for txn in range(2):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=b"t%d-%d" % (txn, i), partition=0)
        producer.commit_transaction(30)

    df = source(spark, bootstrap, subscribe=topic, maxOffsetsPerTrigger=4, **{"kafkaConsumer.pollTimeoutMs": 60_000})
    started = time.monotonic()
    query = memory_query(df, availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert time.monotonic() - started < 60  # no range waited for its poll timeout
    rows = rows_of(spark, query)
    assert sorted(r.offset for r in rows) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert len({r.value for r in rows}) == 10


def test_parse_events_gives_typed_columns(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    memory_query: Callable[..., StreamingQuery],
) -> None:
    from sparktap.schemas.examples import example_event

    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    stage = example_event("stage_completed", seq=1)
    produce(bootstrap, topic, [stage.model_dump_json().encode(), b'{"event_type": "task_end"}'])
    df = source(spark, bootstrap, subscribe=topic, parse="events")
    query = memory_query(df, availableNow=True)
    assert query.awaitTermination(120)
    good, bad = sorted(rows_of(spark, query), key=lambda r: r.offset)
    assert (good.event_type, good.app_id, good.seq, good.error) == ("stage_completed", stage.app_id, 1, None)
    assert good.stage_completed.task_duration_ms.max == stage.task_duration_ms.max
    assert good.stage_completed.locality.process_local == 3 and good.task_end is None
    assert good.value == stage.model_dump_json().encode()
    assert bad.event_type is None and bad.error.startswith("invalid event: ") and bad.value is not None
    typed = spark.sql(
        f"SELECT stage_completed.shuffle_read_bytes.p95 AS p95 FROM {query.name} "  # noqa: S608
        "WHERE event_type = 'stage_completed'"
    ).first()
    assert typed is not None and typed.p95 == stage.shuffle_read_bytes.p95

"""Source -> sink -> ClickHouse as one Structured Streaming query (real Spark local[2], tansu, chDB and the
Debian ClickHouse server): exactly once across stops and replays, the same rows as the consumer-group collector,
and ``collect --engine spark`` in process (the command's own process, killed and restarted from its checkpoint:
test_streaming_executor_writes).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from sparktap.collector.consumer import Collector
from sparktap.collector.kafka.dlq import HEADER_ERROR, HEADER_OFFSET, HEADER_PARTITION, HEADER_REASON, HEADER_TOPIC
from sparktap.collector.streaming import register
from sparktap.collector.streaming.run import CollectorOptions, run, start_collector
from sparktap.collector.streaming.store_server import StoreServer
from sparktap.local.ports import wait_until
from sparktap.schemas.ddl import RAW_TABLE
from sparktap.schemas.events import EVENT_TYPES
from sparktap.schemas.examples import example_event
from sparktap.settings import load_settings
from sparktap.store import ChdbStorage, Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.clickhouse import random_database
from tests.fixtures.kafka import KafkaService, consume_all
from tests.support.streaming import count, drop_last_commit, events, kafka_topic_named, ledger, produce

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


@pytest.fixture
def collectors() -> Iterator[list[Any]]:
    """Stopped at the end of the test, whatever happened."""
    running: list[Any] = []
    yield running
    for item in running:
        item.stop()


def test_stop_mid_stream_and_restart_every_message_exactly_once_in_clickhouse(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    chdb_storage: ChdbStorage,
    tmp_path: Path,
    collectors: list[Any],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=3)
    dlq = f"{topic}.dlq"
    kafka_topic_named(bootstrap, dlq)
    messages: list[tuple[bytes | None, bytes]] = list(events(600))
    messages.insert(300, (b"app-1", b"{not json"))  # one poison message among them
    produce(bootstrap, topic, messages)
    checkpoint = tmp_path / "chk"
    options = CollectorOptions(
        bootstrap_servers=bootstrap,
        checkpoint=checkpoint,
        topic=topic,
        dead_letter_topic=dlq,
        max_offsets_per_trigger=60,
        interval="200 milliseconds",
    )
    first = start_collector(spark, chdb_storage, options)
    collectors.append(first)
    wait_until(lambda: len(ledger(chdb_storage)) >= 3, 120, "three committed batches")
    first.stop()  # mid-stream: a batch in flight is interrupted and runs again after the restart

    options.trigger = "available-now"
    second = start_collector(spark, chdb_storage, options)
    collectors.append(second)
    assert second.await_termination(180)
    # every message exactly once: the table itself, not a deduplicating view, holds each event once
    assert count(chdb_storage, "task_end") == 600
    (row,) = chdb_storage.query("SELECT uniqExact(app_id, seq) AS n FROM task_end")
    assert row["n"] == 600
    committed = ledger(chdb_storage)
    assert [b for b, _ in committed] == list(range(len(committed)))
    assert sum(rows for _, rows in committed) == 600

    # Spark dies after the sink committed a batch but before its own commit log: the batch is replayed, skipped
    replayed = drop_last_commit(checkpoint)
    assert replayed == committed[-1][0]
    produce(bootstrap, topic, events(30, apps=1, event_type="job_start"))
    third = start_collector(spark, chdb_storage, options)
    collectors.append(third)
    assert third.await_termination(180)
    assert count(chdb_storage, "task_end") == 600
    assert count(chdb_storage, "job_start") == 30
    assert ledger(chdb_storage) == [*committed, (replayed + 1, 30)]

    # the poison message went to the dead-letter topic once, with where it came from and why
    (letter,) = consume_all(bootstrap, dlq, expected=1, timeout=10)
    headers = dict(letter.headers)
    assert letter.value == b"{not json"
    assert headers[HEADER_TOPIC] == topic.encode() and headers[HEADER_ERROR] == b"not_json"
    assert headers[HEADER_REASON].startswith(b"not JSON")
    assert int(headers[HEADER_PARTITION]) in (0, 1, 2) and int(headers[HEADER_OFFSET]) >= 0


def test_clickhouse_server_exactly_once_and_a_replayed_batch_is_skipped(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    server_storage: Storage,
    tmp_path: Path,
    collectors: list[Any],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    produce(bootstrap, topic, events(45, event_type="stage_completed"))
    checkpoint = tmp_path / "chk"
    options = CollectorOptions(
        bootstrap_servers=bootstrap,
        checkpoint=checkpoint,
        topic=topic,
        trigger="available-now",
        max_offsets_per_trigger=15,
    )
    first = start_collector(spark, server_storage, options)
    collectors.append(first)
    assert first.await_termination(180)
    assert ledger(server_storage) == [(0, 15), (1, 15), (2, 15)]

    replayed = drop_last_commit(checkpoint)
    assert replayed == 2
    produce(bootstrap, topic, events(5, apps=1, event_type="job_end"))
    second = start_collector(spark, server_storage, options)
    collectors.append(second)
    assert second.await_termination(180)
    assert ledger(server_storage) == [(0, 15), (1, 15), (2, 15), (3, 5)]  # batch 2 replayed and skipped
    assert count(server_storage, "stage_completed") == 45
    assert count(server_storage, "job_end") == 5


def _same_input() -> list[tuple[bytes | None, bytes]]:
    """Every event type, an unknown future type, and messages the collector must refuse."""
    out: list[tuple[bytes | None, bytes]] = []
    for n, event_type in enumerate(EVENT_TYPES):
        for i in range(3):
            event = example_event(event_type, seq=n * 10 + i + 1, app_id=f"app-{i}")
            out.append((event.app_id.encode(), event.model_dump_json().encode()))
    future = example_event("job_end", seq=999).model_dump(mode="json")
    future.update(event_type="gpu_kernel_end", kernel="gemm", duration_ns=12)
    out.append((b"app-0", orjson.dumps(future)))
    bad = example_event("task_end", seq=998).model_dump(mode="json")
    bad["duration_ms"] = -5
    out += [(b"app-0", orjson.dumps(bad)), (b"app-0", b"[1, 2]"), (None, b"")]
    return out


def _table_rows(storage: Storage) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for table in [*EVENT_TYPES, RAW_TABLE]:
        rows = storage.query(f"SELECT * FROM {storage.qualified(table)} ORDER BY app_id, seq")  # noqa: S608
        out[table] = rows
    return out


def test_parse_events_gives_the_same_rows_as_the_consumer_group_collector(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    chdb_storage: ChdbStorage,
    tmp_path: Path,
    collectors: list[Any],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    messages = _same_input()
    produce(bootstrap, topic, messages)
    kafka_topic_named(bootstrap, f"{topic}.dlq")  # the collector waits for its dead letters' acknowledgements
    valid = len(messages) - 3

    # the consumer-group collector, into its own database of the same chDB store
    path = chdb_storage.path
    stores = {
        name: open_storage(StorageTarget(kind="chdb", path=path, database=random_database(name)))
        for name in ("consumer", "events", "typed")
    }
    try:
        settings = load_settings(
            kafka={"bootstrap_servers": bootstrap, "topic": topic, "group_id": f"g-{uuid.uuid4().hex[:6]}"},
            collector={"metrics_port": None, "batch_interval_seconds": 0.2, "log_format": "text"},
        )
        collector = Collector(settings, storage=stores["consumer"], install_signal_handlers=False)
        thread = threading.Thread(target=collector.run, daemon=True)
        thread.start()
        try:
            wait_until(lambda: _stored(stores["consumer"]) == valid, 120, "the consumer-group collector")
        finally:
            collector.stop()
            thread.join(60)

        # the streaming engine, parse=events (typed columns in the source, value kept) and the default (raw)
        for storage, parse in ((stores["events"], "events"), (chdb_storage, "raw")):
            options = CollectorOptions(
                bootstrap_servers=bootstrap,
                checkpoint=tmp_path / parse,
                topic=topic,
                trigger="available-now",
                parse=parse,
            )
            job = start_collector(spark, storage, options)
            collectors.append(job)
            assert job.await_termination(180)

        # the typed columns alone (value dropped): the sink flattens the source's validated events
        register(spark)
        typed = stores["typed"]
        typed.ensure_schema()
        with StoreServer(typed) as server:
            df = (
                spark.readStream.format("sparktap-kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("parse", "events")
                .load()
                .drop("value")
            )
            query = (
                df.writeStream.format("sparktap-clickhouse")
                .option("url", typed.target.url())
                .option("ingest", server.address)
                .option("ingestToken", server.token)
                .option("checkpointLocation", str(tmp_path / "typed"))
                .trigger(availableNow=True)
                .start()
            )
            assert query.awaitTermination(180)

        expected = _table_rows(stores["consumer"])
        assert sum(len(rows) for rows in expected.values()) == valid
        assert len(expected[RAW_TABLE]) == 1 and expected[RAW_TABLE][0]["event_type"] == "gpu_kernel_end"
        for name, storage in (("events", stores["events"]), ("raw", chdb_storage), ("typed", typed)):
            assert _table_rows(storage) == expected, name
    finally:
        for storage in stores.values():
            storage.close()


def _stored(storage: Storage) -> int:
    try:
        return sum(count(storage, t) for t in [*EVENT_TYPES, RAW_TABLE])
    except Exception:  # tables not created yet
        return -1


def test_collect_engine_spark_available_now_for_a_backfill(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    produce(bootstrap, topic, events(50, event_type="executor_added"))
    url = f"chdb://{tmp_path / 'store'}?database=backfill"
    settings = load_settings(kafka={"bootstrap_servers": bootstrap, "topic": topic}, clickhouse={"url": url})

    batches = run(settings, tmp_path / "chk", trigger="available-now", max_offsets_per_trigger=20)
    assert batches == 3
    again = run(settings, tmp_path / "chk", trigger="available-now")  # caught up: nothing more to do
    assert again == 0
    with open_storage(settings.clickhouse.target()) as storage:
        assert count(storage, "executor_added") == 50
        assert ledger(storage) == [(0, 20), (1, 20), (2, 10)]


def test_chdb_sink_opens_the_store_itself_when_no_process_holds_it(
    spark: SparkSession,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    produce(bootstrap, topic, events(12, event_type="sql_end"))
    url = f"chdb://{tmp_path / 'store'}?database=direct"
    register(spark)
    df = (
        spark.readStream.format("sparktap-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("parse", "raw")
        .option("maxOffsetsPerTrigger", 5)
        .load()
    )
    query = (
        df.writeStream.format("sparktap-clickhouse")
        .option("url", url)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    with open_storage(StorageTarget(kind="chdb", path=tmp_path / "store", database="direct")) as storage:
        assert count(storage, "sql_end") == 12
        assert ledger(storage) == [(0, 5), (1, 5), (2, 2)]

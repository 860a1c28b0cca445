"""INSERT streams on clickhouse-server 18.16 (store/stream.py): while the collector drains a backlog,
its batches go as blocks into one INSERT kept open, which the server writes as one part; nothing of it counts, and
no offset of it is committed, before the server confirmed it; a stream that fails is given up whole and its
messages are read again and inserted batch by batch, with nothing lost."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sparktap.local.ports import wait_until
from sparktap.store import open_storage
from tests.fixtures.clickhouse import ClickHouseServer
from tests.fixtures.kafka import KafkaService
from tests.support.collector import committed, events, in_process, produce, sample, settings_for, wait_committed

pytestmark = pytest.mark.integration

N = 6_000
BATCH = {"batch_rows": 1_000, "consume_chunk": 100, "batch_interval_seconds": 3600.0}
"""batches end on rows only (a backlog): every one of them may go into a stream"""


@pytest.fixture
def database(stoppable_database: str) -> str:
    return stoppable_database


def _count(clickhouse_server: ClickHouseServer, database: str, sql: str) -> int:
    storage = open_storage(clickhouse_server.target(database))
    try:
        return int(storage.query(sql)[0]["n"])
    finally:
        storage.close()


def test_a_backlog_goes_into_one_insert_which_the_server_writes_as_one_part(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], clickhouse_server: ClickHouseServer, database: str
) -> None:
    """Six thousand events in about six batches, one stream (no row or time bound reached): while it is open
    nothing is counted as inserted and nothing committed; at the stop it is confirmed, and task_end (its merges
    stopped) holds exactly one part of exactly the 6,000 rows."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    settings = settings_for(
        bootstrap, topic, clickhouse_server.url(database), **BATCH, stream_rows=1_000_000, stream_seconds=3600.0
    )
    storage = open_storage(settings.clickhouse.target())
    storage.ensure_schema()
    storage.command(f"SYSTEM STOP MERGES {storage.qualified('task_end')}")
    storage.close()
    ends = produce(bootstrap, topic, events(N, apps=6))
    with in_process(settings) as collector:
        wait_until(
            lambda: (
                sample(collector, "sparktap_collector_consumed_messages_total") == N
                and sample(collector, "sparktap_collector_batches_total") >= 5
            ),
            60,
            "every message consumed and five batches written",
            interval=0.05,
        )
        assert sample(collector, "sparktap_collector_inserted_rows_total") == 0
        assert sample(collector, "sparktap_collector_insert_streams_total", outcome="confirmed") == 0
        assert committed(bootstrap, settings.kafka.group_id, topic, [0, 1]) == {0: -1001, 1: -1001}
        batches = sample(collector, "sparktap_collector_batches_total")
    assert committed(bootstrap, settings.kafka.group_id, topic, [0, 1]) == ends
    assert sample(collector, "sparktap_collector_inserted_rows_total") == N
    assert sample(collector, "sparktap_collector_insert_streams_total", outcome="confirmed") == 1
    assert sample(collector, "sparktap_collector_insert_streams_total", outcome="failed") == 0
    assert sample(collector, "sparktap_collector_batches_total") in (batches, batches + 1)  # the rest, at the stop
    db = f"database = '{database}' AND table = 'task_end'"
    assert _count(clickhouse_server, database, f"SELECT count() AS n FROM system.parts WHERE {db} AND active") == 1
    assert _count(clickhouse_server, database, "SELECT count() AS n FROM task_end") == N
    assert _count(clickhouse_server, database, "SELECT uniqExact(app_id, seq) AS n FROM task_end") == N


def test_a_failed_stream_is_read_again_and_inserted_batch_by_batch(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], clickhouse_server: ClickHouseServer, database: str
) -> None:
    """The stream holds 3,000 rows when ClickHouse stops; its time bound then ends it against a stopped server.
    Nothing was counted or committed; every consumed message is given up and read again, inserted batch by batch
    once the server is back, and committed: each row stored, none counted twice."""
    server = clickhouse_server.require_process()
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    settings = settings_for(
        bootstrap,
        topic,
        clickhouse_server.url(database),
        **BATCH,
        stream_rows=1_000_000,
        stream_seconds=15.0,
        retry_backoff_max_seconds=1.0,
    )
    half = N // 2
    ends = produce(bootstrap, topic, events(half, apps=6))
    with in_process(settings) as collector:
        wait_until(
            lambda: (
                sample(collector, "sparktap_collector_consumed_messages_total") == half
                and sample(collector, "sparktap_collector_batches_total") >= 2
            ),
            60,
            "every message consumed, the stream open",
            interval=0.05,
        )
        assert sample(collector, "sparktap_collector_inserted_rows_total") == 0  # the stream is still open
        server.stop()
        try:
            wait_until(
                lambda: sample(collector, "sparktap_collector_insert_streams_total", outcome="failed") == 1,
                60,
                "the stream's end refused by the stopped server",
                interval=0.1,
            )
            assert sample(collector, "sparktap_collector_insert_streams_total", outcome="confirmed") == 0
            assert sample(collector, "sparktap_collector_inserted_rows_total") == 0
            assert sample(collector, "sparktap_collector_abandoned_messages_total") == half
        finally:
            server.start()
        wait_until(
            lambda: sample(collector, "sparktap_collector_consumed_messages_total") == 2 * half,
            120,
            "the given-up messages read again",
            interval=0.1,
        )
    wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=30)
    assert sample(collector, "sparktap_collector_inserted_rows_total") == half
    assert sample(collector, "sparktap_collector_insert_streams_total", outcome="confirmed") == 0
    assert _count(clickhouse_server, database, "SELECT count() AS n FROM task_end_dedup") == half
    assert _count(clickhouse_server, database, "SELECT uniqExact(app_id, seq) AS n FROM task_end") == half

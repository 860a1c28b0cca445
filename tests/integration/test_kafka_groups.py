"""The collector's consumer group on Apache Kafka under both rebalance protocols: the classic one and the new
consumer protocol of KIP-848 (`group.protocol=consumer`, Kafka 4.x brokers and librdkafka >= 2.10), with a
rebalance while two collectors ingest. Every event lands exactly once and the group commits the exact end offsets."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient

from sparktap.collector.integrity import integrity_report
from sparktap.local.ports import wait_until
from sparktap.store import open_storage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.kafka import KafkaService
from tests.support.collector import (
    CollectorProcess,
    assert_integrity,
    events,
    produce,
    settings_for,
    wait_committed,
)

pytestmark = pytest.mark.integration

N = 30_000
RATE = 5_000  # messages/s: the first half spans ~3 s, so the second collector joins while the first ingests
ASSIGNED = "sparktap_collector_assigned_partitions"
CONSUMED = "sparktap_collector_consumed_messages_total"
INSERTED = "sparktap_collector_inserted_rows_total"


@pytest.fixture
def database(clickhouse_server: ClickHouseServer) -> Iterator[str]:
    name = random_database()
    yield name
    drop_database(clickhouse_server, name)


def group_type(bootstrap: str, group: str) -> ConsumerGroupType:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    kind: ConsumerGroupType = description.type
    return kind


@pytest.mark.parametrize(
    ("protocol", "expected_type"), [("classic", ConsumerGroupType.CLASSIC), ("consumer", ConsumerGroupType.CONSUMER)]
)
def test_a_rebalance_while_two_collectors_ingest_lands_every_event_once(
    protocol: str,
    expected_type: ConsumerGroupType,
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    clickhouse_server: ClickHouseServer,
    database: str,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=4)
    settings = settings_for(bootstrap, topic, clickhouse_server.url(database), plain_copy=True, batch_rows=2000)
    env = {"SPARKTAP_KAFKA__EXTRA": json.dumps({"group.protocol": protocol})}
    first, second = (CollectorProcess(settings, tmp_path / f"collector-{i}.log", env) for i in range(2))
    shared = threading.Event()  # set once both collectors hold partitions
    try:
        first.start()
        first.wait_metric(ASSIGNED, lambda v: v == 4, timeout=60)
        assert group_type(bootstrap, settings.kafka.group_id) == expected_type

        ends: dict[int, int] = {}

        def held_back() -> Iterator[tuple[bytes, bytes]]:
            """The first half at RATE; the second half once both collectors hold partitions, so the second one
            has work whatever the machine's load made of its start-up time."""
            for i, item in enumerate(events(N, 16)):
                if i == N // 2 and not shared.wait(timeout=90):
                    return  # never shared: the producer stops short and the count assertion says so
                yield item

        producer = threading.Thread(target=lambda: ends.update(produce(bootstrap, topic, held_back(), RATE)))
        producer.start()
        first.wait_metric(INSERTED, lambda v: v >= N // 6, timeout=60)  # the first is ingesting ...
        second.start()  # ... when the second joins: the group rebalances mid-stream

        def balanced() -> bool:
            counts = [m.metric(ASSIGNED) for m in (first, second)]
            return sum(counts) == 4 and min(counts) >= 1

        wait_until(balanced, 60, f"two collectors sharing 4 partitions (group.protocol={protocol})", interval=0.2)
        shared.set()
        producer.join(120)
        assert not producer.is_alive() and sum(ends.values()) == N
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)

        consumed = [m.metric(CONSUMED) for m in (first, second)]
        inserted = [m.metric(INSERTED) for m in (first, second)]
        print(f"group.protocol={protocol}: consumed {consumed}, inserted {inserted}")  # noqa: T201
        assert consumed[1] > 0  # the second collector took partitions over and worked on them
        # offsets are committed inside the revoke callback, so nothing is handed over twice
        assert sum(consumed) == N and sum(inserted) == N
        assert first.terminate(timeout=60) == 0 and second.terminate(timeout=60) == 0
    finally:
        shared.set()  # a producer still held back goes on and ends
        first.close()
        second.close()
    storage = open_storage(settings.clickhouse.target())
    try:
        assert_integrity(integrity_report(storage), N)
        assert_integrity(integrity_report(storage, source="plain"), N)  # landed once, even without dedup
    finally:
        storage.close()

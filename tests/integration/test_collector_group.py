"""Scale-out: two collector processes in one consumer group share the partitions; each event lands once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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

N = 40_000
ASSIGNED = "sparktap_collector_assigned_partitions"


@pytest.fixture
def database(clickhouse_server: ClickHouseServer) -> Iterator[str]:
    name = random_database()
    yield name
    drop_database(clickhouse_server, name)


def test_two_collectors_share_the_partitions_and_land_each_event_once(
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    clickhouse_server: ClickHouseServer,
    database: str,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=4)
    settings = settings_for(bootstrap, topic, clickhouse_server.url(database), plain_copy=True)
    members = [
        CollectorProcess(
            settings.model_copy(
                update={"collector": settings.collector.model_copy(update={"instance_id": f"collector-{i}"})}
            ),
            tmp_path / f"collector-{i}.log",
        )
        for i in range(2)
    ]
    try:
        for member in members:
            member.start()

        def balanced() -> bool:  # both members hold partitions, all 4 between them (after the second join)
            counts = [m.metric(ASSIGNED) for m in members]
            return sum(counts) == 4 and min(counts) >= 1

        wait_until(balanced, 90, "two collectors sharing 4 partitions", interval=0.5)
        ends = produce(bootstrap, topic, events(N, apps=16))
        assert sum(ends.values()) == N
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)
        consumed = [m.metric("sparktap_collector_consumed_messages_total") for m in members]
        inserted = [m.metric("sparktap_collector_inserted_rows_total") for m in members]
        print(f"consumed per collector: {consumed}")  # noqa: T201
        assert all(c > 0 for c in consumed)  # both did work
        assert sum(consumed) == N and sum(inserted) == N  # and no message was handled twice
        for member in members:
            assert member.terminate(timeout=60) == 0
    finally:
        for member in members:
            member.close()
    storage = open_storage(settings.clickhouse.target())
    try:
        assert_integrity(integrity_report(storage), N)
        assert_integrity(integrity_report(storage, source="plain"), N)  # landed once: even without dedup
    finally:
        storage.close()

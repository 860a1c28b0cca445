"""Canary identifiers produced straight to a real Kafka topic (no listener): the collector dead-letters each one with
its reason and stores every legitimate event, on chDB and on clickhouse-server 18.16, with exact counts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from sparktap.collector.kafka.dlq import HEADER_ERROR, HEADER_REASON
from sparktap.schemas.examples import example_event
from sparktap.schemas.types import IDENTIFIER_RULE
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.kafka import KafkaService, consume_all
from tests.support.collector import in_process, produce, sample, settings_for, wait_committed
from tests.support.identifier_canaries import CANARIES, REAL_IDS

pytestmark = pytest.mark.integration

FIELDS = {"task_end": ("cluster", "app_id", "app_attempt", "executor_id"), "app_start": ("cluster", "app_id")}


@pytest.fixture(params=["chdb", "server"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "chdb":
        yield f"chdb://{tmp_path / 'chdb'}"
        return
    server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
    database = random_database()
    yield server.url(database)
    drop_database(server, database)


def _event(event_type: str, seq: int, now: int, **changes: object) -> bytes:
    event = example_event(event_type, seq=seq).model_dump()
    return orjson.dumps({**event, "event_time_ms": now, "emitted_at_ms": now, **changes})


def test_canary_identifiers_are_dead_lettered_and_real_ids_stored(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], storage_url: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    now = int(time.time() * 1000)
    bad: list[tuple[bytes, str]] = []  # (value, reason)
    for event_type, fields in FIELDS.items():
        for field in fields:
            for name, value in CANARIES.items():
                if field == "app_attempt" and name == "empty":
                    continue
                empty = " or empty" if field == "app_attempt" else ""
                reason = f"invalid event: {event_type}.{field}: not an identifier{empty} ({IDENTIFIER_RULE})"
                changes = {"app_id": "app-canary", field: value}
                bad.append((_event(event_type, len(bad) + 1, now, **changes), reason))
    good = [_event("task_end", 1, now, cluster=real, app_id=f"app-{i:04d}") for i, real in enumerate(REAL_IDS)]
    good += [_event("app_start", 1, now, cluster=real, app_id=real) for real in REAL_IDS]
    items = [(b"k", v) for pair in zip(good, [v for v, _ in bad], strict=False) for v in pair]
    items += [(b"k", v) for v, _ in bad[len(good) :]]
    assert len(items) == len(good) + len(bad)
    settings = settings_for(bootstrap, topic, storage_url, batch_rows=50)
    ends = produce(bootstrap, topic, items)
    with in_process(settings) as collector:
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)
        assert sample(collector, "sparktap_collector_dead_letters_total") == len(bad)
        assert sample(collector, "sparktap_collector_dead_letters_total", reason="invalid") == len(bad)
        assert sample(collector, "sparktap_collector_inserted_rows_total", table="task_end") == len(REAL_IDS)
        assert sample(collector, "sparktap_collector_inserted_rows_total", table="app_start") == len(REAL_IDS)
        assert collector.storage is not None
        rows = collector.storage.query("SELECT DISTINCT cluster FROM task_end_dedup ORDER BY cluster")
        assert [r["cluster"] for r in rows] == sorted(REAL_IDS)
        apps = collector.storage.query("SELECT app_id FROM app_start_dedup ORDER BY app_id")
        assert [r["app_id"] for r in apps] == sorted(REAL_IDS)
    records = consume_all(bootstrap, f"{topic}.dlq", len(bad), timeout=60)
    letters = sorted((r.value, dict(r.headers)) for r in records)
    assert [(v, h[HEADER_ERROR].decode(), h[HEADER_REASON].decode()) for v, h in letters] == sorted(
        (v, "invalid", reason) for v, reason in bad
    )

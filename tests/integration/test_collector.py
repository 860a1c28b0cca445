"""The collector in-process against a real broker and real ClickHouse (chDB and clickhouse-server 18.16).

Exact counts: every check compares numbers of rows, distinct keys, dead letters and committed offsets with what
was produced (offsets from delivery reports, never from tansu's watermarks).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparktap.collector.integrity import integrity_report
from sparktap.collector.kafka.dlq import HEADER_ERROR, HEADER_OFFSET, HEADER_PARTITION, HEADER_REASON, HEADER_TOPIC
from sparktap.schemas.events import SCHEMA_VERSION
from sparktap.schemas.examples import example_event
from sparktap.settings import Settings
from sparktap.store import Storage, open_storage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.kafka import KafkaService, consume_all
from tests.support.collector import (
    assert_integrity,
    events,
    in_process,
    produce,
    sample,
    settings_for,
    task_end,
    wait_committed,
)

pytestmark = pytest.mark.integration

N = 100_000


def _storage_url(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if engine == "chdb":
        yield f"chdb://{tmp_path / 'chdb'}"
        return
    server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
    database = random_database()
    yield server.url(database)
    drop_database(server, database)


@pytest.fixture(params=["chdb", "server"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store for the collector: a chDB directory, or a random database on the test server."""
    yield from _storage_url(request.param, request, tmp_path)


@pytest.fixture
def server_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from _storage_url("server", request, tmp_path)


@contextmanager
def opened(settings: Settings) -> Iterator[Storage]:
    """The collector's store, opened after the collector closed it (chDB allows one process at a time)."""
    storage = open_storage(settings.clickhouse.target())
    try:
        yield storage
    finally:
        storage.close()


def _dead_letters(kafka: KafkaService, topic: str, expected: int) -> list[dict[str, Any]]:
    records = consume_all(kafka.bootstrap_servers, f"{topic}.dlq", expected, timeout=30)
    return [{"value": r.value, **{k: v.decode() for k, v in r.headers}} for r in records]


def test_every_event_lands_exactly_once(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], storage_url: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=4)
    ends = produce(bootstrap, topic, events(N, apps=4))
    assert sum(ends.values()) == N
    settings = settings_for(bootstrap, topic, storage_url)
    with in_process(settings) as collector:
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=180)
        assert sample(collector, "sparktap_collector_consumed_messages_total") == N
        assert sample(collector, "sparktap_collector_inserted_rows_total", table="task_end") == N
        assert sample(collector, "sparktap_collector_dead_letters_total") == 0
        batches = sample(collector, "sparktap_collector_batch_rows_count")
        assert sample(collector, "sparktap_collector_batch_rows_sum") / batches >= 1_000  # large inserts
    with opened(settings) as storage:
        assert_integrity(integrity_report(storage), N)
        assert storage.query("SELECT count() AS n FROM task_end_dedup") == [{"n": N}]
        gaps = storage.query("SELECT app_id, received, max_seq, missing FROM seq_gaps ORDER BY app_id")
        assert gaps == [
            {"app_id": f"app-{a:04d}", "received": N // 4, "max_seq": N // 4, "missing": 0} for a in range(4)
        ]


def test_one_malformed_message_in_1000(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    values = [task_end(1, seq) for seq in range(1, 1001)]
    values[499] = values[499][:40]  # seq 500 cut short: not JSON
    ends = produce(bootstrap, topic, ((b"app-0001", v) for v in values))
    settings = settings_for(bootstrap, topic, f"chdb://{tmp_path / 'chdb'}")
    with in_process(settings) as collector:
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)  # lag back to 0
        assert sample(collector, "sparktap_collector_dead_letters_total", reason="not_json") == 1
        assert sample(collector, "sparktap_collector_dead_letters_total") == 1
        assert sample(collector, "sparktap_collector_inserted_rows_total") == 999
    (letter,) = _dead_letters(kafka_broker, topic, 1)
    assert letter["value"] == values[499]
    assert (letter[HEADER_TOPIC], letter[HEADER_PARTITION], letter[HEADER_OFFSET]) == (topic, "0", "499")
    assert letter[HEADER_ERROR] == "not_json"
    assert letter[HEADER_REASON].startswith("not JSON: ")
    with opened(settings) as storage:
        report = integrity_report(storage)
        assert (report.rows, report.distinct_keys, report.duplicates, report.missing) == (999, 999, 0, 1)
        assert storage.query("SELECT received, max_seq, missing FROM seq_gaps") == [
            {"received": 999, "max_seq": 1000, "missing": 1}
        ]


def _bad_inputs() -> list[tuple[bytes | None, str]]:
    """(value, expected dead-letter kind) for every kind of bad input, all of application app-bad."""
    bad = {"app_id": "app-bad"}
    huge = orjson.dumps({**orjson.loads(task_end(9, 1, **bad)), "failure_message": "x" * 5000})
    missing_app = {k: v for k, v in orjson.loads(task_end(9, 2)).items() if k != "app_id"}
    return [
        (b"{oops", "not_json"),
        (b"[1, 2, 3]", "not_json"),
        (task_end(9, 3, duration_ms="slow", **bad), "invalid"),
        (orjson.dumps(missing_app), "invalid"),
        (task_end(9, 4, host=None, **bad), "invalid"),
        (task_end(9, 5, stage_id=-1, **bad), "invalid"),
        (json.dumps({**orjson.loads(task_end(9, 6, **bad)), "peak_execution_memory": 2**64}).encode(), "invalid"),
        (json.dumps({**orjson.loads(task_end(9, 7, **bad)), "seq": 2**63}).encode(), "invalid"),
        (huge, "too_large"),
        (task_end(9, 8, schema_version=SCHEMA_VERSION + 1, **bad), "unsupported_version"),
        (None, "empty"),
    ]


def test_bad_input_is_dead_lettered_and_everything_else_lands(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], storage_url: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    good: list[bytes] = [task_end(7, seq) for seq in range(1, 21) if seq != 6]  # seq 6 never sent: a gap
    health = example_event(
        "listener_health",
        seq=21,
        app_id="app-0007",
        events_dropped=3,
        kafka_events_lost=2,
        dropped_by_type={"task_end": 3},
    )
    good.append(health.model_dump_json().encode())
    good.append(task_end(7, 22, event_type="gpu_kernel_end", kernel="matmul"))  # a type from the future: raw
    good.append(task_end(7, 23, schema_minor=99, a_new_optional_field=[1, 2]))  # a newer minor: accepted
    bad = _bad_inputs()
    # interleave: good, bad, good, bad … so bad messages sit among good ones in every batch
    items: list[tuple[bytes | None, bytes | None]] = []
    for i in range(max(len(good), len(bad))):
        if i < len(good):
            items.append((b"app-0007", good[i]))
        if i < len(bad):
            items.append((b"app-bad", bad[i][0]))
    ends = produce(bootstrap, topic, items)
    settings = settings_for(bootstrap, topic, storage_url, max_message_bytes=4096)
    with in_process(settings) as collector:
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)
        assert sample(collector, "sparktap_collector_inserted_rows_total") == len(good)
        by_kind: dict[str, int] = {}
        for _, kind in bad:
            by_kind[kind] = by_kind.get(kind, 0) + 1
        for kind, count in by_kind.items():
            assert sample(collector, "sparktap_collector_dead_letters_total", reason=kind) == count, kind
        assert sample(collector, "sparktap_listener_events_dropped_total", cluster="prod-eu") == 3
        assert sample(collector, "sparktap_listener_kafka_events_lost_total", cluster="prod-eu") == 2
    letters = _dead_letters(kafka_broker, topic, len(bad))
    assert len(letters) == len(bad)
    offsets = {value: str(offset) for offset, (_, value) in enumerate(items)}
    for letter, (value, kind) in zip(letters, bad, strict=True):
        assert letter["value"] == value
        assert letter[HEADER_ERROR] == kind
        assert (letter[HEADER_TOPIC], letter[HEADER_PARTITION]) == (topic, "0")
        assert letter[HEADER_OFFSET] == offsets[value]
        assert letter[HEADER_REASON]
    with opened(settings) as storage:
        counts = {
            t: storage.query(f"SELECT count() AS n FROM {t}_dedup")[0]["n"]  # noqa: S608
            for t in ("task_end", "listener_health", "raw_events")
        }
        assert counts == {"task_end": 20, "listener_health": 1, "raw_events": 1}
        assert storage.query("SELECT schema_minor FROM task_end_dedup WHERE seq = 23") == [{"schema_minor": 99}]
        (raw,) = storage.query("SELECT event_type, seq, payload FROM raw_events_dedup")
        assert (raw["event_type"], raw["seq"], orjson.loads(raw["payload"])["kernel"]) == (
            "gpu_kernel_end",
            22,
            "matmul",
        )
        assert storage.query("SELECT app_id, received, max_seq, missing FROM seq_gaps") == [
            {"app_id": "app-0007", "received": 22, "max_seq": 23, "missing": 1}
        ]
        (drops,) = storage.query("SELECT events_dropped, kafka_events_lost, reports FROM listener_drops")
        assert drops == {"events_dropped": 3, "kafka_events_lost": 2, "reports": 1}
        report = integrity_report(storage)
        assert (report.rows, report.distinct_keys, report.missing) == (22, 22, 1)


def test_rows_clickhouse_refuses_are_isolated_and_dead_lettered(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], server_url: str
) -> None:
    """A column narrower than the contract (an operator's ALTER): the rows that do not fit are bisected out."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    settings = settings_for(bootstrap, topic, server_url)
    with opened(settings) as storage:
        storage.ensure_schema()
        storage.command("ALTER TABLE task_end MODIFY COLUMN deserialize_time_ms UInt8")
    too_big = {17, 42, 43}
    values = [task_end(3, seq, deserialize_time_ms=1000 if seq in too_big else 5) for seq in range(1, 101)]
    ends = produce(bootstrap, topic, ((b"app-0003", v) for v in values))
    with in_process(settings) as collector:
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)
        assert sample(collector, "sparktap_collector_dead_letters_total", reason="rejected_by_clickhouse") == 3
        assert sample(collector, "sparktap_collector_inserted_rows_total") == 97
    letters = _dead_letters(kafka_broker, topic, 3)
    assert sorted(int(letter[HEADER_OFFSET]) for letter in letters) == sorted(s - 1 for s in too_big)
    assert all(letter[HEADER_REASON].startswith("rejected by ClickHouse") for letter in letters)
    with opened(settings) as storage:
        seqs = [r["seq"] for r in storage.query("SELECT seq FROM task_end_dedup ORDER BY seq")]
        assert seqs == [s for s in range(1, 101) if s not in too_big]

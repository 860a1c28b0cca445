"""The collector's memory is bounded by bytes (issue 21): a backlog of 400 valid ``sql_start`` events of 0.9 MB each
plus 10,000 small ``task_end`` events, read by ``python -m sparktap collect`` (a real process, its peak RSS read from
``/proc/<pid>/status`` VmHWM), on chDB and on clickhouse-server: every row stored exactly once, the peak under the
bound docs/collector.md documents (``collector/memory.py``), and the process never restarted. Before the byte budget
the 400 large events went into one batch: 818 MiB against a server, 2,318 MiB on chDB."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from sparktap.collector.memory import MIB, peak_rss_bound_mib
from sparktap.schemas.examples import example_event
from sparktap.store import open_storage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.kafka import KafkaService
from tests.support.collector import CollectorProcess, events, produce, settings_for

pytestmark = pytest.mark.integration

LARGE, LARGE_BYTES, SMALL = 400, 900_000, 10_000


def large_sql_starts(app: str) -> Iterator[tuple[bytes, bytes]]:
    now = int(time.time() * 1000)
    base = example_event("sql_start").model_dump(exclude_none=True)
    for seq in range(1, LARGE + 1):
        event = {**base, "app_id": app, "seq": seq, "execution_id": seq, "event_time_ms": now, "emitted_at_ms": now}
        value = orjson.dumps({**event, "description": ""})
        yield app.encode(), orjson.dumps({**event, "description": "x" * (LARGE_BYTES - len(value))})


@pytest.fixture(params=["chdb", "clickhouse"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "chdb":
        yield f"chdb://{tmp_path / 'chdb'}"
        return
    server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
    database = random_database()
    try:
        yield server.url(database)
    finally:
        drop_database(server, database)


def test_a_backlog_of_large_events_stays_under_the_documented_memory_bound(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], store_url: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    app = f"big-{uuid.uuid4().hex[:6]}"
    produce(bootstrap, topic, large_sql_starts(app))
    produce(bootstrap, topic, events(SMALL, apps=4))
    settings = settings_for(bootstrap, topic, store_url)
    cfg = settings.collector
    bound = peak_rss_bound_mib(settings.clickhouse.target().kind, cfg.batch_bytes, cfg.max_message_bytes)
    process = CollectorProcess(settings, tmp_path / "collector.log").start()
    try:
        process.wait_metric("sparktap_collector_inserted_rows_total", lambda v: v >= LARGE + SMALL, timeout=240)
        peak = process.peak_rss_bytes() / MIB
        pid = process.pid
        assert process.alive()
        assert process.metrics().get("sparktap_collector_dead_letters_total", 0.0) == 0
        assert process.terminate(timeout=60) == 0
    finally:
        process.close()
    print(f"peak RSS {peak:.0f} MiB, bound {bound:.0f} MiB ({store_url.split(':')[0]})")
    assert pid == process.pid  # one process throughout: no restart
    storage = open_storage(settings.clickhouse.target())
    try:
        counts = {
            t: storage.query(f"SELECT count() AS n FROM {t}_dedup")[0]["n"]  # noqa: S608
            for t in ("sql_start", "task_end")
        }
    finally:
        storage.close()
    assert counts == {"sql_start": LARGE, "task_end": SMALL}
    assert peak <= bound, f"peak RSS {peak:.0f} MiB over the documented bound {bound:.0f} MiB"

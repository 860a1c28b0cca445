"""Outages mid-run, with the collector as a real process on clickhouse-server 18.16: the broker frozen for 30 s,
then ClickHouse stopped for 60 s, while events keep coming. Nothing is lost or doubled, the lag drains to 0 and
memory stays bounded (consumption pauses while ClickHouse is away: the backlog waits in Kafka, not in memory)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sparktap.collector.integrity import integrity_report
from sparktap.local.ports import wait_until
from sparktap.store import open_storage
from tests.fixtures.clickhouse import ClickHouseServer
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

N = 100_000
RATE = 1_000  # events/s: production spans both outages
BATCH_ROWS = 20_000
CHUNK = 5_000  # slack over BATCH_ROWS (consume calls stop at the rows the batch has room for)


@pytest.fixture
def database(stoppable_database: str) -> str:
    return stoppable_database


def _outage(seconds: float, process: CollectorProcess, watch: Callable[[], None]) -> None:
    """Let ``seconds`` pass while checking on the collector every half second."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        watch()
        step = min(end, time.monotonic() + 0.5)
        wait_until(lambda s=step: time.monotonic() >= s, 1.0, "the next check")


def test_broker_frozen_30s_then_clickhouse_stopped_60s(
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    clickhouse_server: ClickHouseServer,
    database: str,
    tmp_path: Path,
) -> None:
    if not kafka_broker.pausable:
        pytest.skip("needs the embedded (pausable) broker")
    server = clickhouse_server.require_process()
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=4)
    settings = settings_for(
        bootstrap, topic, clickhouse_server.url(database), batch_rows=BATCH_ROWS, retry_backoff_max_seconds=2.0
    )
    ends: dict[int, int] = {}
    producer = threading.Thread(target=lambda: ends.update(produce(bootstrap, topic, events(N, apps=8), rate=RATE)))
    process = CollectorProcess(settings, tmp_path / "collector.log").start()
    producer.start()
    try:
        process.wait_metric("sparktap_collector_inserted_rows_total", lambda v: v >= 5_000, timeout=90)
        rss_before = process.rss_bytes()

        # --- the broker frozen for 30 s: the collector waits, stays alive, and carries on afterwards
        healthz: list[int] = []
        kafka_broker.pause()
        try:
            _outage(30, process, lambda: healthz.append(process.healthz()[0]))
        finally:
            kafka_broker.resume()
        assert set(healthz) == {200}  # alive throughout: no restart loop
        inserted = process.metric("sparktap_collector_inserted_rows_total")
        process.wait_metric("sparktap_collector_inserted_rows_total", lambda v: v > inserted, timeout=90)

        # --- ClickHouse stopped for 60 s: consumption pauses, memory stays bounded, nothing is committed past it
        consumed_at_stop = process.metric("sparktap_collector_consumed_messages_total")
        samples: list[dict[str, float]] = []
        statuses: list[tuple[int, str]] = []

        def watch() -> None:
            metrics = process.metrics()
            metrics["rss"] = process.rss_bytes()
            samples.append(metrics)
            code, body = process.healthz()
            statuses.append((code, body["status"]))

        server.stop()
        try:
            _outage(60, process, watch)
        finally:
            server.start()
        consumed_in_outage = samples[-1]["sparktap_collector_consumed_messages_total"] - consumed_at_stop
        assert consumed_in_outage <= BATCH_ROWS + CHUNK, consumed_in_outage  # the backlog stayed in Kafka
        assert samples[-1]["sparktap_collector_consumption_paused"] == 1
        assert samples[-1]["sparktap_collector_storage_up"] == 0
        assert samples[-1]["sparktap_collector_retries_total"] >= 5
        assert {code for code, _ in statuses} == {200} and statuses[-1][1] == "degraded"
        peak = max(s["rss"] for s in samples)
        print(
            f"RSS before {rss_before / 2**20:.0f} MiB, peak while ClickHouse was away {peak / 2**20:.0f} MiB, "  # noqa: T201
            f"consumed during the outage {consumed_in_outage:.0f}"
        )
        assert peak < rss_before + 256 * 2**20

        # --- everything drains: lag 0 (exact, from committed offsets), exact counts in ClickHouse
        producer.join(300)
        assert sum(ends.values()) == N
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=180)
        process.wait_metric("sparktap_collector_lag_messages_total_approx", lambda v: v == 0, timeout=30)
        assert process.metric("sparktap_collector_storage_up") == 1
        assert process.terminate(timeout=60) == 0
    finally:
        process.close()
        producer.join(300)
    storage = open_storage(settings.clickhouse.target())
    try:
        assert_integrity(integrity_report(storage), N)
    finally:
        storage.close()
    log = process.log_entries()
    messages = {entry["msg"] for entry in log}
    assert "consumption paused until ClickHouse accepts the batch" in messages
    assert "ClickHouse accepts writes again" in messages
    assert not any(settings.clickhouse.target().password.get_secret_value() in str(e) for e in log)

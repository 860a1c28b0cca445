"""The collector as a real process (``python -m sparktap collect``): SIGTERM, kill -9 and restarts.

The kill -9 test makes sure each kill lands while ClickHouse holds rows whose offsets are not committed (the
collector commits every 4 s there, and the kill waits for /metrics to show uncommitted rows): every restart must
read rows again that ClickHouse already has. The deduplicated count must still equal the input, and the same check
on the no-dedup copies (the negative control) must fail. (Freezing the broker does not give that guarantee: a
commit sent to a frozen broker sits in its socket buffer and is applied when it resumes.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sparktap.collector.integrity import integrity_report
from sparktap.local.ports import wait_until
from sparktap.store import open_storage
from tests.fixtures.kafka import KafkaService
from tests.support.collector import (
    CollectorProcess,
    assert_integrity,
    committed,
    events,
    produce,
    settings_for,
    wait_committed,
)

pytestmark = pytest.mark.integration

INSERTED = "sparktap_collector_inserted_rows_total"
UNCOMMITTED = "sparktap_collector_uncommitted_messages"
LAST_COMMIT = "sparktap_collector_last_commit_timestamp_seconds"


@pytest.fixture
def broker(kafka_broker: KafkaService) -> KafkaService:
    if not kafka_broker.pausable:
        pytest.skip("needs the embedded (pausable) broker")
    return kafka_broker


def test_sigterm_flushes_commits_and_exits_0(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    ends = produce(bootstrap, topic, events(500, apps=2))
    url = f"chdb://{tmp_path / 'chdb'}"
    # batches never fall due by themselves: whatever lands was flushed by the SIGTERM
    settings = settings_for(bootstrap, topic, url, batch_rows=1_000_000, batch_interval_seconds=3600)
    process = CollectorProcess(settings, tmp_path / "collector.log").start()
    try:
        process.wait_metric("sparktap_collector_consumed_messages_total", lambda v: v == 500, timeout=90)
        metrics = process.metrics()
        assert (metrics[INSERTED] if INSERTED in metrics else 0.0) == 0
        assert metrics["sparktap_collector_pending_messages"] == 500
        code, health = process.healthz()
        assert (code, health["status"], health["storage_up"]) == (200, "ok", True)
        assert committed(bootstrap, settings.kafka.group_id, topic, ends) == dict.fromkeys(ends, -1001)
        assert process.terminate(timeout=60) == 0
    finally:
        process.close()
    assert committed(bootstrap, settings.kafka.group_id, topic, ends) == ends
    messages = [entry["msg"] for entry in process.log_entries()]
    assert "stopping: flushing and committing" in messages and messages[-1] == "stopped"
    storage = open_storage(settings.clickhouse.target())
    try:
        assert_integrity(integrity_report(storage), 500)
    finally:
        storage.close()


def test_kill_9_at_10_50_90_percent_never_double_counts(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    n, interval = 100_000, 4.0
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=4)
    # commits every 4 s while batches land every 2,000 rows: most of the time some inserted rows are uncommitted
    settings = settings_for(
        bootstrap,
        topic,
        f"chdb://{tmp_path / 'chdb'}",
        batch_rows=2_000,
        plain_copy=True,
        commit_interval_seconds=interval,
        instance_id="collector-0",
    )
    group = settings.kafka.group_id
    ends: dict[int, int] = {}
    producer = threading.Thread(target=lambda: ends.update(produce(bootstrap, topic, events(n, apps=8), rate=2_000)))
    producer.start()
    redelivered = 0.0
    restarts: list[float] = []
    process = CollectorProcess(settings, tmp_path / "collector.log").start()
    try:
        for fraction in (0.1, 0.5, 0.9):
            before = sum(max(0, o) for o in committed(bootstrap, group, topic, range(4)).values())

            def kill_point(metrics: dict[str, float], f: float = fraction, b: int = before) -> bool:
                return (
                    b + metrics.get(INSERTED, 0) >= f * n
                    and metrics.get(UNCOMMITTED, 0) > 0
                    and time.time() - metrics.get(LAST_COMMIT, 0) < interval - 0.75
                )

            metrics = process.wait_metrics(kill_point, timeout=120)
            process.kill()  # kill -9 with rows in ClickHouse whose offsets are not committed
            redelivered += metrics[UNCOMMITTED]
            started = time.monotonic()
            process = CollectorProcess(settings, tmp_path / "collector.log").start()
            process.wait_metric("sparktap_collector_assigned_partitions", lambda v: v == 4, timeout=60)
            restarts.append(time.monotonic() - started)
        producer.join(120)
        assert sum(ends.values()) == n
        wait_committed(bootstrap, group, topic, ends, timeout=180)
        assert process.terminate(timeout=60) == 0
    finally:
        process.close()
        producer.join(120)
    print(
        f"restart to partitions assigned: {', '.join(f'{s:.1f}s' for s in restarts)}; "  # noqa: T201
        f"uncommitted at the kills: {redelivered:.0f} messages"
    )
    storage = open_storage(settings.clickhouse.target())
    try:
        assert_integrity(integrity_report(storage), n)  # what sparktap's views show: each event once
        control = integrity_report(storage, source="plain")  # the same check without deduplication …
        assert control.distinct_keys == n  # … nothing lost there either,
        assert control.duplicates >= redelivered > 0, control  # but every kill left rows inserted twice
        assert control.problems(n) != []  # so the negative control fails the check the real views pass
        print(f"negative control: {control}")  # noqa: T201
    finally:
        storage.close()


def test_a_busy_chdb_store_is_one_clear_line(tmp_path: Path, kafka_broker: KafkaService) -> None:
    """chDB opens a directory from one process only: a second collector on it fails with exit 2 and one line."""
    url = f"chdb://{tmp_path / 'chdb'}"
    holder = open_storage(settings_for(kafka_broker.bootstrap_servers, "t", url).clickhouse.target())
    try:
        holder.ensure_schema()
        settings = settings_for(kafka_broker.bootstrap_servers, "unused", url)
        process = CollectorProcess(settings, tmp_path / "collector.log").start()
        assert process.proc is not None
        code = process.proc.wait(60)
    finally:
        holder.close()
    assert code == 2
    text = (tmp_path / "collector.log").read_text()
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "another process holds it" in errors[0], text[-2000:]
    assert "Traceback" not in text
    wait_until(lambda: not process.alive(), 5, "collector exit")

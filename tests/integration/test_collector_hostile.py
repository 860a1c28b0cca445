"""Hostile input and refused inserts against a real broker and real ClickHouse (chDB and clickhouse-server 18.16).

- the hostile mix of issue 12 through ``sparktap collect`` in a child process: valid events stored exactly once, every
  bad message dead-lettered (or in the raw table) with a reason, consumed = inserted + dead-lettered exactly, the
  process never restarts, and a canary never shows in a header or a log line;
- an insert ClickHouse refuses (a CHECK constraint on chDB, whose streaming insert used to report such a block as
  written; a narrowed column on the server): nothing is counted, no offset is committed, the rows are retried and
  land once the cause is gone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from sparktap.collector.integrity import integrity_report
from sparktap.collector.kafka.dlq import HEADER_ERROR, HEADER_REASON
from sparktap.local.ports import wait_until
from sparktap.store import open_storage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.kafka import KafkaService, consume_all
from tests.support.collector import (
    CollectorProcess,
    committed,
    in_process,
    produce,
    sample,
    settings_for,
    task_end,
    wait_committed,
)

pytestmark = pytest.mark.integration

VALID = 5_000
CANARY = "Canary-S3cret-8c1f"
MONTH_MS = 31 * 86_400_000


@pytest.fixture(params=["chdb", "server"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "chdb":
        yield f"chdb://{tmp_path / 'chdb'}"
        return
    server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
    database = random_database()
    yield server.url(database)
    drop_database(server, database)


def _deep(levels: int) -> object:
    return json.loads("[" * levels + "]" * levels)


def _hostile(now: int) -> list[tuple[bytes, str]]:
    """(value, expected kind) of each bad message; "raw" for the one that belongs in the raw table."""
    out: list[tuple[bytes, str]] = []
    for m in range(150):  # a valid-looking application whose events span 150 months around now
        if m != 75:
            out.append((task_end(66, m + 1, event_time_ms=now + (m - 75) * MONTH_MS), "event_time_out_of_range"))
    out += [
        (
            json.dumps({**orjson.loads(task_end(67, 1)), "event_type": "gpu_kernel", "x": _deep(300)}).encode(),
            "invalid",
        ),
        (task_end(67, 2, schema_version="2", event_time_ms=now), "unsupported_version"),
        (task_end(67, 3, schema_version=2.0, event_time_ms=now), "unsupported_version"),
        (task_end(67, 4, event_time_ms=2**63 - 1), "event_time_out_of_range"),
        (task_end(67, 5, event_type={"password": CANARY}, event_time_ms=now), "invalid"),
        (task_end(67, 6, event_type=["token", CANARY], event_time_ms=now), "invalid"),
        (b"", "empty"),
        (task_end(67, 7, event_type="gpu_kernel_end", kernel="matmul", event_time_ms=now), "raw"),
    ]
    return out


def test_the_hostile_mix_never_stops_or_loses_anything(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], storage_url: str, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=2)
    now = int(time.time() * 1000)
    valid = [(f"app-{i % 5:04d}".encode(), task_end(i % 5, i // 5 + 1, event_time_ms=now)) for i in range(VALID)]
    hostile = _hostile(now)
    items: list[tuple[bytes | None, bytes | None]] = []
    step = VALID // len(hostile)
    for i, (value, _) in enumerate(hostile):  # spread among the valid ones: every batch holds some of both
        items += valid[i * step : (i + 1) * step]
        items.append((b"app-hostile", value))
    items += valid[len(hostile) * step :]
    assert len(items) == VALID + len(hostile)
    settings = settings_for(bootstrap, topic, storage_url, batch_rows=500, max_message_bytes=65_536)
    process = CollectorProcess(settings, tmp_path / "collector.log").start()
    try:
        pid = process.pid
        process.wait_metric("sparktap_collector_assigned_partitions", lambda v: v == 2, timeout=120)
        ends = produce(bootstrap, topic, items)
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=180)
        metrics = process.wait_metrics(
            lambda m: m.get("sparktap_collector_consumed_messages_total") == len(items), timeout=30
        )
        assert process.alive() and process.pid == pid  # never restarted
        dead = int(metrics["sparktap_collector_dead_letters_total"])
        raw = int(metrics.get('sparktap_collector_inserted_rows_total{table="raw_events"}', 0))
        inserted = int(metrics['sparktap_collector_inserted_rows_total{table="task_end"}'])
        assert (inserted, raw, dead) == (VALID, 1, len(hostile) - 1)
        assert metrics["sparktap_collector_consumed_messages_total"] == inserted + raw + dead
        assert metrics["sparktap_collector_inserted_rows_total"] == inserted + raw
        for kind in ("event_time_out_of_range", "invalid", "unsupported_version", "empty"):
            expected = sum(1 for _, k in hostile if k == kind)
            assert metrics[f'sparktap_collector_dead_letters_total{{reason="{kind}"}}'] == expected, kind
        assert process.terminate(timeout=60) == 0
    finally:
        process.close()
    records = consume_all(bootstrap, f"{topic}.dlq", len(hostile) - 1, timeout=60)
    letters = sorted(((r.value, dict(r.headers)) for r in records), key=lambda x: x[0] or b"")
    expected = sorted(((v, k) for v, k in hostile if k != "raw"), key=lambda x: x[0])
    assert [(v, h[HEADER_ERROR].decode()) for v, h in letters] == expected
    for _, headers in letters:
        assert headers[HEADER_REASON].strip()
        assert all(CANARY.encode() not in value for value in headers.values())  # reasons never echo values
    log = (tmp_path / "collector.log").read_text()
    assert CANARY not in log
    assert all(line.startswith("{") for line in log.splitlines()), "one JSON object per log line"
    storage = open_storage(settings.clickhouse.target())
    try:
        report = integrity_report(storage)
        assert (report.rows, report.distinct_keys, report.duplicates) == (VALID + 1, VALID + 1, 0)
        assert storage.query("SELECT count() AS n FROM task_end_dedup") == [{"n": VALID}]
        assert storage.query("SELECT count() AS n FROM task_end_dedup WHERE app_id = 'app-0066'") == [{"n": 0}]
        assert storage.query("SELECT event_type FROM raw_events_dedup") == [{"event_type": "gpu_kernel_end"}]
    finally:
        storage.close()


@pytest.mark.parametrize("engine", ["chdb", "server"])
def test_a_refused_insert_is_retried_and_never_counted(
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    engine: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    if engine == "chdb":
        url = f"chdb://{tmp_path / 'chdb'}"
        refuse, allow = (
            "ALTER TABLE task_end ADD CONSTRAINT refuse_all CHECK seq < 0",
            "ALTER TABLE task_end DROP CONSTRAINT refuse_all",
        )
    else:
        server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
        database = random_database()
        request.addfinalizer(lambda: drop_database(server, database))
        url = server.url(database)
        # every row's value above the narrowed column: it is not the data, so nothing is dead-lettered either
        refuse, allow = (
            "ALTER TABLE task_end MODIFY COLUMN deserialize_time_ms UInt8",
            "ALTER TABLE task_end MODIFY COLUMN deserialize_time_ms UInt64",
        )
    settings = settings_for(bootstrap, topic, url, retry_backoff_max_seconds=1.0, max_insert_attempts=2)
    storage = open_storage(settings.clickhouse.target())
    storage.ensure_schema()
    storage.command(refuse)
    storage.close()
    values = [task_end(5, seq, deserialize_time_ms=1000) for seq in range(1, 201)]
    ends = produce(bootstrap, topic, ((b"app-0005", v) for v in values))
    with in_process(settings) as collector:
        wait_until(
            lambda: sample(collector, "sparktap_collector_retries_total", target="clickhouse") >= 6,
            120,
            "six refused inserts",
            interval=0.1,
        )
        assert sample(collector, "sparktap_collector_consumed_messages_total") == 200
        assert sample(collector, "sparktap_collector_inserted_rows_total") == 0
        assert sample(collector, "sparktap_collector_dead_letters_total") == 0
        assert sample(collector, "sparktap_collector_storage_up") == 0
        assert committed(bootstrap, settings.kafka.group_id, topic, [0]) == {0: -1001}  # nothing committed
        assert collector.storage is not None
        collector.storage.command(allow)  # the cause fixed: the same rows go in
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)
        assert sample(collector, "sparktap_collector_inserted_rows_total") == 200
        assert sample(collector, "sparktap_collector_dead_letters_total") == 0
        assert collector.storage.query("SELECT count() AS n FROM task_end_dedup") == [{"n": 200}]
        assert collector.storage.query("SELECT count() AS n FROM task_end") == [{"n": 200}]  # inserted once


def test_rows_refused_again_and_again_are_dead_lettered_after_max_attempts(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A permanent refusal that is not a data error (a CHECK constraint): retried max_insert_attempts times, then the
    rows are tried apart and only those refused on their own go to the DLQ; the pipeline does not stay stuck."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    settings = settings_for(
        bootstrap, topic, f"chdb://{tmp_path / 'chdb'}", retry_backoff_max_seconds=0.5, max_insert_attempts=3
    )
    storage = open_storage(settings.clickhouse.target())
    storage.ensure_schema()
    storage.command("ALTER TABLE task_end ADD CONSTRAINT small_deserialize CHECK deserialize_time_ms < 100")
    storage.close()
    refused = {17, 42, 43}
    values = [task_end(8, seq, deserialize_time_ms=1000 if seq in refused else 5) for seq in range(1, 101)]
    ends = produce(bootstrap, topic, ((b"app-0008", v) for v in values))
    with in_process(settings) as collector:
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=120)
        assert sample(collector, "sparktap_collector_retries_total", target="clickhouse") == 2  # attempts 1 and 2
        assert sample(collector, "sparktap_collector_dead_letters_total", reason="rejected_by_clickhouse") == 3
        assert sample(collector, "sparktap_collector_inserted_rows_total") == 97
        assert collector.storage is not None
        seqs = [r["seq"] for r in collector.storage.query("SELECT seq FROM task_end_dedup ORDER BY seq")]
        assert seqs == [s for s in range(1, 101) if s not in refused]
    records = consume_all(bootstrap, f"{topic}.dlq", 3, timeout=30)
    assert sorted(r.value for r in records) == sorted(values[s - 1] for s in refused)
    assert all(dict(r.headers)[HEADER_REASON].startswith(b"rejected by ClickHouse") for r in records)


def test_a_frozen_or_stopped_server_is_reported_at_once_in_json_lines(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A frozen server: the insert blocks until the driver's 30 s timeout, yet within ~10 s /healthz says degraded
    with the reason and a warning is logged. A stopped server: clickhouse-driver's "Failed to connect" warnings
    (with tracebacks) arrive as JSON lines like everything else."""
    from tests.support.services.clickhouse import ClickHouseServerProcess, find_server_binary

    if find_server_binary() is None:
        pytest.skip("needs clickhouse-server")
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    with ClickHouseServerProcess(tmp_path / "ch", startup_timeout=60) as server:
        settings = settings_for(bootstrap, topic, server.url(random_database()), retry_backoff_max_seconds=1.0)
        process = CollectorProcess(settings, tmp_path / "collector.log").start()
        try:
            process.wait_metric("sparktap_collector_assigned_partitions", lambda v: v == 1, timeout=120)
            produce(bootstrap, topic, ((b"app-0009", task_end(9, s)) for s in range(1, 101)))
            process.wait_metric("sparktap_collector_inserted_rows_total", lambda v: v == 100, timeout=60)
            assert process.healthz()[1]["status"] == "ok"
            with server.paused():
                frozen_at = time.monotonic()
                produce(bootstrap, topic, ((b"app-0009", task_end(9, s)) for s in range(101, 151)))
                code, body = wait_until(
                    lambda: (lambda h: h if h[1]["reason"] else None)(process.healthz()),
                    25,
                    "/healthz giving the reason",
                )
                assert time.monotonic() - frozen_at < 25  # before the driver's 30 s receive timeout
                assert (code, body["status"]) == (200, "degraded")
                assert body["reason"].startswith("no insert into ClickHouse succeeded for ")
                assert body["pending_messages"] == 50
                warned = wait_until(
                    lambda: [
                        e
                        for e in process.log_entries()
                        if e["msg"] == "no insert into ClickHouse succeeded while messages wait"
                    ],
                    5,
                    "the watchdog's warning",
                )  # it looks once a second
                assert time.monotonic() - frozen_at < 25
                assert warned[0]["level"] == "warning" and warned[0]["pending_messages"] == 50
            server.stop()  # now connections are refused: the driver logs its tracebacks
            # rows to insert while it is stopped (the frozen batch may have gone in as the server resumed: then
            # nothing else would make the collector connect)
            produce(bootstrap, topic, ((b"app-0009", task_end(9, s)) for s in range(151, 201)))
            wait_until(
                lambda: any(e["msg"].startswith("Failed to connect") for e in process.log_entries()),
                60,
                "clickhouse-driver's own warning in the log",
            )
            server.start()
            process.wait_metric("sparktap_collector_inserted_rows_total", lambda v: v == 200, timeout=120)
            assert process.healthz()[1]["status"] == "ok"
            wait_until(
                lambda: any(e["msg"] == "inserts into ClickHouse succeed again" for e in process.log_entries()),
                5,
                "the watchdog's all-clear",
            )
            assert process.terminate(timeout=60) == 0
        finally:
            process.close()
    lines = (tmp_path / "collector.log").read_text().splitlines()
    entries = [orjson.loads(line) for line in lines]  # every line one JSON object: this raises otherwise
    failed = [e for e in entries if e["logger"] == "clickhouse_driver.connection" and "Failed to connect" in e["msg"]]
    assert failed and all(e["exception"].startswith("Traceback") for e in failed)  # the traceback: one field


def test_the_collectors_store_is_shown_only_once_its_schema_exists(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A collector started while clickhouse-server is down waits it out and shows no store (``Collector.storage``
    is None, though its client exists); once the server is back, the store it shows already holds the database and
    the tables: a reader never meets "database doesn't exist"."""
    from tests.support.services.clickhouse import ClickHouseServerProcess, find_server_binary

    if find_server_binary() is None:
        pytest.skip("needs clickhouse-server")
    topic = kafka_topic(partitions=1)
    with ClickHouseServerProcess(tmp_path / "ch", startup_timeout=60) as server:
        database = random_database()
        settings = settings_for(
            kafka_broker.bootstrap_servers, topic, server.url(database), retry_backoff_max_seconds=0.5
        )
        server.stop()
        with in_process(settings) as collector:
            wait_until(
                lambda: sample(collector, "sparktap_collector_retries_total", target="clickhouse") >= 2,
                60,
                "two failed attempts to create the schema",
            )
            assert (collector.health.phase, collector.health.storage_up) == ("opening storage", False)
            assert collector.storage is None
            server.start()
            storage = wait_until(lambda: collector.storage, 120, "the store once the server is back")
            assert storage.database == database
            assert storage.query("SELECT count() AS n FROM task_end_dedup") == [{"n": 0}]


def test_a_dead_letter_whose_headers_fill_the_dlq_limit_does_not_hold_the_batch(
    kafka_broker: KafkaService, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The message's own headers are too large for the DLQ topic: truncating the value cannot help, so the dead
    letter is sent with sparktap's headers only, and the batch is committed."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(f"{topic}.dlq", 1, 1, config={"max.message.bytes": "102400"})], operation_timeout=30
    ).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.max.bytes": 1_000_000})
    for seq in range(1, 21):
        producer.produce(topic, key=b"app-0004", value=task_end(4, seq))
        if seq == 10:
            producer.produce(topic, key=b"app-0004", value=b"junk", headers=[("big", b"h" * 200_000)])
    assert producer.flush(60) == 0
    settings = settings_for(bootstrap, topic, f"chdb://{tmp_path / 'chdb'}", retry_backoff_max_seconds=0.5)
    with in_process(settings) as collector:
        wait_committed(bootstrap, settings.kafka.group_id, topic, {0: 21}, timeout=120)
        assert sample(collector, "sparktap_collector_inserted_rows_total") == 20
        assert sample(collector, "sparktap_collector_dead_letters_total", reason="not_json") == 1
    (letter,) = consume_all(bootstrap, f"{topic}.dlq", 1, timeout=30)
    headers = dict(letter.headers)
    assert letter.value == b"junk" and "big" not in headers
    assert headers["sparktap.headers_dropped"] == b"1" and headers[HEADER_ERROR] == b"not_json"
    assert headers[HEADER_REASON].startswith(b"not JSON")


def test_the_streaming_sink_records_a_batch_only_when_chdb_took_its_rows(tmp_path: Path) -> None:
    """The Structured Streaming sink's commit (collector/streaming/ingest.py): a refused insert raises, so Spark
    retries the batch, and its batch id is not in the ledger; once the cause is gone the same batch commits."""
    from sparktap.collector.streaming.ingest import commit_batch, ensure_ledger, is_committed
    from sparktap.schemas.rows import columnizer
    from sparktap.store import StorageError

    storage = open_storage(settings_for("127.0.0.1:1", "t", f"chdb://{tmp_path / 'chdb'}").clickhouse.target())
    try:
        schema = storage.ensure_schema()
        ensure_ledger(storage)
        now = int(time.time() * 1000)
        events = [orjson.loads(task_end(6, seq, event_time_ms=now)) for seq in range(1, 6)]
        columns = columnizer(schema.tables["task_end"])(events)
        storage.command("ALTER TABLE task_end ADD CONSTRAINT refuse_all CHECK seq < 0")
        with pytest.raises(StorageError, match="VIOLATED_CONSTRAINT"):
            commit_batch(storage, "sink-1", 7, {"task_end": columns})
        assert not is_committed(storage, "sink-1", 7)
        assert storage.query("SELECT count() AS n FROM task_end") == [{"n": 0}]
        storage.command("ALTER TABLE task_end DROP CONSTRAINT refuse_all")
        assert commit_batch(storage, "sink-1", 7, {"task_end": columns}).rows == 5
        assert is_committed(storage, "sink-1", 7)
        assert storage.query("SELECT count() AS n FROM task_end") == [{"n": 5}]
    finally:
        storage.close()

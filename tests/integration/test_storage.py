"""Storage on real engines: embedded chDB (ClickHouse 26.x) and the Debian clickhouse-server (18.16)."""

from __future__ import annotations

import datetime as dt
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import SecretStr

from sparktap.schemas import health_rollups
from sparktap.schemas.ddl import DDL_VERSION, RAW_TABLE, table_for
from sparktap.schemas.events import EVENT_TYPES
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event
from sparktap.schemas.rows import RowBuilder, columnizer
from sparktap.store import (
    ChdbStorage,
    ServerStorage,
    Storage,
    StorageError,
    StorageUnavailableError,
    open_storage,
)
from sparktap.store.target import StorageTarget
from tests.fixtures.clickhouse import ClickHouseServer, random_database
from tests.support.services.clickhouse import ClickHouseServerProcess, find_server_binary

pytestmark = pytest.mark.integration

ALL_TABLES = sorted([*EVENT_TYPES, RAW_TABLE])


def _tables(storage: Storage) -> list[str]:
    db = storage.database
    return [r["name"] for r in storage.query(f"SELECT name FROM system.tables WHERE database = '{db}' ORDER BY name")]


def _count(storage: Storage, table: str) -> int:
    return int(storage.query(f"SELECT count() AS n FROM {table}")[0]["n"])


def test_ensure_schema_is_idempotent_and_records_the_version(storage: Storage) -> None:
    first = storage.ensure_schema()
    second = storage.ensure_schema()
    assert first.statements() == second.statements()
    rollups = ["app_rollup", "app_rollup_dedup", "app_rollup_end_mv", "app_rollup_start_mv"]
    rollups += ["run_rollup", "run_rollup_dedup", "run_rollup_end_mv", "run_rollup_stage_mv", "run_rollup_start_mv"]
    rollups += ["stage_rollup", "stage_rollup_dedup", "stage_rollup_mv"]  # schemas/rollups.py
    rollups += ["table_rollup", "table_rollup_dedup", "table_rollup_mv"]
    rollups += ["findings", "findings_dedup"]  # schemas/findings_table.py
    rollups += health_rollups.object_names(storage.schema())  # schemas/health_rollups.py
    expected = sorted(
        [*ALL_TABLES, *(f"{t}_dedup" for t in ALL_TABLES), "schema_migrations", "alert_silences", "alert_silenced"]
        + rollups
    )
    assert _tables(storage) == expected
    assert storage.applied_versions() == [DDL_VERSION]
    assert _count(storage, "schema_migrations") == 1
    (row,) = storage.query("SELECT version, applied_at FROM schema_migrations")
    assert row["version"] == DDL_VERSION
    assert abs((dt.datetime.now(dt.UTC) - row["applied_at"]).total_seconds()) < 300


def test_every_event_type_round_trips(storage: Storage) -> None:
    storage.ensure_schema()
    builder = RowBuilder(storage.version())
    for seq, event_type in enumerate(EVENT_TYPES, start=1):
        table, row = builder.build(example_event(event_type, seq=seq).model_dump())
        assert table == event_type
        assert storage.insert(table, [row]) == 1
        assert storage.query(f"SELECT * FROM {table}") == [row], event_type
        (deduplicated,) = storage.query(f"SELECT * FROM {table}_dedup")
        assert {name: deduplicated[name] for name in row} == row
        assert "event_time" in deduplicated  # the view adds the derived time columns


def test_columnar_insert_round_trips(storage: Storage) -> None:
    storage.ensure_schema()
    version = storage.version()
    for event_type in EVENT_TYPES:
        table = table_for(event_type, version)
        events = [example_event(event_type, seq=s).model_dump() for s in (1, 2, 3)]
        columns = columnizer(table)(events)
        assert storage.insert_columns(event_type, columns) == 3
        rows = storage.query(f"SELECT * FROM {event_type} ORDER BY seq")
        assert {name: [r[name] for r in rows] for name in columns} == columns, event_type


def test_derived_time_columns(storage: Storage) -> None:
    storage.ensure_schema()
    event = example_event("task_end").model_dump()
    storage.insert("task_end", [RowBuilder(storage.version()).build(event)[1]])
    (row,) = storage.query("SELECT event_time, launch_time, finish_time, emitted_at FROM task_end_dedup")
    modern = storage.version() >= (20, 5)

    def expect(ms: int) -> dt.datetime:
        value = dt.datetime.fromtimestamp(ms / 1000 if modern else ms // 1000, dt.UTC)
        return value

    assert row["event_time"] == expect(event["event_time_ms"])
    assert row["launch_time"] == expect(event["launch_time_ms"])
    assert row["finish_time"] == expect(event["finish_time_ms"])
    assert row["emitted_at"] == expect(event["emitted_at_ms"])


def test_duplicates_are_removed_by_the_dedup_view(storage: Storage) -> None:
    storage.ensure_schema()
    table = f"`{storage.database}`.task_end"
    storage.command(f"SYSTEM STOP MERGES {table}")
    builder = RowBuilder(storage.version())
    row = builder.build(example_event("task_end", seq=7).model_dump())[1]
    other = builder.build(example_event("task_end", seq=8).model_dump())[1]
    storage.insert("task_end", [row, other])
    storage.insert("task_end", [row])  # redelivered after a crash: a second part
    assert _count(storage, "task_end") == 3
    assert _count(storage, "task_end_dedup") == 2
    assert [r["seq"] for r in storage.query("SELECT seq FROM task_end_dedup ORDER BY seq")] == [7, 8]
    storage.command(f"SYSTEM START MERGES {table}")
    storage.command(f"OPTIMIZE TABLE {table} FINAL")
    assert _count(storage, "task_end") == 2


def test_unknown_event_type_lands_in_the_raw_table(storage: Storage) -> None:
    storage.ensure_schema()
    future = {**example_event("job_end", seq=42).model_dump(), "event_type": "gpu_kernel", "kernel": "gemm"}
    table, row = RowBuilder(storage.version()).build(future)
    assert table == RAW_TABLE
    storage.insert(table, [row])
    (back,) = storage.query("SELECT event_type, seq, cluster, payload FROM raw_events_dedup")
    assert back["event_type"] == "gpu_kernel"
    assert back["seq"] == 42
    assert back["cluster"] == "prod-eu"
    assert orjson.loads(back["payload"]) == future


def test_migration_adds_missing_columns_and_refreshes_the_view(storage: Storage) -> None:
    storage.ensure_schema()
    storage.command(f"ALTER TABLE `{storage.database}`.task_end DROP COLUMN peak_execution_memory")
    storage.command(f"DROP TABLE `{storage.database}`.task_end_dedup")
    storage.command(
        f"CREATE VIEW `{storage.database}`.task_end_dedup AS SELECT * FROM `{storage.database}`.task_end FINAL"
    )
    storage.ensure_schema()
    row = RowBuilder(storage.version()).build(example_event("task_end", peak_execution_memory=77).model_dump())[1]
    storage.insert("task_end", [row])
    (back,) = storage.query("SELECT peak_execution_memory, event_time FROM task_end_dedup")
    assert back["peak_execution_memory"] == 77


def test_errors_keep_code_and_name_and_are_permanent(storage: Storage) -> None:
    storage.ensure_schema()
    with pytest.raises(StorageError) as unknown:
        storage.query("SELECT * FROM no_such_table")
    assert not isinstance(unknown.value, StorageUnavailableError)
    assert unknown.value.code == 60
    assert unknown.value.name == "UNKNOWN_TABLE"
    assert "Code 60 UNKNOWN_TABLE" in str(unknown.value)
    with pytest.raises(StorageError) as syntax:
        storage.command("SELEC 1")
    assert (syntax.value.code, syntax.value.name, syntax.value.retryable) == (62, "SYNTAX_ERROR", False)
    with pytest.raises(StorageError, match="no_such_column|NO_SUCH_COLUMN|Code 16"):
        storage.insert("task_end", [{"no_such_column": 1}])


def test_retention_change_is_applied(storage: Storage) -> None:
    storage.ensure_schema(retention_days=30)
    storage.ensure_schema(retention_days=7)
    (row,) = storage.query(
        f"SELECT engine_full FROM system.tables WHERE database = '{storage.database}' AND name = 'task_end'"
    )
    if storage.version() >= (20, 5):
        assert "toIntervalDay(7)" in row["engine_full"]
    else:
        assert "TTL" not in row["engine_full"]


# ------------------------------------------------------------------------------------------------ chDB only


def _task_events(n: int, seed: int = 1) -> list[dict[str, Any]]:
    """task_end events shaped like a real job: map stages (input, shuffle write), reduce stages (shuffle read)."""
    rnd = random.Random(seed)  # noqa: S311 - test data, not cryptography
    out: list[dict[str, Any]] = []
    t, seq, stage = EXAMPLE_TIME_MS, 1, 0
    while len(out) < n:
        ntasks, is_map = min(rnd.choice([200, 1000, 2000]), n - len(out)), stage % 2 == 0
        base = rnd.choice([300, 800, 2000, 6000])
        for i in range(ntasks):
            dur = max(5, int(rnd.lognormvariate(0, 0.35) * base))
            launch = t + (i // 16) * base + rnd.randint(0, 40)
            inp = (128 << 20) if is_map else 0
            srb = 0 if is_map else int(rnd.lognormvariate(0, 0.3) * (40 << 20))
            swb = int(inp * 0.2 * rnd.uniform(0.9, 1.1))
            out.append(example_event(
                "task_end", seq=seq, stage_id=stage, task_id=len(out), index=i, executor_id=str(i % 16 + 1),
                host=f"10.0.0.{i % 16 + 1}", event_time_ms=launch + dur, emitted_at_ms=launch + dur + rnd.randint(0, 3),
                launch_time_ms=launch, finish_time_ms=launch + dur, duration_ms=dur, run_time_ms=dur - 2,
                cpu_time_ns=int(dur * rnd.uniform(0.6, 0.9)) * 1_000_000 + rnd.randint(0, 999_999),
                gc_time_ms=int(dur * rnd.uniform(0, 0.05)), deserialize_time_ms=rnd.randint(1, 8),
                result_size_bytes=2400 + rnd.randint(0, 60), input_bytes=inp, input_records=inp // 100,
                shuffle_local_blocks=0 if is_map else 25, shuffle_remote_blocks=0 if is_map else 175,
                shuffle_local_bytes=srb // 8, shuffle_remote_bytes=srb - srb // 8, shuffle_records_read=srb // 100,
                shuffle_fetch_wait_ms=0 if is_map else rnd.randint(0, 20), shuffle_write_bytes=swb,
                shuffle_write_records=swb // 100, shuffle_write_time_ns=rnd.randint(10**6, 10**7) if is_map else 0,
                peak_execution_memory=rnd.choice([0, 64, 128, 256]) << 20,
            ).model_dump())  # fmt: skip
            seq += 1
        t, stage, seq = t + (ntasks // 16 + 2) * base, stage + 1, seq + rnd.randint(2, 6)
    return out


def test_task_end_rows_are_compact_after_merges(chdb_storage: ChdbStorage) -> None:
    chdb_storage.ensure_schema()
    events = _task_events(100_000)
    columns = columnizer(table_for("task_end", chdb_storage.version()))
    for start in range(0, len(events), 10_000):
        chdb_storage.insert_columns("task_end", columns(events[start : start + 10_000]))
    chdb_storage.command(f"OPTIMIZE TABLE `{chdb_storage.database}`.task_end FINAL")
    (row,) = chdb_storage.query(
        "SELECT sum(rows) AS rows, sum(bytes_on_disk) AS bytes FROM system.parts "
        f"WHERE database = '{chdb_storage.database}' AND table = 'task_end' AND active"
    )
    assert row["rows"] == 100_000
    assert row["bytes"] / row["rows"] < 40


def test_a_second_process_gets_a_clear_error(chdb_storage: ChdbStorage) -> None:
    chdb_storage.ensure_schema()
    code = (
        "import sys\n"
        "from sparktap.store import open_storage, StorageError\n"
        "from sparktap.store.target import parse_storage_url\n"
        "try:\n"
        f"    open_storage(parse_storage_url({('chdb://' + str(chdb_storage.path))!r}))\n"
        "except StorageError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 3, result.stderr[-2000:]
    message = result.stdout.strip().splitlines()[-1]
    assert message.startswith(f'cannot open chDB store path="{chdb_storage.path}": another process holds it')
    assert "one process only" in message


def test_a_refused_insert_raises_and_stores_nothing(chdb_storage: ChdbStorage) -> None:
    """chDB's streaming insert reported a block refused at write time as written; the insert must raise instead."""
    chdb_storage.ensure_schema()
    builder = RowBuilder(chdb_storage.version())
    month = 31 * 86_400_000
    rows = [
        builder.build(example_event("task_end", seq=i, event_time_ms=1_400_000_000_000 + i * month).model_dump())[1]
        for i in range(1, 151)
    ]  # 150 months: one partition each
    with pytest.raises(StorageError) as info:
        chdb_storage.insert("task_end", rows)
    assert info.value.code == 252
    assert "Too many partitions for single INSERT block" in str(info.value)
    assert _count(chdb_storage, "task_end") == 0
    now = int(time.time() * 1000)  # within the retention: the TTL would drop older rows on insert
    rows = [builder.build(example_event("task_end", seq=i, event_time_ms=now).model_dump())[1] for i in range(1, 6)]
    chdb_storage.command("ALTER TABLE task_end ADD CONSTRAINT few_tasks CHECK task_id < 3")
    with pytest.raises(StorageError) as info:
        chdb_storage.insert("task_end", rows)
    assert info.value.name == "VIOLATED_CONSTRAINT"
    assert _count(chdb_storage, "task_end") == 0
    chdb_storage.command("ALTER TABLE task_end DROP CONSTRAINT few_tasks")
    assert chdb_storage.insert("task_end", rows) == 5
    assert _count(chdb_storage, "task_end") == 5


def test_server_messages_are_parsed() -> None:
    from sparktap.store.errors import parse_server_message, scrub

    assert parse_server_message("Streaming insert append failed: Code: 53. DB::Exception: Bad. (TYPE_MISMATCH)") == (
        53,
        "TYPE_MISMATCH",
        "Bad",
    )
    assert parse_server_message("DB::Exception: Database x doesn't exist. Stack trace:\n\n0. /lib/x.so", 81) == (
        81,
        "UNKNOWN_DATABASE",
        "Database x doesn't exist",
    )
    assert parse_server_message("Code: 210. Connection refused (127.0.0.1:1)") == (
        210,
        "NETWORK_ERROR",
        "Connection refused (127.0.0.1:1)",
    )
    assert scrub("user:hunter2@host hunter2", ["hunter2", ""]) == "user:***@host ***"


# ------------------------------------------------------------------------------------------------ server only


def test_wrong_password_is_a_permanent_error_without_the_password(clickhouse_server: ClickHouseServer) -> None:
    target = clickhouse_server.target("default").model_copy(update={"password": SecretStr("Wr0ngCanary-7781")})
    storage = open_storage(target, connect_timeout=5)
    with pytest.raises(StorageError) as info:
        storage.query("SELECT 1")
    storage.close()
    assert not info.value.retryable
    assert info.value.code in (193, 516)
    assert str(info.value).startswith(f'ClickHouse refused the login url="{target.redacted}" user="{target.user}"')
    assert "Wr0ngCanary-7781" not in str(info.value)
    assert "check the user and password in SPARKTAP_CLICKHOUSE__URL" in str(info.value)


def test_closing_waits_for_a_query_under_way_in_another_thread(clickhouse_server: ClickHouseServer) -> None:
    """``sparktap alert`` closes the store while its follower thread may be mid-query (stop 30's CI: the close cut
    the connection under the query, which read EOF, and the close itself raised)."""
    import threading

    from sparktap.local.ports import wait_until

    storage = open_storage(clickhouse_server.target("default"), connect_timeout=5)
    watcher = open_storage(clickhouse_server.target("default"), connect_timeout=5)
    marker = f"close-race-{time.monotonic_ns()}"
    outcome: list[Any] = []

    def slow_query() -> None:
        try:
            outcome.append(storage.query(f"SELECT sleep(2) AS slept, '{marker}' AS marker"))
        except Exception as exc:  # the assertion below names it
            outcome.append(exc)

    thread = threading.Thread(target=slow_query)
    thread.start()
    try:
        wait_until(
            lambda: (
                watcher.query(
                    f"SELECT count() AS n FROM system.processes WHERE query LIKE '%{marker}%' "
                    "AND query NOT LIKE '%system.processes%'"
                )[0]["n"]
                == 1
            ),
            10,
            "the slow query to run on the server",
        )
        storage.close()  # waits for the query; raises nothing
    finally:
        thread.join(10)
        watcher.close()
    assert outcome == [[{"slept": 0, "marker": marker}]]
    with pytest.raises(StorageError, match="is closed"):
        storage.query("SELECT 1")
    storage.close()  # a second close is a no-op


def test_unreachable_server_is_retryable(clickhouse_server: ClickHouseServer) -> None:
    from sparktap.local.ports import free_port

    port = free_port()
    target = clickhouse_server.target("sparktap").model_copy(
        update={"port": port, "password": SecretStr("S3cretCanary")}
    )
    storage = open_storage(target, connect_timeout=2)
    with pytest.raises(StorageUnavailableError) as info:
        storage.ensure_schema()
    message = str(info.value)
    assert message.startswith(f'cannot reach ClickHouse url="clickhouse://{target.user}:***@127.0.0.1:{port}/sparktap"')
    assert "Code 210 NETWORK_ERROR" in message
    assert message.endswith("check SPARKTAP_CLICKHOUSE__URL or that the server is up")
    assert "S3cretCanary" not in message
    assert storage.ping() is False


def test_tls_and_credentials_reach_the_driver() -> None:
    target = StorageTarget(kind="clickhouse", host="ch.example", port=9440, user="u", secure=True, verify=False)
    storage = open_storage(target.model_copy(update={"password": SecretStr("pw")}), connect_timeout=1)
    assert isinstance(storage, ServerStorage)
    connection = storage._client.connection
    assert list(connection.hosts) == [("ch.example", 9440)]
    assert (connection.user, connection.password) == ("u", "pw")
    assert connection.secure_socket is True
    assert connection.verify_cert is False
    storage.close()


@pytest.mark.skipif(find_server_binary() is None, reason="needs the clickhouse-server binary")
def test_server_outage_stop_start_and_pause(tmp_path: Path) -> None:
    """The collector's outage story: stopped -> retryable error; back on the same ports with the data; frozen ->
    retryable error after the receive timeout; thawed -> works, on the same Storage object."""
    with ClickHouseServerProcess(tmp_path / "ch", startup_timeout=60) as server:
        port = server.tcp_port
        storage = open_storage(server.target(random_database()), connect_timeout=2, send_receive_timeout=3)
        storage.ensure_schema()
        row = RowBuilder(storage.version()).build(example_event("task_end").model_dump())[1]
        storage.insert("task_end", [row])
        server.stop()
        assert not server.running
        with pytest.raises(StorageUnavailableError):
            storage.insert("task_end", [row])
        server.start()
        assert server.tcp_port == port
        assert _count(storage, "task_end") == 1  # data kept, connection re-established
        with server.paused():
            started = time.monotonic()
            with pytest.raises(StorageUnavailableError, match="cannot reach ClickHouse"):
                storage.query("SELECT count() FROM task_end")
            assert time.monotonic() - started < 30
        assert _count(storage, "task_end_dedup") == 1
        storage.close()
    assert not server.running
    assert not (tmp_path / "ch").joinpath("users.xml").read_text().count(server.password.get_secret_value())


def test_a_server_that_dies_at_startup_is_reported_with_its_log(tmp_path: Path) -> None:
    from sparktap.errors import ServiceError

    server = ClickHouseServerProcess(tmp_path / "ch", binary="false", startup_timeout=10)
    with pytest.raises(ServiceError, match=r"clickhouse-server exited with code 1 during startup; log dir="):
        server.start()
    server.close()
    missing = ClickHouseServerProcess(tmp_path / "ch2", binary="no-such-clickhouse-binary")
    with pytest.raises(ServiceError, match='cannot start ClickHouse binary="no-such-clickhouse-binary": not found'):
        missing.start()

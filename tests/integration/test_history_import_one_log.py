"""``sparktap import`` on one plain event log (docs/import.md), a real Spark 4 application's, run as its own process
into the Debian ClickHouse server: an in-progress log imported, grown and imported again; bad input (a truncated log,
a line that is not JSON, an unknown codec, an unreadable file) gets one line each and the rest is imported;
``--follow`` imports a log that appears in the watched directory, its metrics and health endpoints say so; the log in
Spark 2.4's layout imports with its source's counts and sums; fifty copies go in one insert per table, and a failed
checkpoint write loses and doubles nothing. Each copy is compared with the log's own import, which the module's store
holds. The applications compared with Spark's History Server, and ``--engine spark``: test_history_import.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparktap.local.ports import free_port, wait_until
from sparktap.schemas.ddl import EVENT_TYPES
from sparktap.store import ServerStorage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.history import ROOT, copy_as, eventlog_conf, follower_metrics, sparktap_import
from tests.fixtures.listener import clear_listener_properties
from tests.fixtures.spark import SparkSessions
from tests.support.history_import import TABLES, Store, checkpointed, open_store

pytestmark = pytest.mark.timeout(1200)  # the timeout these tests had in test_history_import.py


@dataclass
class Logs:
    hs_dir: Path
    apps: dict[str, str]
    """run name -> application id: "none", the plain log"""


@pytest.fixture(scope="module")
def logs(spark_sessions: SparkSessions, tmp_path_factory: pytest.TempPathFactory) -> Logs:
    """The plain log of test_history_import.py's applications (the ``small`` workload, no compression), on its own:
    every test here copies that one."""
    hs_dir = tmp_path_factory.mktemp("eventlogs")
    from tests.apps.history_logs import small

    clear_listener_properties()
    try:
        spark = spark_sessions.fresh({**eventlog_conf(hs_dir, "none"), "spark.app.name": "history-none"})
        small(spark)
        apps = {"none": spark.sparkContext.applicationId}
    finally:
        spark_sessions.stop()
    return Logs(hs_dir, apps)


@pytest.fixture(scope="module")
def store(logs: Logs, clickhouse_server: ClickHouseServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """The module's database, holding the plain log as imported: the copies' counts are compared with its rows."""
    with open_store(clickhouse_server) as store:
        ck = str(tmp_path_factory.mktemp("import") / "checkpoint.json")
        log = str(logs.hs_dir / logs.apps["none"])
        first = sparktap_import(log, "--storage-url", store.url, "--checkpoint", ck, "--cluster", "imp")
        assert first.returncode == 0, first.stderr[-3000:]
        yield store


def test_an_in_progress_log_imported_grown_and_imported_again_has_exact_counts(
    logs: Logs, store: Store, tmp_path: Path
) -> None:
    whole = logs.hs_dir / logs.apps["none"]
    app = logs.apps["none"] + "-grown"
    data = whole.read_bytes().replace(logs.apps["none"].encode(), app.encode())
    lines = data.splitlines(keepends=True)
    growing = tmp_path / f"{app}.inprogress"
    half = len(lines) // 2
    growing.write_bytes(b"".join(lines[:half]) + lines[half][:20])  # a half-written line at the end
    ck = str(tmp_path / "checkpoint.json")
    first = sparktap_import(str(growing), "--storage-url", store.url, "--checkpoint", ck, "--cluster", "imp")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "stopped early" not in first.stdout  # a partial last line is how an in-progress log ends
    partial = store.count("task_end", app)
    growing.write_bytes(data)
    os.utime(growing, ns=(time.time_ns(), time.time_ns() + 1_000_000_000))
    second = sparktap_import(str(growing), "--storage-url", store.url, "--checkpoint", ck, "--cluster", "imp")
    assert second.returncode == 0, second.stdout + second.stderr
    original = logs.apps["none"]
    for table in TABLES:
        assert store.count(table, app) == store.count(table, original), table
        raw = int(store.rows(f"SELECT count() AS n FROM {table} WHERE app_id = '{app}'")[0]["n"])
        assert raw == store.count(table, app), table  # the second import sent only the events past the first
    assert partial < store.count("task_end", app)


def test_bad_input_gets_one_clear_line_each_and_the_rest_is_imported(logs: Logs, store: Store, tmp_path: Path) -> None:
    source = (logs.hs_dir / logs.apps["none"]).read_bytes()
    bad = tmp_path / "bad"
    bad.mkdir()
    truncated = source.replace(logs.apps["none"].encode(), b"local-truncated")
    # Cut mid-line just after half of the task ends, so some tasks come before the cut and some after it,
    # whatever share of the log's bytes the environment and plan events take.
    log_lines = truncated.splitlines(keepends=True)
    task_ends = [i for i, line in enumerate(log_lines) if b'"Event":"SparkListenerTaskEnd"' in line]
    assert len(task_ends) >= 2, "the application must run at least two tasks"
    keep = task_ends[len(task_ends) // 2 - 1] + 1
    cut = b"".join(log_lines[:keep]) + log_lines[keep][: len(log_lines[keep]) // 2].rstrip(b"\n")
    (bad / "local-truncated").write_bytes(cut)
    garbage_lines = source.replace(logs.apps["none"].encode(), b"local-garbage").splitlines(keepends=True)
    garbage_lines.insert(9, b"this is not json\n")
    (bad / "local-garbage").write_bytes(b"".join(garbage_lines))
    (bad / "local-codec.brotli").write_bytes(b"whatever\n")
    unreadable = bad / "local-unreadable"
    if os.geteuid() == 0:  # root reads any file: a dangling link is what it cannot read
        unreadable.symlink_to(tmp_path / "gone")
        unreadable_reason = "cannot read it: No such file or directory"
    else:
        unreadable.write_bytes(source)
        unreadable.chmod(0)
        unreadable_reason = 'file="local-unreadable" is not readable (permissions)'
    good = bad / "local-good"
    good.write_bytes(source.replace(logs.apps["none"].encode(), b"local-good"))
    proc = sparktap_import(str(bad), "--storage-url", store.url, "--checkpoint", str(tmp_path / "ck.json"))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines, proc.stderr
    assert lines[0].startswith("imported 3 logs: 3 applications, "), lines
    complete = cut.count(b"\n")
    expected = [
        f'stopped early: {os.path.relpath(bad / "local-garbage")}: line 10 of file="local-garbage" is not a '
        "Spark event (malformed JSON or an unknown event layout): the events before it were imported",
        f"stopped early: {os.path.relpath(bad / 'local-truncated')}: line {complete + 1} of "
        'file="local-truncated" is incomplete (the log ends mid-line: truncated, or still being written)',
        f'skipped: {os.path.relpath(bad / "local-codec.brotli")}: unknown compression codec="brotli" in the file '
        "name (Spark writes lz4, lzf, snappy or zstd, or no extension for a plain log)",
        f"skipped: {os.path.relpath(unreadable)}: {unreadable_reason}",
    ]
    assert [line for line in lines if line.startswith(("stopped early", "skipped"))] == expected
    assert "Traceback" not in proc.stderr
    assert store.count("task_end", "local-good") == len(task_ends)
    assert store.count("task_end", "local-truncated") == len(task_ends) // 2  # the ones before the cut
    assert store.count("app_start", "local-garbage") == 1
    assert store.count("job_start", "local-garbage") == 0  # line 10 comes before the first job


def test_follow_imports_a_log_that_appears_in_the_watched_directory(logs: Logs, store: Store, tmp_path: Path) -> None:
    watched = tmp_path / "watched"
    watched.mkdir()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparktap", "import", str(watched), "--follow", "--interval", "0.5",
         "--storage-url", store.url, "--checkpoint", str(tmp_path / "ck.json"), "--cluster", "imp",
         "--metrics-port", str(port), "--metrics-host", "127.0.0.1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    original = logs.apps["none"]
    app = "local-followed"
    try:
        staged = tmp_path / app
        staged.write_bytes((logs.hs_dir / original).read_bytes().replace(original.encode(), app.encode()))
        staged.rename(watched / app)  # appears whole, as a finished log is renamed from .inprogress
        wait_until(
            lambda: (
                store.count("app_end", app) == 1 and store.count("task_end", app) == store.count("task_end", original)
            ),
            180,
            "the followed directory's new log is imported",
            interval=0.5,
        )
        # the follower's endpoints (the Helm chart's probes and scrape target): one log, its events, no lag
        wait_until(lambda: follower_metrics(port).get("sparktap_import_cycles_total", 0) >= 2, 60, "a cycle after it")
        metrics = follower_metrics(port)
        assert metrics["sparktap_import_logs_total"] == 1
        assert metrics['sparktap_import_events_total{family="task_end"}'] == store.count("task_end", original)
        assert metrics['sparktap_import_events_total{family="app_start"}'] == 1
        assert metrics["sparktap_import_lag_seconds"] == 0
        assert metrics.get('sparktap_import_errors_total{kind="skipped"}', 0) == 0
        assert metrics.get('sparktap_import_errors_total{kind="cycle"}', 0) == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:  # noqa: S310
            health = json.loads(resp.read())
            assert resp.status == 200
        assert health["last_error"] is None and health["cycles"] >= 2
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == "stopped following", out
    assert [line for line in out.splitlines() if line.startswith("imported")] == [
        line for line in out.splitlines() if line.startswith("imported 1 logs: 1 applications, ")
    ]
    for table in TABLES:
        assert store.count(table, app) == store.count(table, original), table


def test_a_spark_24_log_imports_with_the_counts_and_sums_of_its_source_application(
    logs: Logs, store: Store, tmp_path: Path
) -> None:
    """A Spark 2.4-layout log (tests/fixtures/spark24.py: a real Spark 4 log with what 2.4 did not write taken out)
    imports with the jobs, stages, tasks and SQL executions of its source, the same task metric sums (but the peak
    execution memory, which 2.4 did not log), and its own Spark version."""
    from tests.fixtures.spark24 import to_spark24

    source = logs.apps["none"]
    app = "local-spark24"
    log = tmp_path / app
    log.write_bytes(to_spark24((logs.hs_dir / source).read_bytes(), source, app))
    assert log.read_bytes().startswith(b'{"Event":"SparkListenerLogStart","Spark Version":"2.4.8"}\n')
    assert b"Resource Profile" not in log.read_bytes() and b"Peak Execution Memory" not in log.read_bytes()
    proc = sparktap_import(str(log), "--storage-url", store.url, "--checkpoint", str(tmp_path / "ck.json"),
                           "--cluster", "imp")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("imported 1 logs: 1 applications, "), proc.stdout
    for table in TABLES:
        assert store.count(table, app) == store.count(table, source) > 0, table
    sums = (
        "sum(run_time_ms) AS run, sum(cpu_time_ns) AS cpu, sum(shuffle_local_bytes + shuffle_remote_bytes) AS rd, "
        "sum(shuffle_write_bytes) AS wr, sum(result_size_bytes) AS res, sum(peak_execution_memory) AS peak"
    )
    ours = store.rows(f"SELECT {sums} FROM task_end_dedup WHERE app_id = '{app}'")[0]
    theirs = store.rows(f"SELECT {sums} FROM task_end_dedup WHERE app_id = '{source}'")[0]
    assert int(ours.pop("peak")) == 0 and int(theirs.pop("peak")) > 0
    assert ours == theirs and int(ours["rd"]) > 0
    (start,) = store.rows(f"SELECT spark_version FROM app_start_dedup WHERE app_id = '{app}'")
    assert start["spark_version"] == "2.4.8"


def test_fifty_small_logs_go_in_one_insert_per_table_and_a_failed_checkpoint_write_loses_and_doubles_nothing(
    logs: Logs, store: Store, clickhouse_server: ClickHouseServer, tmp_path: Path
) -> None:
    """50 small logs (copies of the plain log, each a new app id) into a fresh database: the local engine delivers
    them in one batch, one insert per table (ClickHouse's own block numbers say so, as does the summary), and
    checkpoints them only after that insert. The checkpoint write is made to fail after the insert (its ``.tmp``
    file is a directory): the run fails with one line and no log is checkpointed; run again, every table holds
    exactly 50 copies of the source's rows, each (app, attempt, seq) once in the deduplicated view and no key a
    second time under another seq."""
    many = tmp_path / "many"
    many.mkdir()
    source = logs.apps["none"]
    apps = [f"{source}-b{i:02d}" for i in range(50)]
    for app in apps:
        copy_as(logs.hs_dir / source, source, app, many)
    database = random_database("sparktap_import_batch")
    target = ServerStorage(clickhouse_server.target(database), connect_timeout=5, send_receive_timeout=60)
    tables = [*EVENT_TYPES, "raw_events"]
    ck = tmp_path / "ck.json"
    command = [str(many), "--storage-url", clickhouse_server.url(database), "--checkpoint", str(ck), "--cluster", "imp"]

    def one(sql: str) -> int:
        return int(target.query(sql)[0]["n"])

    def blocks() -> dict[str, int]:
        """per table, the highest block number of its parts: one per insert (one monthly partition)"""
        rows = target.query(f"SELECT table, max(max_block_number) AS n FROM system.parts WHERE database = "
                            f"'{database}' AND active GROUP BY table")  # fmt: skip
        return {row["table"]: int(row["n"]) for row in rows if row["table"] in tables}

    try:
        per_source = {t: store.count(t, source) for t in tables}
        filled = sorted(t for t, n in per_source.items() if n)
        assert {"task_end", "stage_completed", "sql_start", "app_start"} <= set(filled)
        (ck.parent / "ck.json.tmp").mkdir()  # the checkpoint's atomic write cannot happen
        failed = sparktap_import(*command)
        assert failed.returncode == 2, failed.stdout + failed.stderr
        assert failed.stderr.strip().splitlines() == [
            f'error: cannot write the import checkpoint file="{ck}": Is a directory; the logs delivered since the '
            "last write are sent again on the next run (deduplicated): fix the path or its permissions "
            "(--checkpoint) and run the import again"
        ]
        assert not ck.exists()
        assert blocks() == {t: 1 for t in filled}  # all 50 logs were inserted, one insert per table
        (ck.parent / "ck.json.tmp").rmdir()
        again = sparktap_import(*command)
        assert again.returncode == 0, again.stdout + again.stderr
        out = again.stdout.splitlines()
        assert out[0].startswith("imported 50 logs: 50 applications, "), out
        assert out[2] == f"delivered in 1 batches ({len(filled)} inserts)", out
        assert blocks() == {t: 2 for t in filled}
        assert checkpointed(ck) == sorted(str(p) for p in many.iterdir())
        for table in tables:
            want = 50 * per_source[table]
            assert one(f"SELECT count() AS n FROM {table}_dedup") == want, table
            assert one(f"SELECT uniqExact(app_id, app_attempt, seq) AS n FROM {table}") == want, table
        assert one("SELECT uniqExact(app_id) AS n FROM app_start") == 50
    finally:
        target.close()
        drop_database(clickhouse_server, database)

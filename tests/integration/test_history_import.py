"""``sparktap import`` against Spark's own History Server (docs/import.md; live equals imported: test_history_live.py).

Real applications (Spark 4 in this process, Spark 3.5 as its own driver) write event logs: one per codec, one
rolling log (cut into three ``events_N`` files, as Spark rolls), an AQE skew join and coalesce. They are imported
into ClickHouse; Spark's History Server (``org.apache.spark.deploy.history.HistoryServer`` from the pyspark
installation, on 127.0.0.1) reads the same directory, and its REST API is the oracle: per application the jobs,
stages, tasks and SQL executions; per stage the task counts and sums, and the quantiles of ``taskSummary``.
Spark's quantile (``AppStatusStore.taskSummary``): over the successful tasks sorted by the metric, the value at
index ``min(floor(q * n), n - 1)``; sparktap's stage quantiles use the nearest rank ``ceil(q * n) - 1`` (both are
checked, each against its own definition, on the stored task rows).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparktap.collector.storage import ServerStorage
from sparktap.listener import javabuild
from sparktap.local.ports import free_port, wait_until
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.history import ROOT, eventlog_conf, sparktap_import
from tests.fixtures.listener import (
    clear_listener_properties,
)
from tests.fixtures.spark import SparkSessions
from tests.fixtures.spark_lines import spark_line

pytestmark = pytest.mark.timeout(1200)  # the module's fixtures run 9 Spark applications: slow on a loaded machine

CODECS = ("none", "lz4", "lzf", "snappy", "zstd")


def split_rolling(directory: Path, parts: int) -> None:
    """Cut a rolling log's single events_1 file into ``parts`` files at line boundaries, as Spark rolls them."""
    (first,) = sorted(directory.glob("events_1_*"))
    app = first.name.split("_", 2)[2]
    lines = first.read_bytes().splitlines(keepends=True)
    size = math.ceil(len(lines) / parts)
    first.unlink()
    for i in range(parts):
        (directory / f"events_{i + 1}_{app}").write_bytes(b"".join(lines[i * size : (i + 1) * size]))


@dataclass
class Logs:
    hs_dir: Path
    apps: dict[str, str]
    """run name -> application id"""
    spark35_apps: dict[str, str]
    spark35_dir: Path


@pytest.fixture(scope="module")
def logs(spark_sessions: SparkSessions, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Logs]:
    root = tmp_path_factory.mktemp("eventlogs")
    hs_dir = root / "hs"
    hs_dir.mkdir()
    from tests.apps.history_logs import aqe, small

    apps: dict[str, str] = {}
    clear_listener_properties()
    try:
        for codec in CODECS:
            spark = spark_sessions.fresh({**eventlog_conf(hs_dir, codec), "spark.app.name": f"history-{codec}"})
            small(spark)
            apps[codec] = spark.sparkContext.applicationId
        spark = spark_sessions.fresh({**eventlog_conf(hs_dir, rolling=True), "spark.app.name": "history-aqe"})
        aqe(spark)
        apps["rolling-aqe"] = spark.sparkContext.applicationId
    finally:
        spark_sessions.stop()
    split_rolling(hs_dir / f"eventlog_v2_{apps['rolling-aqe']}", 3)
    # Spark 3.5, as its own driver: a plain and a zstd log
    line = spark_line("3.5")
    spark35_dir = root / "spark35"
    spark35_dir.mkdir()
    spec = {
        "base": {"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
        "runs": [
            {"name": "3.5-none", "conf": eventlog_conf(spark35_dir), "workload": "small"},
            {"name": "3.5-zstd", "conf": eventlog_conf(spark35_dir, "zstd"), "workload": "aqe"},
        ],
    }
    (root / "spec35.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYSPARK_PYTHON": line.python, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_HOME", None)
    if line.java_home:
        env["JAVA_HOME"] = line.java_home
    proc = subprocess.run(
        [line.python, "-m", "tests.apps.history_logs", str(root / "spec35.json"), str(root / "out35.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    spark35_apps = json.loads((root / "out35.json").read_text())
    for path in spark35_dir.iterdir():  # the History Server reads them beside the Spark 4 logs
        path.rename(hs_dir / path.name)
    yield Logs(hs_dir, apps, spark35_apps, spark35_dir)


@dataclass
class Store:
    storage: ServerStorage
    url: str
    database: str

    def rows(self, sql: str) -> list[dict[str, Any]]:
        return self.storage.query(sql)

    def count(self, table: str, app_id: str, where: str = "1") -> int:
        return int(self.rows(f"SELECT count() AS n FROM {table}_dedup WHERE app_id = '{app_id}' AND {where}")[0]["n"])


@pytest.fixture(scope="module")
def store(clickhouse_server: ClickHouseServer) -> Iterator[Store]:
    database = random_database("sparktap_import")
    storage = ServerStorage(clickhouse_server.target(database), connect_timeout=5, send_receive_timeout=60)
    try:
        yield Store(storage, clickhouse_server.url(database), database)
    finally:
        storage.close()
        drop_database(clickhouse_server, database)


@dataclass
class Imported:
    first: subprocess.CompletedProcess[str]
    again: subprocess.CompletedProcess[str]
    spark35: subprocess.CompletedProcess[str]
    counts: dict[str, int]


TABLES = ("job_start", "job_end", "stage_submitted", "stage_completed", "task_end", "sql_start", "sql_end")


def table_counts(store: Store) -> dict[str, int]:
    return {t: int(store.rows(f"SELECT count() AS n FROM {t}_dedup")[0]["n"]) for t in TABLES}


@pytest.fixture(scope="module")
def imported(logs: Logs, store: Store, tmp_path_factory: pytest.TempPathFactory) -> Imported:
    scratch = tmp_path_factory.mktemp("import")
    ck = str(scratch / "checkpoint.json")
    spark4_logs = [str(p) for p in sorted(logs.hs_dir.iterdir()) if not p.name.startswith(".")]
    spark4_logs = [p for p in spark4_logs if not any(a in p for a in logs.spark35_apps.values())]
    first = sparktap_import(*spark4_logs, "--storage-url", store.url, "--checkpoint", ck, "--cluster", "imp")
    assert first.returncode == 0, first.stderr[-3000:]
    line = spark_line("3.5")
    home = subprocess.run(
        [line.python, "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    env = {"SPARK_HOME": home}
    if line.java_home:
        env["JAVA_HOME"] = line.java_home
    spark35_logs = [
        str(logs.hs_dir / p.name)
        for p in sorted(logs.hs_dir.iterdir())
        if any(a in p.name for a in logs.spark35_apps.values()) and not p.name.startswith(".")
    ]
    spark35 = sparktap_import(*spark35_logs, "--storage-url", store.url, "--checkpoint", ck, "--cluster", "imp",
                              env=env)  # fmt: skip
    assert spark35.returncode == 0, spark35.stderr[-3000:]
    counts = table_counts(store)
    again = sparktap_import(str(logs.hs_dir), "--storage-url", store.url, "--checkpoint", ck, "--cluster", "imp")
    return Imported(first, again, spark35, counts)


class HistoryServer:
    def __init__(self, log_dir: Path, scratch: Path) -> None:
        version, jars = javabuild._pyspark_jars() or ("", Path())  # noqa: SLF001
        self.port = free_port()
        self.log = (scratch / "history-server.log").open("wb")
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        self.proc = subprocess.Popen(  # noqa: S603
            ["java", "-Xmx512m", "-cp", f"{jars}/*", f"-Dspark.history.fs.logDirectory={log_dir.as_uri()}",
             f"-Dspark.history.ui.port={self.port}", "-Dspark.history.fs.update.interval=1s",
             "org.apache.spark.deploy.history.HistoryServer"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/{path}", timeout=60) as resp:  # noqa: S310
            return json.loads(resp.read())

    def applications(self) -> set[str]:
        try:
            return {a["id"] for a in self.get("applications")}
        except OSError:
            return set()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def history_server(logs: Logs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HistoryServer]:
    server = HistoryServer(logs.hs_dir, tmp_path_factory.mktemp("hs"))
    try:
        expected = set(logs.apps.values()) | set(logs.spark35_apps.values())
        wait_until(lambda: expected <= server.applications(), 180, "the History Server lists every application")
        yield server
    finally:
        server.close()


def spark_quantile(values: list[int], q: float) -> float:
    """AppStatusStore.taskSummary: index min(floor(q * n), n - 1) of the sorted values."""
    ordered = sorted(values)
    return float(ordered[min(int(q * len(ordered)), len(ordered) - 1)])


def nearest_rank(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


def all_apps(logs: Logs) -> list[str]:
    return sorted([*logs.apps.values(), *logs.spark35_apps.values()])


def test_each_application_matches_the_history_servers_jobs_stages_tasks_and_sql(
    logs: Logs, imported: Imported, store: Store, history_server: HistoryServer
) -> None:
    assert len(all_apps(logs)) == 8
    for app in all_apps(logs):
        jobs = history_server.get(f"applications/{app}/jobs")
        stages = [s for s in history_server.get(f"applications/{app}/stages") if s["status"] != "SKIPPED"]
        sql = history_server.get(f"applications/{app}/sql")
        tasks = sum(s["numCompleteTasks"] + s["numFailedTasks"] + s["numKilledTasks"] for s in stages)
        assert store.count("job_start", app) == len(jobs) > 0, app
        assert store.count("job_end", app) == len(jobs), app
        assert store.count("stage_completed", app) == len(stages), app
        assert store.count("task_end", app) == tasks > 0, app
        assert store.count("sql_start", app) == store.count("sql_end", app) == len(sql) > 0, app
        assert store.count("app_start", app) == store.count("app_end", app) == 1, app


def test_each_stage_matches_the_history_servers_task_counts_sums_and_quantiles(
    logs: Logs, imported: Imported, store: Store, history_server: HistoryServer
) -> None:
    checked = 0
    for app in all_apps(logs):
        ours = {
            (int(r["stage_id"]), int(r["stage_attempt"])): r
            for r in store.rows(f"SELECT * FROM stage_completed_dedup WHERE app_id = '{app}'")
        }
        task_rows: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
        for r in store.rows(
            "SELECT stage_id, stage_attempt, status, duration_ms, run_time_ms, "
            "shuffle_local_bytes + shuffle_remote_bytes AS shuffle_read_bytes "
            f"FROM task_end_dedup WHERE app_id = '{app}'"
        ):
            task_rows[(int(r["stage_id"]), int(r["stage_attempt"]))].append(r)
        for stage in history_server.get(f"applications/{app}/stages"):
            if stage["status"] == "SKIPPED":
                continue
            key = (stage["stageId"], stage["attemptId"])
            row = ours[key]
            assert int(row["num_tasks"]) == stage["numTasks"], (app, key)
            assert int(row["tasks_succeeded"]) == stage["numCompleteTasks"], (app, key)
            assert int(row["tasks_failed"]) == stage["numFailedTasks"], (app, key)
            assert int(row["tasks_killed"]) == stage["numKilledTasks"], (app, key)
            assert int(row["run_time_ms_sum"]) == stage["executorRunTime"], (app, key)
            assert int(row["cpu_time_ns"]) == stage["executorCpuTime"], (app, key)
            assert int(row["input_bytes_sum"]) == stage["inputBytes"], (app, key)
            assert int(row["shuffle_read_bytes_sum"]) == stage["shuffleReadBytes"], (app, key)
            assert int(row["shuffle_write_bytes_sum"]) == stage["shuffleWriteBytes"], (app, key)
            assert int(row["memory_spill_bytes_sum"]) == stage["memoryBytesSpilled"], (app, key)
            tasks = task_rows[key]
            assert len(tasks) == stage["numCompleteTasks"] + stage["numFailedTasks"] + stage["numKilledTasks"]
            ok = [t for t in tasks if t["status"] == "SUCCESS"]
            summary = history_server.get(
                f"applications/{app}/stages/{key[0]}/{key[1]}/taskSummary?quantiles=0.5,0.75,0.95"
            )
            for q, i in ((0.5, 0), (0.75, 1), (0.95, 2)):
                assert spark_quantile([int(t["duration_ms"]) for t in ok], q) == summary["duration"][i], (app, key)
                assert spark_quantile([int(t["run_time_ms"]) for t in ok], q) == summary["executorRunTime"][i]
                assert (
                    spark_quantile([int(t["shuffle_read_bytes"]) for t in ok], q)
                    == summary["shuffleReadMetrics"]["readBytes"][i]
                ), (app, key)
            for q, name in ((0.5, "p50"), (0.75, "p75"), (0.95, "p95")):
                assert int(row[f"task_duration_ms_{name}"]) == nearest_rank([int(t["duration_ms"]) for t in tasks], q)
            checked += 1
    assert checked >= 20


def test_the_aqe_log_has_its_skew_split_and_coalesced_shuffle_reads(
    logs: Logs, imported: Imported, store: Store
) -> None:
    for app in (logs.apps["rolling-aqe"], logs.spark35_apps["3.5-zstd"]):
        assert store.count("aqe_shuffle_read", app, "skewed = 1") >= 1, app
        assert store.count("aqe_shuffle_read", app, "coalesced = 1") >= 1, app


def test_the_summary_counts_per_family_and_a_second_import_adds_nothing(
    logs: Logs, imported: Imported, store: Store
) -> None:
    out = imported.first.stdout.splitlines()
    assert out[0].startswith("imported 6 logs: 6 applications, "), out
    families = dict(item.rsplit(" ", 1) for item in out[1].removeprefix("events: ").split(", "))
    assert int(families["app_start"]) == 6
    assert imported.spark35.stdout.startswith("imported 2 logs: 2 applications, ")
    assert imported.again.returncode == 0, imported.again.stderr
    assert imported.again.stdout.splitlines()[0].startswith("imported 0 logs: 0 applications, 0 events")
    assert "unchanged since the last import (nothing to send): 8 logs" in imported.again.stdout
    assert table_counts(store) == imported.counts
    # nothing was inserted twice: the tables without deduplication hold as many rows as the _dedup views
    for table in TABLES:
        raw = int(store.rows(f"SELECT count() AS n FROM {table}")[0]["n"])
        assert raw == imported.counts[table], table


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


def follower_metrics(port: int) -> dict[str, float]:
    """The follower's /metrics samples (name with labels -> value); {} while it does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:  # noqa: S310
            text = resp.read().decode()
    except OSError:
        return {}
    samples = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {name: float(value) for name, value in samples}


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


def test_engine_spark_reads_file_uris_through_hadoop_on_the_executors_and_names_a_missing_connector(
    logs: Logs, imported: Imported, store: Store, spark_sessions: SparkSessions, clickhouse_server: ClickHouseServer,
    tmp_path: Path,
) -> None:  # fmt: skip
    """``--engine spark`` on the Spark 4 logs as ``file://`` URIs (Hadoop's local FileSystem, listed on the driver,
    replayed on 2 executor tasks, written from them): the same rows as the local engine's import; ``gs://`` without
    its connector jar is one clear line naming the jar and the ``--packages`` coordinates; a rerun sends nothing."""
    from sparktap.history import engine_spark
    from sparktap.history.checkpoint import Checkpoint

    spark4 = [p for p in sorted(logs.hs_dir.iterdir()) if not p.name.startswith(".")]
    spark4 = [p for p in spark4 if not any(a in p.name for a in logs.spark35_apps.values())]
    apps = ", ".join(f"'{a}'" for a in logs.apps.values())
    database = random_database("sparktap_import_spark")
    other = ServerStorage(clickhouse_server.target(database), connect_timeout=5, send_receive_timeout=60)
    try:
        destination = engine_spark.Destination(clickhouse_server.url(database), None, "unused", None, 30)
        checkpoint = Checkpoint(tmp_path / "ck.json")
        uris = [p.as_uri() for p in spark4] + ["gs://sparktap-no-bucket/spark-logs/"]
        spark = spark_sessions.default()
        summary = engine_spark.run(spark, uris, destination, checkpoint, cluster="imp", partitions=2)
        assert summary.logs == len(spark4) == 6
        assert len(summary.applications) == 6
        assert summary.stopped == [] and summary.rejected == {}
        (gs,) = summary.skipped
        assert gs.path == "gs://sparktap-no-bucket/spark-logs/"
        assert gs.reason.startswith('no Hadoop FileSystem for scheme="gs": Spark does not ship its connector, '), gs
        assert gs.reason.endswith("add it with --packages com.google.cloud.bigdataoss:gcs-connector:3.1.7 (or its jar "
                                  "with --jars)"), gs  # fmt: skip
        for table in TABLES:
            local = store.rows(f"SELECT count() AS n FROM {table}_dedup WHERE app_id IN ({apps})")[0]["n"]
            raw = other.query(f"SELECT count() AS n FROM {table}")[0]["n"]
            assert int(raw) == int(local), table
        assert int(other.query("SELECT count() AS n FROM task_end")[0]["n"]) > 0
        assert sorted(checkpoint.logs) == sorted(p.as_uri() for p in spark4)  # as Hadoop names them
        again = engine_spark.run(spark, uris[:-1], destination, checkpoint, cluster="imp", partitions=2)
        assert again.logs == 0 and sum(again.events.values()) == 0 and len(again.unchanged) == 6
    finally:
        other.close()
        drop_database(clickhouse_server, database)


def test_a_spark_24_log_imports_with_the_counts_and_sums_of_its_source_application(
    logs: Logs, imported: Imported, store: Store, tmp_path: Path
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

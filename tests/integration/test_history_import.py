"""``sparktap import`` against Spark's own History Server (docs/import.md; live equals imported: test_history_live.py).

Real applications (Spark 4 in this process, Spark 3.5 as its own driver) write event logs: one per codec, one
rolling log (cut into three ``events_N`` files, as Spark rolls), an AQE skew join and coalesce. They are imported
into ClickHouse; Spark's History Server (``org.apache.spark.deploy.history.HistoryServer`` from the pyspark
installation, on 127.0.0.1) reads the same directory, and its REST API is the oracle: per application the jobs,
stages, tasks and SQL executions; per stage the task counts and sums, and the quantiles of ``taskSummary``.
Spark's quantile (``AppStatusStore.taskSummary``): over the successful tasks sorted by the metric, the value at
index ``min(floor(q * n), n - 1)``; sparktap's stage quantiles use the nearest rank ``ceil(q * n) - 1`` (both are
checked, each against its own definition, on the stored task rows).

The import's summary counts each event family, and a second import adds nothing. ``--engine spark`` imports copies
of the same logs on a standalone cluster (200 applications, SIGKILLed with its driver and run again) and from a real
HDFS: every table holds what the local engine stored for their source logs. The import of one plain log (in
progress, bad input, ``--follow``, Spark 2.4's layout, fifty copies in one insert): test_history_import_one_log.py.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparktap.history import engine_spark
from sparktap.history.checkpoint import Checkpoint
from sparktap.local.ports import wait_until
from sparktap.schemas.ddl import EVENT_TYPES
from sparktap.store import ServerStorage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.hdfs import MiniHdfs
from tests.fixtures.history import (
    ROOT,
    HistoryServer,
    copy_as,
    eventlog_conf,
    sparktap_import,
    split_rolling,
)
from tests.fixtures.listener import (
    clear_listener_properties,
)
from tests.fixtures.spark import SparkSessions
from tests.fixtures.spark_lines import spark_line
from tests.support.history_import import TABLES, Store, checkpointed, open_store
from tests.support.services.spark_standalone import SparkStandaloneCluster

pytestmark = pytest.mark.timeout(1200)  # the module's fixtures run 9 Spark applications: slow on a loaded machine

CODECS = ("none", "lz4", "lzf", "snappy", "zstd")


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


@pytest.fixture(scope="module")
def store(clickhouse_server: ClickHouseServer) -> Iterator[Store]:
    with open_store(clickhouse_server) as store:
        yield store


@dataclass
class Imported:
    first: subprocess.CompletedProcess[str]
    again: subprocess.CompletedProcess[str]
    spark35: subprocess.CompletedProcess[str]
    counts: dict[str, int]


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


SPARK_ENGINE_COPIES = {"none": 150, "rolling-aqe": 50}
"""200 applications for ``--engine spark``: copies of a plain log and of a rolling AQE log, each a new app id."""
GS = "gs://sparktap-no-bucket/spark-logs/"
EXECUTORS = {"spark.cores.max": "2", "spark.executor.cores": "1", "spark.executor.memory": "512m",
             "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}  # fmt: skip
"""The two Workers' executors, started fast (C1 only)."""


def test_engine_spark_on_a_standalone_cluster_imports_200_logs_exactly_once_across_a_kill_and_a_rerun(
    logs: Logs, imported: Imported, store: Store, spark_standalone: SparkStandaloneCluster,
    clickhouse_server: ClickHouseServer, spark_sessions: SparkSessions, tmp_path: Path,
) -> None:  # fmt: skip
    """``sparktap import --engine spark`` on the standalone cluster (a Master and two Workers: 2 executors in their
    own JVMs, each task's logs replayed and written from the executor) over 200 distinct applications as ``file://``
    URIs, SIGKILLed with its driver once some of the logs are checkpointed, then run again (the engine in this
    process, as the command runs it) with a ``gs://`` path whose connector is missing. Every stored table holds
    exactly what the local engine stored for the source logs, once per copy; the logs checkpointed before the kill
    were stored exactly once and not sent again; the rerun imports exactly the others; the ``gs://`` path is one
    line naming the jar and its ``--packages``. ``--batch-mb`` reaches the executors' sinks: 4 MB in the first run;
    0 for one task of 6 more logs: 6 deliveries (not one), an insert per table a log has rows for, exact counts."""
    many = tmp_path / "many"
    many.mkdir()
    sources = {
        "none": logs.hs_dir / logs.apps["none"],
        "rolling-aqe": logs.hs_dir / f"eventlog_v2_{logs.apps['rolling-aqe']}",
    }
    copies: dict[str, str] = {}  # new app id -> its source's app id
    for name, n in SPARK_ENGINE_COPIES.items():
        for i in range(n):
            app = f"{logs.apps[name]}-s{i:03d}"
            copy_as(sources[name], logs.apps[name], app, many)
            copies[app] = logs.apps[name]
    assert len(copies) == 200
    tables = [*EVENT_TYPES, "raw_events"]
    per_source = {t: {app: store.count(t, app) for app in set(copies.values())} for t in tables}
    expected = {t: sum(per_source[t][source] for source in copies.values()) for t in tables}
    assert expected["task_end"] > 0 and expected["sql_start"] > 0 and expected["aqe_shuffle_read"] > 0
    database = random_database("sparktap_import_spark")
    target = ServerStorage(clickhouse_server.target(database), connect_timeout=5, send_receive_timeout=60)
    ck = tmp_path / "ck.json"
    command = [str(many), "--engine", "spark", "--master", spark_standalone.master_url, "--storage-url",
               clickhouse_server.url(database), "--checkpoint", str(ck), "--cluster", "imp",
               "--batch-mb", "4"]  # fmt: skip
    for key, value in EXECUTORS.items():
        command += ["--conf", f"{key}={value}"]
    env = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}  # the workers import sparktap

    def one(sql: str) -> int:
        return int(target.query(sql)[0]["n"])

    try:
        first = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "sparktap", "import", *command], cwd=ROOT, env={**os.environ, **env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            wait_until(lambda: len(checkpointed(ck)) >= 20 or first.poll() is not None, 300, "20 logs checkpointed")
            assert first.poll() is None, first.communicate()[1][-3000:]
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)  # the driver: the Python process and its JVM
            first.communicate(timeout=60)
        done = checkpointed(ck)
        assert 20 <= len(done) < 200
        assert all(uri.startswith("file:///") for uri in done)
        done_apps = [Path(uri).name.removeprefix("eventlog_v2_") for uri in done]
        in_list = ", ".join(f"'{a}'" for a in done_apps)
        # what was checkpointed was delivered whole before the kill
        want = sum(per_source["task_end"][copies[a]] for a in done_apps)
        assert one(f"SELECT count() AS n FROM task_end_dedup WHERE app_id IN ({in_list})") == want

        # run again, here (the test's driver JVM is up already): the engine the command runs, with its summary
        spark = spark_sessions.fresh({"spark.master": spark_standalone.master_url, **EXECUTORS})
        spark.sparkContext.pythonExec = sys.executable
        try:
            destination = engine_spark.Destination(clickhouse_server.url(database), None, "unused", None, 30)
            again = engine_spark.run(spark, [str(many), GS], destination, Checkpoint(ck), cluster="imp")
            # --batch-mb 0 reaches the executors: one task of 6 more logs delivers each on its own (6 batches, where
            # the default budget makes it one)
            six = tmp_path / "six"
            six.mkdir()
            for i in range(6):
                copy_as(sources["none"], logs.apps["none"], f"{logs.apps['none']}-b{i}", six)
            per_log = engine_spark.Destination(clickhouse_server.url(database), None, "unused", None, 30,
                                               each_log=True)  # fmt: skip
            each = engine_spark.run(spark, [str(six)], per_log, Checkpoint(tmp_path / "ck6.json"), "imp",
                                    partitions=1)  # fmt: skip
        finally:
            spark_sessions.stop()
        out = again.lines()
        assert out[0].startswith(f"imported {200 - len(done)} logs: {200 - len(done)} applications, "), out
        assert f"unchanged since the last import (nothing to send): {len(done)} logs" in out
        assert again.problems  # the CLI's exit status 1: the gs:// path was skipped
        assert [line for line in out if line.startswith(("skipped", "stopped", "refused"))] == [
            f'skipped: {GS}: no Hadoop FileSystem for scheme="gs": Spark does not ship its connector, gcs-connector '
            "(com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem); add it with --packages "
            "com.google.cloud.bigdataoss:gcs-connector:3.1.7 (or its jar with --jars)"
        ]
        assert len(checkpointed(ck)) == 200
        for table in tables:
            many_only = "WHERE app_id NOT LIKE '%-b_'"
            assert one(f"SELECT count() AS n FROM {table}_dedup {many_only}") == expected[table], table
            # no second copy under other keys: as many distinct (app, attempt, seq) as events
            assert (
                one(f"SELECT uniqExact(app_id, app_attempt, seq) AS n FROM {table} {many_only}") == expected[table]
            ), table
        assert one("SELECT uniqExact(app_id) AS n FROM app_start") == 206
        inserts = 6 * sum(1 for t in tables if per_source[t][logs.apps["none"]] > 0)
        out6 = each.lines()
        assert out6[0].startswith("imported 6 logs: 6 applications, "), out6
        assert out6[2] == f"delivered in 6 batches ({inserts} inserts)", out6
        for table in tables:
            assert one(f"SELECT count() AS n FROM {table}_dedup WHERE app_id LIKE '%-b_'") == (
                6 * per_source[table][logs.apps["none"]]
            ), table
        # the logs checkpointed before the kill were not sent again (the rows of the logs in flight at the kill are
        # stored twice until ClickHouse merges them, under the same keys)
        assert one(f"SELECT count() AS n FROM task_end WHERE app_id IN ({in_list})") == want
    finally:
        target.close()
        drop_database(clickhouse_server, database)


def test_engine_spark_imports_plain_compressed_and_rolling_logs_from_a_real_hdfs(
    logs: Logs, imported: Imported, store: Store, hdfs: MiniHdfs, clickhouse_server: ClickHouseServer,
    spark_sessions: SparkSessions, tmp_path: Path,
) -> None:  # fmt: skip
    """``--engine spark`` over ``hdfs://`` paths on a real HDFS (tests/fixtures/hdfs.py: Hadoop's MiniDFSCluster in
    its own JVM), read through the Hadoop client Spark ships: a directory holding a plain log and a rolling log of
    three ``events_N`` files, and a glob matching a zstd log. Every table holds exactly what the local engine stored
    for the same logs from the local disk, the checkpoint names the ``hdfs://`` URIs, and a second run sends
    nothing."""
    spark = spark_sessions.fresh({"spark.master": "local[2]"})
    spark.sparkContext.pythonExec = sys.executable
    database = random_database("sparktap_import_hdfs")
    target = ServerStorage(clickhouse_server.target(database), connect_timeout=5, send_receive_timeout=60)
    ck = Checkpoint(tmp_path / "ck.json")
    destination = engine_spark.Destination(clickhouse_server.url(database), None, "unused", None, 30)
    names = ("none", "rolling-aqe", "zstd")
    try:
        uris = {
            "none": hdfs.put(spark, logs.hs_dir / logs.apps["none"], "/spark-logs"),
            "rolling-aqe": hdfs.put(spark, logs.hs_dir / f"eventlog_v2_{logs.apps['rolling-aqe']}", "/spark-logs"),
            "zstd": hdfs.put(spark, logs.hs_dir / f"{logs.apps['zstd']}.zstd", "/other"),
        }
        paths = [f"{hdfs.uri}/spark-logs/", f"{hdfs.uri}/other/*.zstd"]
        first = engine_spark.run(spark, paths, destination, ck, cluster="imp")
        assert not first.problems, first.lines()
        assert first.lines()[0].startswith("imported 3 logs: 3 applications, "), first.lines()
        assert sorted(json.loads((tmp_path / "ck.json").read_text())["logs"]) == sorted(uris.values())
        for table in [*EVENT_TYPES, "raw_events"]:
            for name in names:
                app = logs.apps[name]
                stored = target.query(f"SELECT count() AS n FROM {table}_dedup WHERE app_id = '{app}'")
                assert int(stored[0]["n"]) == store.count(table, app), (table, name)
        assert sum(store.count("task_end", logs.apps[n]) for n in names) > 0
        again = engine_spark.run(spark, paths, destination, ck, cluster="imp")
        assert not again.problems and "unchanged since the last import (nothing to send): 3 logs" in again.lines()
        assert again.lines()[0].startswith("imported 0 logs"), again.lines()
    finally:
        spark_sessions.stop()
        target.close()
        drop_database(clickhouse_server, database)

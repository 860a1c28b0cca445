"""Table identity (issue 42): the listener names the table each scan and write of a SQL execution touched, and what
a write committed, in a real Spark application with real Delta and Iceberg tables.

One application per Spark line (module fixture) writes a parquet table (CTAS, then append), a bare path and a path
carrying a presigned query string, reads them back, and logs its events; on Spark 3.5 and 4.1 it first appends to a
Delta table and to an Iceberg table (Hadoop catalog) with 20 partitions each (20 times on 3.5, 5 on 4.1), and runs
Delta's MERGE, UPDATE and DELETE on a third table (no Delta or Iceberg release supports the main venv's pyspark 4.3
yet: tests/support/lakehouse.py). Its table_access events (live, from Kafka) are checked against the tables' own
history (Delta's DESCRIBE HISTORY and commit log, Iceberg's snapshots table), exactly, and so is the per-table rollup
the collector stores from the 3.5 run's (chDB), where table_file_growth names both tables; then its event log is
imported (`sparktap import`) and the replayed table_access events are checked against the live ones.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparktap.detection import Detector, Thresholds
from sparktap.schemas.rollups import TABLE_ROLLUP, table_daily
from tests.fixtures.history import sparktap_import
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import AppEvents, assert_valid, new_topic, read_all, read_app_events
from tests.fixtures.spark_lines import run_app, spark_line
from tests.support import lakehouse
from tests.support.collector import in_process, settings_for, wait_inserted

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROLLUP_LINE = "3.5"
"""The lake line whose recurring job writes 20 times: the per-table rollup and the growth finding are checked on it."""


@dataclass
class Tables:
    out: dict[str, Any]
    live: list[dict[str, Any]]
    replayed: list[dict[str, Any]]
    events: AppEvents
    log: Path
    bootstrap: str
    topic: str

    def executions(self, group: str) -> set[int]:
        """The SQL executions of a job group's jobs, and those they run inside (Delta writes its files in an execution
        nested in the one whose plan holds the write)."""
        jobs = set(self.out["job_groups"][group])
        ids = {e["sql_execution_id"] for e in self.events.of("job_start") if e["job_id"] in jobs}
        starts = self.events.of("sql_start")
        roots = {e["execution_id"]: e["root_execution_id"] for e in starts if "root_execution_id" in e}
        return ids | {int(roots[i]) for i in ids if i in roots}

    def of(self, group: str, role: str, events: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        ids = self.executions(group)
        return [e for e in (self.live if events is None else events) if e["execution_id"] in ids and e["role"] == role]


def run_tables(line_name: str, bootstrap: str, scratch: Path) -> Tables:
    """The table app on a Spark line (with Delta and Iceberg on 3.5 and 4.1), its live events and its log's import."""
    line = spark_line(line_name)
    lake = line_name in lakehouse.LINES
    topic = new_topic(bootstrap)
    event_log = scratch / "eventlog"
    event_log.mkdir()
    conf = {
        **(lakehouse.spark_conf(line_name, scratch / "iceberg") if lake else {}),
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_log.as_uri(),
        "spark.eventLog.compress": "false",
    }
    enable = {"bootstrap_servers": bootstrap, "topic": topic, "spool_dir": str(scratch / "spool"),
              "cluster": "test", "flush_timeout_ms": 10_000, "relay_status_interval_ms": 100}  # fmt: skip
    spec = {"conf": conf, "enable": enable, "scratch": str(scratch), "lake": lake,
            "writes": lakehouse.WRITES.get(line_name, 0)}  # fmt: skip
    app = run_app(line, scratch, spec, timeout=900, module="tests.support.lakehouse")
    assert app.returncode == 0, app.log[-4000:]
    assert app.out["spark_version"] == line.spark_version
    events = read_app_events(bootstrap, topic, timeout=60)
    assert_valid(events.events)
    live = events.of("table_access")
    assert live and events.final_health.get("callback_errors", 0) == 0, events.final_health
    (log,) = [p for p in event_log.iterdir() if not p.name.startswith(".")]
    import_topic = new_topic(bootstrap)
    proc = sparktap_import(str(log), "--bootstrap-servers", bootstrap, "--topic", import_topic,
                           "--checkpoint", str(scratch / "ck.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    imported = [
        orjson.loads(r.value or b"null")
        for r in read_all(
            bootstrap,
            import_topic,
            120,
            settle=1.0,
            until=lambda rs: any(b'"app_end"' in r.value for r in rs if r.value),
        )  # fmt: skip
    ]
    replayed = [e for e in imported if e["event_type"] == "table_access"]
    (scratch / "table_access.json").write_bytes(orjson.dumps({"live": live, "replayed": replayed}))  # to look at
    return Tables(app.out, live, replayed, events, log, bootstrap, topic)


_RUNS: dict[str, Tables] = {}


def _run(line: str, kafka_broker: KafkaService, tmp_path_factory: pytest.TempPathFactory) -> Tables:
    """The line's run, once for the module."""
    if line not in _RUNS:
        scratch = tmp_path_factory.mktemp(f"listener-tables-{line}")
        _RUNS[line] = run_tables(line, kafka_broker.bootstrap_servers, scratch)
    return _RUNS[line]


@pytest.fixture(scope="module", params=["3.5", "4.1", "4"], ids=["spark3.5", "spark4.1", "spark4"])
def tables(
    request: pytest.FixtureRequest, kafka_broker: KafkaService, tmp_path_factory: pytest.TempPathFactory
) -> Tables:
    """The app on each line: parquet tables and paths on all, Delta and Iceberg on 3.5 and 4.1 (pyspark 4.3, the
    main venv's, has no Delta or Iceberg release yet: tests/support/lakehouse.py)."""
    return _run(request.param, kafka_broker, tmp_path_factory)


@pytest.fixture(scope="module", params=list(lakehouse.LINES), ids=[f"spark{line}" for line in lakehouse.LINES])
def lake(
    request: pytest.FixtureRequest, kafka_broker: KafkaService, tmp_path_factory: pytest.TempPathFactory
) -> Tables:
    """A run with Delta and Iceberg tables (Spark 3.5 and 4.1)."""
    return _run(request.param, kafka_broker, tmp_path_factory)


@pytest.fixture(scope="module")
def rollup_lake(kafka_broker: KafkaService, tmp_path_factory: pytest.TempPathFactory) -> Tables:
    """The Spark 3.5 run: its recurring job writes each table 20 times."""
    return _run(ROLLUP_LINE, kafka_broker, tmp_path_factory)


def sums(rows: list[dict[str, Any]]) -> tuple[int, int, int]:
    return (sum(r["files"] for r in rows), sum(r["bytes"] for r in rows), sum(r["rows"] for r in rows))


def test_delta_writes_equal_describe_history_exactly(lake: Tables) -> None:
    tables = lake
    n = tables.out["writes"]
    assert n == lakehouse.WRITES[tables.out["spark_version"][:3]]
    writes = [w for i in range(n) for w in tables.of(f"delta-{i}", "write")]
    assert len(writes) == n, writes
    history = {h["version"]: h for h in tables.out["delta_history"] if h["operation"] == "WRITE"}
    assert len(history) == n
    for w in writes:
        assert (w["catalog"], w["table"], w["format"], w["metrics_source"]) == (
            "spark_catalog", "default.delta_orders", "delta", "delta"), w  # fmt: skip
        assert w["location"] == "file:" + tables.out["warehouse"].removeprefix("file:") + "/delta_orders"
        assert w["write_mode"] == "append"
        m = history[int(w["version"])]["metrics"]
        assert (w["files"], w["bytes"], w["rows"]) == (
            int(m["numFiles"]), int(m["numOutputBytes"]), int(m["numOutputRows"])), w  # fmt: skip
    expected = [sum(int(h["metrics"][k]) for h in history.values()) for k in ("numFiles", "numOutputBytes",
                                                                              "numOutputRows")]  # fmt: skip
    assert list(sums(writes)) == expected
    assert expected[2] == n * 1000
    assert expected[0] >= n * lakehouse.PARTITIONS * 4 // 5  # the job's partitions: many small files


def test_iceberg_writes_equal_the_snapshots_summary_exactly(lake: Tables) -> None:
    tables = lake
    n = tables.out["writes"]
    writes = [w for i in range(n) for w in tables.of(f"iceberg-{i}", "write")]
    assert len(writes) == n, writes
    snapshots = {str(s["snapshot_id"]): s["summary"] for s in tables.out["iceberg_snapshots"]}
    assert len(snapshots) == n
    assert {w["version"] for w in writes} == set(snapshots)
    for w in writes:
        assert (w["catalog"], w["table"], w["format"], w["metrics_source"], w["write_mode"]) == (
            "lake", "db.orders", "iceberg", "iceberg", "append"), w  # fmt: skip
        s = snapshots[w["version"]]
        assert (w["files"], w["bytes"], w["rows"]) == (
            int(s["added-data-files"]), int(s["added-files-size"]), int(s["added-records"])), w  # fmt: skip
        assert w["location"].endswith("/iceberg/db/orders")
    expected = [sum(int(s[k]) for s in snapshots.values()) for k in ("added-data-files", "added-files-size",
                                                                     "added-records")]  # fmt: skip
    assert list(sums(writes)) == expected
    assert expected[2] == n * 1000


CHANGE_MODES = {"changes-merge": "merge", "changes-update": "update", "changes-delete": "delete",
                "changes-optimize": "optimize"}  # fmt: skip
"""Delta's row-level commands on ``delta_changes`` (tests/support/lakehouse.py), then its OPTIMIZE, by job group."""


def added(table_dir: Path, version: int) -> tuple[int, int, int]:
    """(files, bytes, rows) of the files one Delta commit added, from the table's own log: its ``add`` actions, their
    sizes and their statistics' record counts."""
    commit = (table_dir / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    adds = [action["add"] for action in map(json.loads, commit) if "add" in action]
    return len(adds), sum(a["size"] for a in adds), sum(json.loads(a["stats"])["numRecords"] for a in adds)


def test_delta_merge_update_and_delete_name_their_table_and_what_they_wrote(lake: Tables) -> None:
    """MERGE (500 rows updated, 500 inserted), UPDATE (100 rows) and DELETE (100 rows): one write each, naming the
    table and the command, with the files, bytes and rows its commit added (the commit's own add actions: an UPDATE
    rewrites the updated rows and the rows it copied, a DELETE only those it copied); their scans name the table.
    Then OPTIMIZE: a write of mode ``optimize`` (a compaction for table_file_growth) with its commit's files and
    bytes (its commit counts no rows)."""
    history = {h["operation"]: int(h["version"]) for h in lake.out["delta_changes_history"]}
    table_dir = Path(lake.out["warehouse"].removeprefix("file:")) / "delta_changes"
    for group, mode in CHANGE_MODES.items():
        (w,) = lake.of(group, "write")
        assert (w["catalog"], w["table"], w["format"], w["metrics_source"], w["write_mode"]) == (
            "spark_catalog", "default.delta_changes", "delta", "delta", mode), w  # fmt: skip
        assert int(w["version"]) == history[mode.upper()]
        files, size, rows = added(table_dir, int(w["version"]))
        assert (w["files"], w["bytes"], w.get("rows")) == (files, size, None if mode == "optimize" else rows), w
        reads = lake.of(group, "read")
        if mode == "optimize":  # it reads the files by path (its plan has no catalog table): the location, no name
            assert reads and {(r["table"], r["location"], r["format"]) for r in reads} == {("", w["location"], "delta")}
        else:
            assert reads and {(r["table"], r["format"]) for r in reads} == {("default.delta_changes", "delta")}
    (update,) = lake.of("changes-update", "write")
    assert update["rows"] == 250  # 100 updated and 150 copied: the rewritten file's rows
    (optimize,) = lake.of("changes-optimize", "write")  # the compaction: one file for the table's small ones
    assert optimize["files"] == 1 and "rows" not in optimize  # OPTIMIZE's commit counts no rows


def test_an_iceberg_rewrite_is_its_tables_compaction_live_and_replayed(lake: Tables) -> None:
    """Iceberg's ``rewrite_data_files`` writes each file group to a staged file set (``<group id>#rewrite``): the write
    names the table it compacts, with the mode ``rewrite_data_files`` (a compaction for table_file_growth), never the
    file set; and the procedure's commit is the table's one ``replace`` snapshot."""
    operations = [s["operation"] for s in lake.out["compacted_snapshots"]]
    assert sorted(operations) == ["append", "append", "append", "replace"]
    (replace,) = [s["summary"] for s in lake.out["compacted_snapshots"] if s["operation"] == "replace"]
    assert int(replace["deleted-data-files"]) == 15 and int(replace["added-records"]) == 300
    appends = set().union(*(lake.executions(f"compacted-{i}") for i in range(3)))
    logged = lake.out["spark_version"] >= "4."  # Iceberg 1.10 (Spark 3.5) logs its staged scan as a plain one
    for events, mode in (
        (lake.live, "rewrite_data_files"),
        (lake.replayed, "rewrite_data_files" if logged else "append"),
    ):
        rewrite = [(w["catalog"], w["table"], w["format"], w["write_mode"]) for w in events
                   if w["role"] == "write" and w["execution_id"] not in appends and w["table"] != "db.orders"
                   and w["format"] == "iceberg"]  # fmt: skip
        assert rewrite == [("lake", "db.compacted", "iceberg", mode)], rewrite  # the procedure compacts one group
    assert not [e for e in lake.live + lake.replayed if "#" in e["table"] or e["catalog"] == "default_rewrite_catalog"]


def test_the_stored_rollup_equals_the_tables_history_and_their_growth_is_found(
    rollup_lake: Tables, tmp_path: Path
) -> None:
    """The lake application's events through the real collector into chDB: the per-table rollup (``table_daily`` over
    ``table_rollup``) equals Delta's DESCRIBE HISTORY and Iceberg's snapshots summary, exactly; and
    ``table_file_growth`` (its floors lowered to this test's ~400 files of 1 kB) names each table with its writes and
    their files."""
    lake = rollup_lake
    n = lake.out["writes"]
    assert n == 20
    delta = [sum(int(h["metrics"][k]) for h in lake.out["delta_history"] if h["operation"] == "WRITE")
             for k in ("numFiles", "numOutputBytes", "numOutputRows")]  # fmt: skip
    iceberg = [sum(int(s["summary"][k]) for s in lake.out["iceberg_snapshots"])
               for k in ("added-data-files", "added-files-size", "added-records")]  # fmt: skip
    appends = [s for s in lake.out["compacted_snapshots"] if s["operation"] == "append"]
    compacted = [sum(int(s["summary"][k]) for s in appends)
                 for k in ("added-data-files", "added-files-size", "added-records")]  # fmt: skip
    table_dir = Path(lake.out["warehouse"].removeprefix("file:")) / "delta_changes"
    commits = [added(table_dir, v) for v in range(1, 6)]  # the seed's write, MERGE, UPDATE, DELETE, OPTIMIZE
    changes = [sum(c[i] for c in commits) for i in range(2)] + [sum(c[2] for c in commits[:4])]  # OPTIMIZE: no rows
    settings = settings_for(lake.bootstrap, lake.topic, f"chdb://{tmp_path / 'chdb'}", batch_interval_seconds=0.25)
    with in_process(settings) as collector:
        wait_inserted(collector, len(lake.events.records), 120)
        storage = collector.storage
        assert storage is not None
        daily = storage.query(
            f"SELECT table_key, format, sum(writes) AS w, sum(files_written) AS f, sum(bytes_written) AS b, "
            f"sum(rows_written) AS r, sum(compactions) AS c "
            f"FROM ({table_daily(f'{storage.database}.{TABLE_ROLLUP}_dedup')}) "  # noqa: S608
            "WHERE format IN ('delta', 'iceberg') GROUP BY table_key, format HAVING w > 0 ORDER BY format, table_key"
        )
        assert [(d["table_key"], d["format"], d["w"], d["f"], d["b"], d["r"], d["c"]) for d in daily] == [
            ("default.delta_changes", "delta", 5, *changes, 1),  # OPTIMIZE is its compaction
            ("default.delta_orders", "delta", n, *delta, 0),
            ("db.compacted", "iceberg", 4, *compacted, 1),  # three appends and Iceberg's rewrite_data_files
            ("db.orders", "iceberg", n, *iceberg, 0),
        ]
        lowered = Thresholds.model_validate(
            {"table_file_growth": {"min_files": 300, "max_avg_file_bytes": 1024 * 1024, "min_time_lost_ms": 1_000}}
        )
        now_ms = int(lake.events.final_health["event_time_ms"])
        found = Detector(
            storage.query,  # type: ignore[arg-type]
            thresholds=lowered,
            database=storage.database,
            version=storage.version(),
            rules=("table_file_growth",),
        ).findings(now_ms - 6 * 3_600_000, now_ms + 60_000)
    growth = {f.stage_name: f for f in found}
    assert set(growth) == {"default.delta_orders", "db.orders"}
    for key, (files, size, _) in (("default.delta_orders", delta), ("db.orders", iceberg)):
        ev = growth[key].evidence
        evidence = (ev["files"], ev["bytes_written"], ev["writes"], ev["compactions"])
        assert evidence == (files, size, n, 0), key
        assert growth[key].explanation.startswith(f"{key} ("), growth[key].explanation


def test_parquet_and_orc_tables_and_bare_paths_are_named(tables: Tables) -> None:
    warehouse = "file:" + tables.out["warehouse"].removeprefix("file:")
    for group, name, fmt, mode in (("parquet-ctas", "parquet_orders", "parquet", "overwrite"),
                                   ("parquet-append", "parquet_orders", "parquet", "append"),
                                   ("orc-ctas", "orc_orders", "orc", "overwrite")):  # fmt: skip
        (write,) = tables.of(group, "write")  # the CTAS's insert runs nested: named from its running parent
        assert (write["catalog"], write["table"], write["format"], write["write_mode"], write["metrics_source"]) == (
            "spark_catalog", f"default.{name}", fmt, mode, "plan"), write  # fmt: skip
        assert write["location"] == f"{warehouse}/{name}"
        assert (write["files"], write["rows"], write["partitions"]) == (3, 500, 0) and write["bytes"] > 0
    for group, key, fmt in (("bare", "bare", "parquet"), ("csv-bare", "bare_csv", "csv")):
        (bare,) = tables.of(group, "write")
        assert (bare["catalog"], bare["table"], bare["format"], bare["write_mode"]) == ("", "", fmt, "overwrite")
        assert bare["location"] == "file:" + tables.out[key]
        assert (bare["files"], bare["rows"]) == (3, 500)
        on_disk = [f for f in Path(tables.out[key]).iterdir() if f.name.startswith("part-")]
        assert bare["bytes"] == sum(f.stat().st_size for f in on_disk), (bare, on_disk)


def test_reads_name_their_tables(tables: Tables) -> None:
    named = {}
    for group in tables.out["counts"]:
        named[group] = [(r["catalog"], r["table"], r["format"], r["rows"]) for r in tables.of(group, "read")]
    writes = tables.out["writes"] * 1000
    expected = {
        "read-parquet": [("spark_catalog", "default.parquet_orders", "parquet", 1000)],
        "read-bare": [("", "", "parquet", 500)],
        "read-orc": [("spark_catalog", "default.orc_orders", "orc", 500)],
        "read-csv": [("", "", "csv", 500)],
    }
    if tables.out["delta_history"]:
        expected |= {
            "read-delta": [("spark_catalog", "default.delta_orders", "delta", writes)],
            "read-iceberg": [("lake", "db.orders", "iceberg", writes)],
        }
        (delta,) = tables.of("read-delta", "read")
        assert delta["files"] == sum(int(h["metrics"].get("numFiles", 0)) for h in tables.out["delta_history"])
    assert named == expected


def test_a_location_with_a_query_string_arrives_without_it(tables: Tables) -> None:
    (signed,) = tables.of("signed", "write")
    assert signed["location"] == "file:" + tables.out["signed"].split("?")[0]
    everything = orjson.dumps(tables.live + tables.replayed)
    assert b"CANARY_SIG_1" not in everything and b"X-Amz-Signature" not in everything


IDENTITY = ("role", "catalog", "table", "format", "location", "write_mode", "operator")
"""What a replayed access must name as the live one did. Not node_id: the log has no SparkPlan.id (the replay
numbers nodes in pre-order)."""


def identity(event: dict[str, Any], ctas: set[int], spark_version: str) -> tuple[Any, ...]:
    """The access's identity, less what the log does not carry: an Iceberg table's location (its plan shows only
    the table's name), the name of a table a CTAS creates (its nested insert names only the path), and on Spark 3.5
    that an Iceberg write is rewrite_data_files' (Iceberg 1.10 logs the staged scan as a plain one)."""
    out = dict(event)
    if out["format"] == "iceberg":
        out["location"] = ""
    if out["write_mode"] == "rewrite_data_files" and spark_version < "4.":
        out["write_mode"] = "append"
    if out["execution_id"] in ctas:
        out["catalog"] = out["table"] = ""
    return tuple(out[k] for k in IDENTITY)


def test_the_replayed_log_names_the_same_tables(tables: Tables) -> None:
    """Every access as the live listener named it, less what the log does not carry (``identity``). Delta's MERGE,
    UPDATE and DELETE name their table and location too: the logged plan is one ``Execute MergeIntoCommand``, and the
    execution's plan description holds the command's arguments (a DELETE's location is its scans')."""
    ctas = tables.executions("parquet-ctas") | tables.executions("orc-ctas")
    live = defaultdict(list)
    replayed = defaultdict(list)
    version = tables.out["spark_version"]
    for e in tables.live:
        live[e["execution_id"]].append(identity(e, ctas, version))
    for e in tables.replayed:
        replayed[e["execution_id"]].append(identity(e, ctas, version))
    assert dict(replayed) == dict(live)


def test_the_replayed_log_carries_the_file_write_and_scan_figures(tables: Tables) -> None:
    """A file write's and a file scan's figures are posted by the driver, so the log has them; so are a Delta MERGE's,
    UPDATE's and DELETE's own metrics, whose files, bytes and rows equal what the live write read from its commit. A
    Delta append's commit and an Iceberg snapshot are not in the log (their replayed writes carry no figure)."""
    live = {(e["execution_id"], e["role"]): e for e in tables.live}
    groups = [g for g in CHANGE_MODES if g in tables.out["job_groups"]]
    commands = {w["execution_id"] for g in groups for w in tables.of(g, "write")}
    assert len(commands) == len(groups)
    compared = 0
    for e in tables.replayed:
        twin = live[(e["execution_id"], e["role"])]
        if e["execution_id"] in commands and e["role"] == "write" and e["write_mode"] != "optimize":
            assert (e["files"], e["bytes"], e["rows"], e["metrics_source"]) == (
                twin["files"], twin["bytes"], twin["rows"], "plan"), (e, twin)  # fmt: skip
            assert twin["metrics_source"] == "delta" and min(twin["files"], twin["bytes"], twin["rows"]) > 0, twin
            compared += 1
            continue
        if e["format"] in ("delta", "iceberg") and e["role"] == "write":
            assert (e.get("files"), e.get("bytes"), e.get("rows"), e["metrics_source"]) == (None, None, None, ""), e
            continue
        if e["format"] in ("parquet", "orc", "csv"):
            figures = ("files", "bytes", "rows", "partitions") if e["role"] == "write" else ("files", "bytes")
            assert {k: e.get(k) for k in figures} == {k: twin.get(k) for k in figures}, (e, twin)
            compared += 1
    assert compared == 10 + len(commands) - (len(commands) > 0)  # 6 file writes, 4 file scans, MERGE, UPDATE, DELETE


def test_a_logged_location_with_credentials_is_imported_without_them(tables: Tables, tmp_path: Path) -> None:
    """The application's own log with its bare path rewritten to an S3 URL carrying an access key pair and a presigned
    query string (as a log from another cluster would hold it): the imported accesses name the bucket and path only."""
    bare = tables.out["bare"]
    secret = f"s3a://AKIAEXAMPLE:CANARY_KEY_2/x@bucket{bare}?X-Amz-Signature=CANARY_SIG_3#frag"
    log = tmp_path / tables.log.name
    parts = sorted(tables.log.iterdir()) if tables.log.is_dir() else [tables.log]  # Spark 4 rolls its log: a folder
    if tables.log.is_dir():
        log.mkdir()
    for part in parts:
        target = log / part.name if tables.log.is_dir() else log
        target.write_bytes(part.read_bytes().replace(f"file:{bare}".encode(), secret.encode()))
    topic = new_topic(tables.bootstrap)
    proc = sparktap_import(str(log), "--bootstrap-servers", tables.bootstrap, "--topic", topic,
                           "--checkpoint", str(tmp_path / "ck.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = read_all(tables.bootstrap, topic, 120, settle=1.0,
                       until=lambda rs: any(b'"app_end"' in r.value for r in rs if r.value))  # fmt: skip
    accesses = [e for r in records if (e := orjson.loads(r.value or b"null"))["event_type"] == "table_access"]
    ids = tables.executions("bare") | tables.executions("read-bare")
    located = sorted((e["role"], e["location"]) for e in accesses if e["execution_id"] in ids)
    assert located == [("read", f"s3a://bucket{bare}"), ("write", f"s3a://bucket{bare}")]
    everything = orjson.dumps(accesses)
    assert b"CANARY_KEY_2" not in everything and b"CANARY_SIG_3" not in everything and b"AKIAEXAMPLE" not in everything

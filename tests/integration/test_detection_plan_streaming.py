"""The plan and streaming rules end to end: real Spark local[2] with the listener → real broker → the real collector
→ ClickHouse (chDB, and the same topic collected again into clickhouse-server 18.16) → the detection query.

- Stale statistics: a table analyzed at 10 rows, then 200,000 rows added under its location and the table refreshed;
  a join over it gives a scan whose estimate is the catalog's row count and whose actual rows are the table's real
  count, and exactly that scan is a plan misestimate; after a fresh ANALYZE the same query gives none.
- TPC-H q13 with CBO on and ``ANALYZE … FOR ALL COLUMNS``: no plan misestimate on fresh statistics (whatever the
  selectivity model misjudges); with ten more loads of ``orders`` after the ANALYZE, one: its scan, naming the table's
  stale statistics.
- Codegen: an aggregate over 300 columns runs outside whole-stage codegen and is one codegen finding; over 10 columns
  it is inside and gives none. An aggregate over 40 columns whose generated method is over a lowered
  spark.sql.codegen.hugeMethodLimit ran interpreted and is one codegen finding (huge method); at the default limit none.
- Streaming: a rate → foreachBatch query whose batches take longer than its trigger is saturated while it still runs
  (its progress rows are the query's own recentProgress); a query with idle time between batches is not. A
  streaming aggregation without a watermark grows its state; one with a watermark evicts and is not reported.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from sparktap.collector.consumer import Collector
from sparktap.collector.streaming import register
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import all_dashboards, panels_of
from sparktap.detection import Detector, Finding, Thresholds
from sparktap.detection.macros import expand, interpolate
from sparktap.local.ports import wait_until
from sparktap.store import Storage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import (
    AppEvents,
    assert_valid,
    listener_settings,
    new_topic,
    read_app_events,
    start_session,
)
from tests.fixtures.spark import SparkSessions
from tests.fixtures.tpch import ROWS_SF01, Tpch
from tests.support.collector import in_process, settings_for
from tests.support.dashboard_columns import PANEL_COLUMNS
from tests.support.listener_apps import recent_progress, wide_aggregate_app

pytestmark = pytest.mark.integration

PLAN_RULES = ("plan_misestimate", "codegen_off")
STREAMING_RULES = ("streaming_saturated", "streaming_state_growth")
HOUR_MS = 3_600_000


def _window() -> tuple[int, int]:
    now = int(time.time() * 1000)
    return now - HOUR_MS, now + HOUR_MS


def _stored(storage: Storage, events: AppEvents) -> bool:
    """Every event of the application is in ClickHouse (one row per event type and seq)."""
    for event_type, count in events.types().items():
        rows = storage.query(f"SELECT count() AS n FROM {storage.database}.{event_type}_dedup")
        if int(rows[0]["n"]) < count:
            return False
    return True


@contextmanager
def collecting(kafka: KafkaService, topic: str, url: str) -> Iterator[Collector]:
    """The collector (in this process) reading the application's topic into the store at ``url``."""
    with in_process(settings_for(kafka.bootstrap_servers, topic, url)) as collector:
        wait_until(lambda: collector.storage is not None, 60.0, "the collector's store to open")
        yield collector


def _findings(storage: Storage, rules: tuple[str, ...], **thresholds: Any) -> list[Finding]:
    detector = Detector(
        storage.query,
        database=storage.database,
        version=storage.version(),
        rules=rules,
        thresholds=Thresholds(**thresholds),
    )
    return detector.findings(*_window())


NEW_PANELS = [
    key
    for key in PANEL_COLUMNS
    if key[0] == "sparktap-streaming"
    or key in (("sparktap-application", "Plan: estimated vs actual rows"), ("sparktap-application", "Codegen coverage"))
]


def panel_rows(storage: Storage, app_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every new panel's query (streaming dashboard, plan panels) run over this store for this application, the
    macros expanded and the variables set as Grafana would; each returns at least the columns its panel reads,
    on chDB and on clickhouse-server 18.16 (time series bucket with ``$__interval_s``, ``dashboards/panels.py``)."""
    cfg = GrafanaConfig(database=storage.database, clickhouse_version=storage.version())
    sql = {
        (b["uid"], p["title"]): p["targets"][0]["rawSql"]
        for b in all_dashboards(cfg)
        for p in panels_of(b)
        if p.get("targets")
    }
    out = {}
    for key in NEW_PANELS:
        final = expand(interpolate(sql[key], {"cluster": ["test"], "app": app_id}), *_window(), interval_ms=1000)
        rows = storage.query(final)
        columns = list(rows[0]) if rows else [str(r["name"]) for r in storage.query(f"DESCRIBE TABLE ({final})")]
        assert set(PANEL_COLUMNS[key]) <= set(columns), (key, columns)
        out[key[1]] = rows
    return out


PanelCheck = Callable[[dict[str, list[dict[str, Any]]]], None]


def collected_findings(
    kafka: KafkaService,
    topic: str,
    events: AppEvents,
    url: str,
    rules: tuple[str, ...],
    check: PanelCheck | None = None,
    **thresholds: Any,
) -> list[Finding]:
    """Collect a finished application's topic into the store at ``url`` and return its findings; ``check`` gets
    the rows of the new panels over the same store."""
    with collecting(kafka, topic, url) as collector:
        storage = collector.storage
        assert storage is not None
        wait_until(lambda: _stored(storage, events), 120.0, f"all {len(events.events)} events stored")
        if check is not None:
            check(panel_rows(storage, events.events[0]["app_id"]))
        return _findings(storage, rules, **thresholds)


@pytest.fixture
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database on clickhouse-server 18.16 (or SPARKTAP_TEST_CLICKHOUSE), dropped afterwards."""
    server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
    database = random_database()
    yield server.url(database)
    drop_database(server, database)


def on_both(
    kafka: KafkaService,
    topic: str,
    events: AppEvents,
    tmp_path: Path,
    server_url: str,
    rules: tuple[str, ...],
    check: PanelCheck,
    **thresholds: Any,
) -> list[Finding]:
    """The findings from chDB; the same topic collected into clickhouse-server gives the very same findings. The new
    panels' queries pass ``check`` on both."""
    embedded = collected_findings(kafka, topic, events, f"chdb://{tmp_path / 'chdb'}", rules, check, **thresholds)
    served = collected_findings(kafka, topic, events, server_url, rules, check, **thresholds)
    assert sorted(f.key for f in served) == sorted(f.key for f in embedded)
    assert {f.key: (f.severity, f.evidence, f.explanation, f.suggested_fix) for f in served} == {
        f.key: (f.severity, f.evidence, f.explanation, f.suggested_fix) for f in embedded
    }
    return embedded


def executions_of(events: AppEvents, job_ids: list[int]) -> set[int]:
    return {e["sql_execution_id"] for e in events.of("job_start") if e["job_id"] in job_ids and "sql_execution_id" in e}


def plans_of(events: AppEvents, job_ids: list[int]) -> list[dict[str, Any]]:
    executions = executions_of(events, job_ids)
    return [p for p in events.of("sql_plan_stats") if p["execution_id"] in executions]


# ------------------------------------------------------------------------------------------------- plans


def _catalog_rows(spark: Any, table: str) -> int:
    stats = next(r for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect() if r[0] == "Statistics")[1]
    return int(stats.split(",")[1].strip().split(" ")[0])  # "1234 bytes, 10 rows"


def test_stale_statistics_are_a_plan_misestimate_until_analyzed(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path, server_url: str
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    spark = start_session(
        listener_sessions, listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path / "spool")
    )
    sc = spark.sparkContext
    table, location = f"orders_{uuid.uuid4().hex[:8]}", tmp_path / "orders"
    spark.range(0, 10, 1, 1).selectExpr("id", "id % 3 AS k").write.parquet(str(location))
    spark.sql(f"CREATE TABLE {table} USING parquet LOCATION '{location}'")
    spark.sql(f"ANALYZE TABLE {table} COMPUTE STATISTICS")
    stale_rows = _catalog_rows(spark, table)
    spark.range(10, 200_010, 1, 2).selectExpr("id", "id % 3 AS k").write.mode("append").parquet(str(location))
    spark.sql(f"REFRESH TABLE {table}")  # the new files are read; the statistics stay those of 10 rows
    spark.range(0, 3).selectExpr("id AS k", "concat('key ', id) AS label").createOrReplaceTempView("labels")
    query = f"SELECT l.label, count(*) AS n FROM {table} o JOIN labels l ON o.k = l.k GROUP BY l.label"
    sc.setJobGroup("stale", "join over stale statistics")
    stale_result = sorted(tuple(r) for r in spark.sql(query).collect())
    sc.setJobGroup("analyze", "fresh statistics")
    spark.sql(f"ANALYZE TABLE {table} COMPUTE STATISTICS")
    fresh_rows = _catalog_rows(spark, table)
    sc.setJobGroup("fresh", "join over fresh statistics")
    fresh_result = sorted(tuple(r) for r in spark.sql(query).collect())
    sc.setJobGroup("count", "real count")
    real = spark.table(table).count()
    tracker = sc.statusTracker()
    groups = {g: sorted(tracker.getJobIdsForGroup(g)) for g in ("stale", "analyze", "fresh", "count")}
    listener_sessions.stop()

    assert (stale_rows, fresh_rows, real) == (10, 200_010, 200_010)
    assert stale_result == fresh_result == [("key 0", 66_670), ("key 1", 66_670), ("key 2", 66_670)]
    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)
    scans = {
        g: [
            (p["execution_id"], n)
            for p in plans_of(events, jobs)
            for n in p["nodes"]
            if n["operator"].startswith("Scan") and table in n["operator"]
        ]
        for g, jobs in groups.items()
    }
    assert [(n["est_rows"], n["est_source"], n["actual_rows"]) for _, n in scans["stale"]] == [
        (stale_rows, "catalog", real)
    ]
    assert [(n["est_rows"], n["est_source"], n["actual_rows"]) for _, n in scans["fresh"]] == [
        (fresh_rows, "catalog", real)
    ]

    ((stale_execution, stale_scan),) = scans["stale"]

    def panels(rows: dict[str, list[dict[str, Any]]]) -> None:
        shown = [
            (
                int(r["execution_id"]),
                int(r["node_id"]),
                int(r["estimated_rows"]),
                int(r["actual_rows"]),
                r["estimate_from"],
                r["scanned_table"],
            )
            for r in rows["Plan: estimated vs actual rows"]
            if table in str(r["operator"])
        ]
        assert (stale_execution, stale_scan["node_id"], 10, real, "catalog", f"spark_catalog.default.{table}") in shown
        assert rows["Plan: estimated vs actual rows"][0]["off_by"] == round(real / 10, 1)  # furthest off first
        plans = {p["execution_id"]: p for p in events.of("sql_plan_stats")}
        assert {int(r["execution"].split()[1]) for r in rows["Codegen coverage"]} == set(plans)

    # a test-sized query: its execution's task time is under the rule's floors of time lost (1 s, 10 s for critical)
    findings = on_both(
        kafka_broker,
        topic,
        events,
        tmp_path,
        server_url,
        PLAN_RULES,
        panels,
        plan_misestimate={"min_time_lost_ms": 0, "critical_min_time_lost_ms": 0},
    )
    # ANALYZE itself reads the table while the catalog still says 10 rows: Spark misestimates that scan too
    expected = {(e, n["node_id"]) for g in ("stale", "analyze") for e, n in scans[g]}
    assert {(f.rule, f.sql_execution_id, f.node_id) for f in findings} == {
        ("plan_misestimate", e, n) for e, n in expected
    }
    (finding,) = [f for f in findings if f.sql_execution_id == stale_execution]
    assert (finding.severity, finding.stage_id, finding.stage_name) == ("critical", None, stale_scan["operator"])
    run_ms = sum(
        s["run_time_ms"]["sum"] for s in events.of("stage_completed") if s.get("sql_execution_id") == stale_execution
    )
    assert finding.evidence == {
        "estimated_rows": 10,
        "actual_rows": real,
        "ratio": real / 10,
        "from_catalog": 1,
        "time_lost_ms": run_ms,  # issue 22: the execution's task time
    }
    assert finding.explanation == (
        f"{stale_scan['operator']}: the statistics of spark_catalog.default.{table} count 10 rows, the scan read "
        f"{real} (20001× more): rows were added after its last ANALYZE, the plan was sized on stale statistics"
    )
    assert f"ANALYZE TABLE spark_catalog.default.{table} COMPUTE STATISTICS FOR ALL COLUMNS" in finding.suggested_fix
    assert "spark.sql.cbo.enabled=true also sizes" in finding.suggested_fix and "BROADCAST" in finding.suggested_fix


def test_tpch_with_cbo_misestimates_only_over_stale_statistics(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tpch: Tpch, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    conf = {
        **listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path / "spool"),
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.cbo.enabled": "true",
        "spark.sql.cbo.joinReorder.enabled": "true",
    }
    spark = start_session(listener_sessions, conf)
    sc = spark.sparkContext
    for table in ("customer", "orders"):  # copies: the loads below must not change the session's TPC-H data
        shutil.copytree(tpch.location(table), tmp_path / table)
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        spark.sql(f"CREATE TABLE {table} USING parquet LOCATION '{tmp_path / table}'")
        spark.sql(f"ANALYZE TABLE {table} COMPUTE STATISTICS FOR ALL COLUMNS")
    sc.setJobGroup("fresh", "q13 over fresh statistics")
    fresh = spark.sql(tpch.queries[13]).collect()
    for load in range(1, 11):  # ten more loads of the same rows after the ANALYZE: 11x the rows it counted
        shutil.copy(tmp_path / "orders" / "part-0.parquet", tmp_path / "orders" / f"part-{load}.parquet")
    spark.sql("REFRESH TABLE orders")  # the new files are read; the statistics stay those of the ANALYZE
    sc.setJobGroup("stale", "q13 over stale statistics")
    stale = spark.sql(tpch.queries[13]).collect()
    tracker = sc.statusTracker()
    groups = {g: sorted(tracker.getJobIdsForGroup(g)) for g in ("fresh", "stale")}
    listener_sessions.stop()

    # q13 counts customers by their number of orders: every count is 11x after the loads, the buckets as many
    assert sorted((11 * r[0], r[1]) for r in fresh) == sorted((r[0], r[1]) for r in stale) and len(fresh) == 37
    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    findings = collected_findings(
        kafka_broker,
        topic,
        events,
        f"chdb://{tmp_path / 'chdb'}",
        ("plan_misestimate",),
        plan_misestimate={"min_time_lost_ms": 0, "critical_min_time_lost_ms": 0},
    )
    stale_executions = executions_of(events, groups["stale"])
    assert executions_of(events, groups["fresh"]) and stale_executions
    (finding,) = findings
    scan = "Scan parquet spark_catalog.default.orders"
    assert (finding.sql_execution_id in stale_executions, finding.stage_name, finding.severity) == (
        True,
        scan,
        "warning",
    )
    orders = ROWS_SF01["orders"]
    assert (finding.evidence["estimated_rows"], finding.evidence["actual_rows"]) == (orders, 11 * orders)
    assert finding.explanation == (
        f"{scan}: the statistics of spark_catalog.default.orders count {orders} rows, the scan read {11 * orders} "
        "(11× more): rows were added after its last ANALYZE, the plan was sized on stale statistics"
    )
    assert finding.suggested_fix.startswith(
        "Refresh the statistics after every load that changes the table: ANALYZE TABLE spark_catalog.default.orders "
        "COMPUTE STATISTICS FOR ALL COLUMNS"
    )


@pytest.mark.parametrize(("columns", "outside"), [(300, True), (10, False)])
def test_an_aggregate_outside_whole_stage_codegen_is_a_codegen_finding(
    columns: int,
    outside: bool,
    listener_sessions: SparkSessions,
    kafka_broker: KafkaService,
    tmp_path: Path,
    server_url: str,
) -> None:
    topic, events, job_ids = wide_aggregate_app(listener_sessions, kafka_broker, tmp_path, columns)
    (plan,) = plans_of(events, job_ids)
    outside_codegen = [n for n in plan["nodes"] if n.get("codegen_fallback")]
    aggregates = [n for n in plan["nodes"] if n["operator"] == "HashAggregate"]
    assert len(aggregates) == 2 and all((n in outside_codegen) == outside for n in aggregates)
    cpu_ms = (
        sum(s["cpu_time_ns"] for s in events.of("stage_completed") if s.get("sql_execution_id") == plan["execution_id"])
        / 1e6
    )

    # the default CPU floor (60 s) keeps a 1,000-row aggregate quiet; a 1 ms floor shows the rule itself
    assert collected_findings(kafka_broker, topic, events, f"chdb://{tmp_path / 'quiet'}", PLAN_RULES) == []

    def panels(rows: dict[str, list[dict[str, Any]]]) -> None:
        (coverage,) = [r for r in rows["Codegen coverage"] if r["execution"] == f"sql {plan['execution_id']}"]
        assert int(coverage["operators_outside_codegen"]) == len(outside_codegen)
        assert int(coverage["operators_in_codegen"]) == sum(
            1 for n in plan["nodes"] if n.get("codegen_stage", -1) > 0 and not n.get("codegen_fallback")
        )

    findings = on_both(
        kafka_broker,
        topic,
        events,
        tmp_path,
        server_url,
        PLAN_RULES,
        panels,
        codegen_off={"min_cpu_ms": 1, "min_time_lost_ms": 0},
    )
    if not outside:
        assert outside_codegen == [] and findings == []
        return
    first = outside_codegen[0]
    assert first["codegen_fallback"] == f"too many fields: {columns + 1} > spark.sql.codegen.maxFields=100"
    (finding,) = findings
    assert (finding.rule, finding.severity, finding.sql_execution_id, finding.node_id, finding.stage_name) == (
        "codegen_off",
        "warning",
        plan["execution_id"],
        first["node_id"],
        "HashAggregate",
    )
    assert finding.evidence["operators_outside_codegen"] == len(outside_codegen)
    assert finding.evidence["plan_nodes"] == len(plan["nodes"]) and finding.evidence["codegen_max_fields"] == 100
    assert finding.evidence["execution_cpu_ms"] == pytest.approx(cpu_ms) and cpu_ms >= 1
    assert finding.explanation.startswith(
        f"HashAggregate runs without whole-stage codegen (too many fields: {columns + 1} > "
        f"spark.sql.codegen.maxFields=100) with {len(outside_codegen) - 1} other operator(s), in a SQL execution"
    )
    assert "Split the projection or aggregation" in finding.suggested_fix
    assert "spark.sql.codegen.maxFields (now 100) with care" in finding.suggested_fix


@pytest.mark.parametrize("limit", [1_000, None])
def test_a_generated_method_over_the_huge_method_limit_is_a_codegen_finding(
    limit: int | None,
    listener_sessions: SparkSessions,
    kafka_broker: KafkaService,
    tmp_path: Path,
    server_url: str,
) -> None:
    topic, events, job_ids = wide_aggregate_app(
        listener_sessions, kafka_broker, tmp_path, 40, limit, codegen_stats=True
    )
    (plan,) = plans_of(events, job_ids)
    stages = {n["codegen_stage"]: n["codegen_method_bytes"] for n in plan["nodes"]
              if n["operator"].startswith("WholeStageCodegen")}  # fmt: skip
    outside_codegen = [n for n in plan["nodes"] if n.get("codegen_fallback")]
    aggregates = [n for n in plan["nodes"] if n["operator"] == "HashAggregate"]
    assert len(aggregates) == 2 and all(n.get("codegen_stage", -1) in stages for n in aggregates)

    def panels(rows: dict[str, list[dict[str, Any]]]) -> None:
        (coverage,) = [r for r in rows["Codegen coverage"] if r["execution"] == f"sql {plan['execution_id']}"]
        assert int(coverage["operators_outside_codegen"]) == len(outside_codegen)
        assert int(coverage["operators_in_codegen"]) == sum(
            1 for n in plan["nodes"] if n.get("codegen_stage", -1) > 0 and not n.get("codegen_fallback")
        )

    findings = on_both(
        kafka_broker,
        topic,
        events,
        tmp_path,
        server_url,
        PLAN_RULES,
        panels,
        codegen_off={"min_cpu_ms": 1, "min_time_lost_ms": 0},
    )
    if limit is None:
        assert all(0 < b <= 65_535 for b in stages.values()) and plan["codegen_huge_method_limit"] == 65_535
        assert outside_codegen == [] and findings == []
        return
    assert plan["codegen_huge_method_limit"] == limit and all(b > limit for b in stages.values()), stages
    assert all(n in outside_codegen for n in aggregates)
    first = outside_codegen[0]
    reason = f"huge method: {stages[first['codegen_stage']]} bytes > spark.sql.codegen.hugeMethodLimit={limit}"
    assert first["codegen_fallback"] == reason
    (finding,) = findings
    assert (finding.rule, finding.severity, finding.sql_execution_id, finding.node_id, finding.stage_name) == (
        "codegen_off",
        "warning",
        plan["execution_id"],
        first["node_id"],
        "HashAggregate",
    )
    assert finding.evidence["operators_outside_codegen"] == len(outside_codegen)
    assert finding.explanation.startswith(
        f"HashAggregate runs without whole-stage codegen ({reason}) with {len(outside_codegen) - 1} other "
        "operator(s), in a SQL execution"
    )
    assert "do not raise spark.sql.codegen.hugeMethodLimit" in finding.suggested_fix


# ------------------------------------------------------------------------------------------------- streaming


def _label(progress: list[dict[str, Any]]) -> str:
    return f"{progress[0]['name']} ({progress[0]['id']})"


def _stored_progress(storage: Storage, query_id: str) -> list[tuple[int, int]]:
    rows = storage.query(
        f"SELECT batch_id, num_input_rows FROM {storage.database}.streaming_query_progress_dedup "
        f"WHERE query_id = '{query_id}' ORDER BY batch_id"
    )
    return [(int(r["batch_id"]), int(r["num_input_rows"])) for r in rows]


def streaming_app(sessions: SparkSessions, kafka: KafkaService, tmp_path: Path) -> tuple[str, Any]:
    """A session with the listener sending every progress event to a new topic: (topic, session)."""
    topic = new_topic(kafka.bootstrap_servers)
    conf = listener_settings(kafka.bootstrap_servers, topic, tmp_path / "spool", streaming_progress_interval_ms=0)
    return topic, start_session(sessions, conf)


def rate(spark: Any, rows_per_second: int) -> Any:
    return spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).option("numPartitions", 2).load()


def test_a_saturated_stream_is_found_while_it_runs_and_an_idle_one_is_not(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path, server_url: str
) -> None:
    topic, spark = streaming_app(listener_sessions, kafka_broker, tmp_path)

    def slow_sink(batch: Any, batch_id: int) -> None:
        batch.count()
        # the workload: a sink slower than the trigger, and than the rate source's one-second offsets (not a wait)
        time.sleep(1.5)

    saturated = (
        rate(spark, 50)
        .writeStream.foreachBatch(slow_sink)
        .queryName("saturated")
        .option("checkpointLocation", str(tmp_path / "chk-saturated"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    idle = rate(spark, 50).writeStream.format("memory").queryName("idle").trigger(processingTime="1 second").start()
    try:
        with collecting(kafka_broker, topic, f"chdb://{tmp_path / 'chdb'}") as collector:
            storage = collector.storage
            assert storage is not None

            def fired() -> list[Finding]:
                if min(len(_stored_progress(storage, str(q.id))) for q in (saturated, idle)) < 10:
                    return []
                return [f for f in _findings(storage, STREAMING_RULES)]

            live = wait_until(fired, 120.0, "a streaming finding while the queries run")
            still_running = saturated.isActive and idle.isActive
            live_progress = recent_progress(saturated)
    finally:
        saturated.stop()
        idle.stop()
    progress = {q.name: recent_progress(q) for q in (saturated, idle)}
    listener_sessions.stop()

    assert still_running
    (finding,) = live
    assert (finding.rule, finding.severity, finding.running, finding.stage_name) == (
        "streaming_saturated",
        "warning",
        True,
        _label(live_progress),
    )
    assert (finding.stage_id, finding.sql_execution_id, finding.node_id) == (None, None, None)
    assert finding.evidence["busy_share"] >= 0.9 and finding.evidence["batches"] == 10
    assert finding.evidence["avg_batch_ms"] >= 1500
    assert finding.explanation.startswith(
        f"Over batches {int(finding.evidence['first_batch_id'])}–{int(finding.evidence['last_batch_id'])} the query "
        "was busy "
    )
    assert "maxOffsetsPerTrigger" in finding.suggested_fix

    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)

    def panels(rows: dict[str, list[dict[str, Any]]]) -> None:
        runs = {
            r["query"]: (int(r["batches"]), int(r["last_batch_id"]), int(r["input_rows"]), r["state"])
            for r in rows["Streaming queries"]
        }
        assert runs == {
            _label(p): (len(p), p[-1]["batchId"], sum(b["numInputRows"] for b in p), "stopped")
            for p in progress.values()
        }
        assert [(r["rule"], r["query"]) for r in rows["Streaming findings"]] == [
            ("streaming_saturated", _label(progress["saturated"]))
        ]
        if "Batch duration vs interval" in rows:
            assert {r["query"] for r in rows["Batch duration vs interval"]} == set(runs)

    findings = on_both(kafka_broker, topic, events, tmp_path / "after", server_url, STREAMING_RULES, panels)
    assert [(f.rule, f.stage_name, f.running) for f in findings] == [
        ("streaming_saturated", _label(progress["saturated"]), False)
    ]
    with collecting(kafka_broker, topic, f"chdb://{tmp_path / 'after' / 'chdb'}") as collector:
        assert collector.storage is not None
        for name, theirs in progress.items():
            assert _stored_progress(collector.storage, theirs[0]["id"]) == [
                (p["batchId"], p["numInputRows"]) for p in theirs
            ], name
    last = progress["saturated"][-10:]
    (after,) = findings
    assert (after.evidence["first_batch_id"], after.evidence["last_batch_id"]) == (
        last[0]["batchId"],
        last[-1]["batchId"],
    )
    durations = [p["durationMs"]["triggerExecution"] for p in last]
    assert after.evidence["avg_batch_ms"] == pytest.approx(sum(durations) / 10)


STATE_RULE = "streaming_state_growth"


def test_state_without_a_watermark_grows_and_one_with_a_watermark_does_not(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path, server_url: str
) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    topic, spark = streaming_app(listener_sessions, kafka_broker, tmp_path)
    # 2 s triggers: on two shared cores, 1 s batches of the growing state get busy enough to be saturated as well
    unbounded = (
        rate(spark, 1000)
        .groupBy("value")
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .queryName("per_value")
        .option("checkpointLocation", str(tmp_path / "chk-unbounded"))
        .trigger(processingTime="2 seconds")
        .start()
    )
    windowed = (
        rate(spark, 1000)
        .withWatermark("timestamp", "1 second")
        .groupBy(F.window("timestamp", "1 second"))
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .queryName("per_second")
        .option("checkpointLocation", str(tmp_path / "chk-windowed"))
        .trigger(processingTime="2 seconds")
        .start()
    )
    try:
        wait_until(
            lambda: all(len(q.recentProgress) >= 12 for q in (unbounded, windowed)),
            180.0,
            "12 micro-batches of both queries",
        )
    finally:
        unbounded.stop()
        windowed.stop()
    progress = {q.name: recent_progress(q) for q in (unbounded, windowed)}
    listener_sessions.stop()

    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)
    evicted = sum(
        op["numRowsRemoved"] + op["numRowsDroppedByWatermark"]
        for p in progress["per_second"][-10:]
        for op in p["stateOperators"]
    )
    assert evicted > 0

    def panels(rows: dict[str, list[dict[str, Any]]]) -> None:
        peak = {r["query"]: 0 for r in rows.get("State rows", [])}
        for r in rows.get("State rows", []):
            peak[r["query"]] = max(peak[r["query"]], int(r["state_rows"]))
        if "State rows" in rows:
            assert peak[_label(progress["per_value"])] == max(
                p["stateOperators"][0]["numRowsTotal"] for p in progress["per_value"]
            )
        # Only the state rule: whether these batches also fill their 2 s trigger (streaming_saturated, tested above
        # with a workload built to be saturated) depends on the machine's load: a CI run busy with other Spark
        # tests took 2.1-4.5 s a batch, and saturated was then a right finding on both queries.
        assert [(r["rule"], r["query"]) for r in rows["Streaming findings"] if r["rule"] == STATE_RULE] == [
            (STATE_RULE, _label(progress["per_value"]))
        ]

    findings = on_both(kafka_broker, topic, events, tmp_path, server_url, (STATE_RULE,), panels)
    assert [(f.rule, f.severity, f.stage_name, f.running) for f in findings] == [
        ("streaming_state_growth", "warning", _label(progress["per_value"]), False)
    ]
    last = progress["per_value"][-10:]
    rows = [p["stateOperators"][0]["numRowsTotal"] for p in last]
    (finding,) = findings
    assert {
        k: finding.evidence[k]
        for k in (
            "state_rows_first",
            "state_rows_last",
            "rows_evicted",
            "first_batch_id",
            "last_batch_id",
            "watermark_ms",
        )
    } == {
        "state_rows_first": rows[0],
        "state_rows_last": rows[-1],
        "rows_evicted": 0,
        "first_batch_id": last[0]["batchId"],
        "last_batch_id": last[-1]["batchId"],
        "watermark_ms": 0,
    }
    assert finding.value == rows[-1] - rows[0]
    assert finding.explanation.startswith(
        f"Over batches {last[0]['batchId']}–{last[-1]['batchId']} the state grew from {rows[0]} to {rows[-1]} rows ("
    )
    assert finding.explanation.endswith(
        ") and there is no watermark to evict any: it grows until the executors run out of memory"
    )
    memory = [sum(op["memoryUsedBytes"] for op in p["stateOperators"]) for p in last]
    assert (finding.evidence["state_bytes_first"], finding.evidence["state_bytes_last"]) == (memory[0], memory[-1])
    assert "withWatermark" in finding.suggested_fix


def _produce(bootstrap: str, topic: str, rows_per_second: int, stop: threading.Event) -> None:
    """The source's arrivals: ``rows_per_second`` messages a second, sent every tenth of a second, until ``stop``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent, started = 0, time.monotonic()
    while not stop.wait(0.1):  # the workload's pace, not a wait for a result
        due = int((time.monotonic() - started) * rows_per_second)
        for i in range(sent, due):
            producer.produce(topic, value=f"row-{i}".encode())
        sent = max(sent, due)
        producer.poll(0)
    producer.flush(10)


def kafka_stream(spark: Any, bootstrap: str, topic: str, max_offsets: int | None) -> Any:
    """The topic read with the ``sparktap-kafka`` source, at most ``max_offsets`` rows a micro-batch (or all)."""
    register(spark)
    reader = (
        spark.readStream.format("sparktap-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("parse", "raw")
    )
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets)
    return reader.load()


def test_a_capped_stream_whose_backlog_grows_is_behind_and_the_same_uncapped_keeps_up(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    """Two topics receive 400 rows/s each; the same query reads each on a 1 s trigger, once with
    maxOffsetsPerTrigger=100 (at most 100 rows/s: a quarter of the arrivals), once without. Spark's input rate is the
    capped intake, so only the backlog (latest minus end offset, per batch) tells that the first falls behind: found
    while it runs, with the backlog's growth (~300 rows/s), the throughput, the arrival rate and the time to catch
    up. The uncapped one reads all that arrived each batch: its backlog stays flat and nothing is found. (Busy share
    is set to 100 % here: on shared cores either query's batches may fill their trigger, which is another finding.)"""
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic(bootstrap)
    conf = listener_settings(bootstrap, topic, tmp_path / "spool", streaming_progress_interval_ms=0)
    spark = start_session(listener_sessions, conf)
    capped_topic, uncapped_topic = new_topic(bootstrap), new_topic(bootstrap)
    stop = threading.Event()
    producers = [
        threading.Thread(target=_produce, args=(bootstrap, t, 400, stop), daemon=True)
        for t in (capped_topic, uncapped_topic)
    ]
    for p in producers:
        p.start()
    queries: dict[str, Any] = {}
    for name, source, cap in (("capped", capped_topic, 100), ("uncapped", uncapped_topic, None)):
        queries[name] = (
            kafka_stream(spark, bootstrap, source, cap)
            .writeStream.format("noop")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / f"chk-{name}"))
            .trigger(processingTime="1 second")
            .start()
        )
        # one source runner starting at a time: Spark gives a Python runner 10 s to connect back
        wait_until(lambda q=queries[name]: q.lastProgress or q.exception(), 120.0, f"the {name} query's first batch")
    backlog_only = {"busy_share": 1.0}  # back-to-back batches stay under 100 % busy: only "behind" can fire
    try:
        with collecting(kafka_broker, topic, f"chdb://{tmp_path / 'chdb'}") as collector:
            storage = collector.storage
            assert storage is not None

            def fired() -> list[Finding]:
                if min(len(_stored_progress(storage, str(q.id))) for q in queries.values()) < 6:
                    return []
                return _findings(storage, ("streaming_saturated",), streaming_saturated=backlog_only)

            live = wait_until(fired, 180.0, "the behind finding while the queries run")
            running = all(q.isActive for q in queries.values())
            labels = {name: _label(recent_progress(q)) for name, q in queries.items()}
            uncapped_backlogs = [
                int(r["b"])
                for r in storage.query(
                    f"SELECT backlog AS b FROM {storage.database}.streaming_query_progress_dedup "
                    f"ARRAY JOIN sources_backlog AS backlog WHERE query_id = '{queries['uncapped'].id}'"
                )
            ]
    finally:
        stop.set()
        for q in queries.values():
            q.stop()
        for p in producers:
            p.join(15)
    listener_sessions.stop()

    assert running
    (behind,) = live
    assert (behind.rule, behind.stage_name, behind.running) == ("streaming_saturated", labels["capped"], True)
    assert "falling behind" in behind.explanation
    e = behind.evidence
    assert e["backlog_last"] - e["backlog_first"] >= 1_000
    assert 0 < e["throughput_rows_per_s"] <= 100 * 1.05  # never more than the cap allows
    assert 150 <= e["backlog_growth_rows_per_s"] <= 400  # ~300: 400 arriving, at most 100 taken
    assert e["arrival_rows_per_s"] == pytest.approx(e["throughput_rows_per_s"] + e["backlog_growth_rows_per_s"])
    assert e["catch_up_ms"] == pytest.approx(e["backlog_last"] / e["throughput_rows_per_s"] * 1000)
    assert e["time_lost_ms"] == e["catch_up_ms"]
    # the uncapped query read up to the latest offset every batch: a known, flat backlog
    assert len(uncapped_backlogs) >= 6 and min(uncapped_backlogs) >= 0
    assert max(uncapped_backlogs) - min(uncapped_backlogs) < 1_000

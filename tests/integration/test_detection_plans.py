"""The plan rules end to end: real Spark local[2] with the listener → real broker → the real collector → ClickHouse
(chDB, and the same topic collected again into clickhouse-server 18.16) → the detection query and the plan panels.

- Stale statistics: a table analyzed at 10 rows, then 200,000 rows added under its location and the table refreshed;
  a join over it gives a scan whose estimate is the catalog's row count and whose actual rows are the table's real
  count, and exactly that scan is a plan misestimate; after a fresh ANALYZE the same query gives none.
- TPC-H q13 with CBO on and ``ANALYZE … FOR ALL COLUMNS``: no plan misestimate on fresh statistics (whatever the
  selectivity model misjudges); with ten more loads of ``orders`` after the ANALYZE, one: its scan, naming the table's
  stale statistics.
- Codegen: an aggregate over 300 columns runs outside whole-stage codegen and is one codegen finding; over 10 columns
  it is inside and gives none. An aggregate over 40 columns whose generated method is over a lowered
  spark.sql.codegen.hugeMethodLimit ran interpreted and is one codegen finding (huge method); at the default limit none.

The streaming rules' end-to-end tests are in ``test_detection_streaming.py``; the two share
``tests/support/plan_streaming.py``.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
from tests.support.listener_apps import wide_aggregate_app
from tests.support.plan_streaming import collected_findings, on_both, server_database

pytestmark = pytest.mark.integration

PLAN_RULES = ("plan_misestimate", "codegen_off")


@pytest.fixture
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database on clickhouse-server 18.16 (or SPARKTAP_TEST_CLICKHOUSE), dropped afterwards."""
    with server_database(request.getfixturevalue("clickhouse_server")) as url:
        yield url


def executions_of(events: AppEvents, job_ids: list[int]) -> set[int]:
    return {e["sql_execution_id"] for e in events.of("job_start") if e["job_id"] in job_ids and "sql_execution_id" in e}


def plans_of(events: AppEvents, job_ids: list[int]) -> list[dict[str, Any]]:
    executions = executions_of(events, job_ids)
    return [p for p in events.of("sql_plan_stats") if p["execution_id"] in executions]


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

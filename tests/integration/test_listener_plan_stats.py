"""sql_plan_stats in real applications: the optimizer's estimate beside the actual rows (stale table statistics),
whole-stage codegen membership (an aggregate over too many fields falls out of it) and each codegen stage's largest
generated method (past spark.sql.codegen.hugeMethodLimit Spark runs the stage interpreted). Real Spark local[2]."""

from __future__ import annotations

import uuid
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
from tests.support.listener_apps import wide_aggregate_app

pytestmark = pytest.mark.integration


def _plans_of_group(spark: Any, events: AppEvents, job_ids: list[int]) -> list[dict[str, Any]]:
    starts = [e for e in events.of("job_start") if e["job_id"] in job_ids]
    executions = {e["sql_execution_id"] for e in starts if "sql_execution_id" in e}
    return [e for e in events.of("sql_plan_stats") if e["execution_id"] in executions]


def test_stale_table_statistics_show_as_estimate_vs_actual_rows(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    conf = listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path / "spool")
    cbo = {"spark.sql.cbo.joinReorder.enabled": "false", "spark.sql.statistics.histogram.enabled": "false"}
    spark = start_session(listener_sessions, {**conf, **cbo})
    sc = spark.sparkContext
    table, location = f"orders_{uuid.uuid4().hex[:8]}", tmp_path / "orders"
    spark.range(0, 10, 1, 1).selectExpr("id", "id % 3 AS k").write.parquet(str(location))
    spark.sql(f"CREATE TABLE {table} USING parquet LOCATION '{location}'")
    spark.sql(f"ANALYZE TABLE {table} COMPUTE STATISTICS")  # the catalog now says 10 rows
    spark.range(10, 50_000, 1, 2).selectExpr("id", "id % 3 AS k").write.mode("append").parquet(str(location))
    spark.sql(f"REFRESH TABLE {table}")  # the files are seen, the statistics stay stale
    sc.setJobGroup("stale", "stale statistics")
    assert spark.table(table).groupBy("k").count().count() == 3
    spark.sql(f"ANALYZE TABLE {table} COMPUTE STATISTICS")
    sc.setJobGroup("fresh", "fresh statistics")
    assert spark.table(table).groupBy("k").count().count() == 3
    # cost-based optimization on fresh column statistics: a Filter over the scan has its own estimate, and the scan
    # its own (the relation's rows, before the filter), though the planner links the scan to the Filter; only nodes
    # the optimizer sized carry an estimate, so the filter is joined
    spark.sql(f"ANALYZE TABLE {table} COMPUTE STATISTICS FOR ALL COLUMNS")
    spark.conf.set("spark.sql.cbo.enabled", "true")
    spark.conf.set("spark.sql.adaptive.enabled", "false")  # one planning, where the join sizes its sides
    sc.setJobGroup("cbo", "cbo")
    keys = spark.range(0, 3, 1, 1).withColumnRenamed("id", "k")  # a join: planning it sizes the filter (CBO)
    assert spark.table(table).where("k = 1").join(keys, "k").count() == 16_667
    spark.conf.set("spark.sql.cbo.enabled", "false")
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    real = spark.table(table).count()
    catalog_rows = int(
        next(r for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect() if r[0] == "Statistics")[1]
        .split(",")[1].strip().split(" ")[0]
    )  # fmt: skip
    tracker = sc.statusTracker()
    groups = {g: sorted(tracker.getJobIdsForGroup(g)) for g in ("stale", "fresh", "cbo")}
    listener_sessions.stop()

    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)
    assert real == 50_000 and catalog_rows == 50_000
    (start,) = events.of("app_start")
    assert {k: start["properties"].get(k) for k in cbo} == cbo  # the CBO settings are kept (detection reads them)
    scans = {}
    for group, job_ids in groups.items():
        plans = _plans_of_group(spark, events, job_ids)
        assert plans, f"no sql_plan_stats for {group}"
        scans[group] = [n for p in plans for n in p["nodes"] if n["operator"].startswith("Scan parquet")]
        assert scans[group], [n["operator"] for p in plans for n in p["nodes"]]

    def seen(scan: dict[str, Any]) -> tuple[int, str, int]:
        return scan.get("est_rows", -1), scan.get("est_source", ""), scan.get("actual_rows", -1)

    assert [seen(s) for s in scans["stale"]] == [(10, "catalog", 50_000)] * len(scans["stale"]), scans["stale"]
    assert all(table in s["operator"] for s in scans["stale"])
    assert [seen(s) for s in scans["fresh"]] == [(50_000, "catalog", 50_000)] * len(scans["fresh"]), scans["fresh"]
    assert [seen(s)[::2] for s in scans["cbo"]] == [(50_000, 50_000)] * len(scans["cbo"]), scans["cbo"]
    nodes = [n for p in _plans_of_group(spark, events, groups["cbo"]) for n in p["nodes"]]
    by_id = {n["node_id"]: n for n in nodes}

    def filter_above(scan: dict[str, Any]) -> dict[str, Any] | None:  # through ColumnarToRow, InputAdapter …
        node: dict[str, Any] | None = scan
        while node is not None and node["operator"] != "Filter":
            node = by_id.get(node.get("parent_id", -1))
        return node

    filters = [f for f in map(filter_above, scans["cbo"]) if f is not None]  # the table's filter
    assert filters and all(f["actual_rows"] == 16_667 for f in filters), filters
    assert all(abs(f["est_rows"] - 16_667) <= 1_700 for f in filters), filters  # its own estimate: ~ rows / 3 keys


@pytest.mark.parametrize(("columns", "fused"), [(300, False), (10, True)])
def test_an_aggregate_over_too_many_fields_runs_without_whole_stage_codegen(
    columns: int, fused: bool, listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    _, events, job_ids = wide_aggregate_app(listener_sessions, kafka_broker, tmp_path, columns)
    plans = _plans_of_group(None, events, job_ids)
    assert plans
    assert {p["codegen_max_fields"] for p in plans} == {100} and all(p["whole_stage_codegen"] for p in plans)
    aggregates = [n for p in plans for n in p["nodes"] if n["operator"] == "HashAggregate"]
    assert len(aggregates) >= 2  # partial and final
    if fused:
        assert all(n.get("codegen_stage", -1) >= 1 and "codegen_fallback" not in n for n in aggregates)
    else:
        fields = columns + 1  # the grouping key and one sum per column
        assert all(n.get("codegen_stage", -1) == -1 for n in aggregates)
        assert {n["codegen_fallback"] for n in aggregates} == {
            f"too many fields: {fields} > spark.sql.codegen.maxFields=100"
        }


HUGE_METHOD_COLUMNS = 40
LOWERED_LIMIT = 1_000


def _method_bytes(plan: dict[str, Any]) -> dict[int, int]:
    """Codegen stage -> its largest generated method, from the WholeStageCodegen nodes."""
    return {n["codegen_stage"]: n["codegen_method_bytes"] for n in plan["nodes"]
            if n["operator"].startswith("WholeStageCodegen")}  # fmt: skip


def test_a_generated_method_over_the_huge_method_limit_shows_and_its_operators_ran_interpreted(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    _, default_events, default_jobs = wide_aggregate_app(
        listener_sessions, kafka_broker, tmp_path / "default", HUGE_METHOD_COLUMNS, codegen_stats=True
    )
    _, huge_events, huge_jobs = wide_aggregate_app(
        listener_sessions, kafka_broker, tmp_path / "huge", HUGE_METHOD_COLUMNS, LOWERED_LIMIT, codegen_stats=True
    )
    (default,) = _plans_of_group(None, default_events, default_jobs)
    (huge,) = _plans_of_group(None, huge_events, huge_jobs)
    assert default["codegen_huge_method_limit"] == 65_535 and huge["codegen_huge_method_limit"] == LOWERED_LIMIT
    sizes = _method_bytes(default)
    # the same query generates the same code: the same method sizes whatever the limit
    assert len(sizes) >= 2 and _method_bytes(huge) == sizes, (sizes, _method_bytes(huge))
    assert all(0 < b <= 65_535 for b in sizes.values()) and not [n for n in default["nodes"] if "codegen_fallback" in n]
    over = {stage: b for stage, b in sizes.items() if b > LOWERED_LIMIT}
    assert over, sizes
    for n in huge["nodes"]:
        stage = n.get("codegen_stage", -1)
        inside = stage in over and not n["operator"].startswith(("WholeStageCodegen", "InputAdapter"))
        expected = (
            f"huge method: {over[stage]} bytes > spark.sql.codegen.hugeMethodLimit={LOWERED_LIMIT}" if inside else None
        )
        assert n.get("codegen_fallback") == expected, n
    aggregates = [n for n in huge["nodes"] if n["operator"] == "HashAggregate"]
    assert len(aggregates) == 2 and any("codegen_fallback" in n for n in aggregates), huge["nodes"]


def test_generated_methods_are_measured_only_when_asked_for(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    _, events, job_ids = wide_aggregate_app(listener_sessions, kafka_broker, tmp_path, HUGE_METHOD_COLUMNS,
                                            LOWERED_LIMIT)  # fmt: skip
    (plan,) = _plans_of_group(None, events, job_ids)
    stages = [n for n in plan["nodes"] if n["operator"].startswith("WholeStageCodegen")]
    assert len(stages) >= 2 and not [n for n in plan["nodes"] if "codegen_method_bytes" in n or "codegen_fallback" in n]

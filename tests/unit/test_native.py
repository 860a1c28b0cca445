"""detection/native.py: the engine and role of plan operators by name, the native vs JVM split of a plan, and the
ClickHouse expressions built from the same table (checked against ``classify`` for every name we know)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from sparktap.detection.native import NAMES, PlanNode, classify, engine_sql, engines_of, role_sql, summary

# names as real plans carry them: the Photon log (Databricks 13.3), the RAPIDS logs of tests/corpus/eventlogs/, a
# Comet 0.12.0 run on Spark 3.5, Spark's own operators and plan structure
KNOWN = {
    "PhotonScan parquet ": ("photon", "native"),
    "PhotonAgg": ("photon", "native"),
    "PhotonShuffleExchangeSink": ("photon", "native"),
    "PhotonResultStage": ("photon", "native"),
    "ColumnarToRow": ("", "to_row"),
    "RowToColumnar": ("", "to_columnar"),
    "CometScan [native_iceberg_compat] parquet ": ("comet", "native"),
    "CometFilter": ("comet", "native"),
    "CometColumnarExchange": ("comet", "native"),
    "CometColumnarToRow": ("comet", "to_row"),
    "CometSparkRowToColumnar": ("comet", "to_columnar"),
    "CometSinkPlaceHolder": ("comet", "neutral"),
    "GpuScan parquet ": ("rapids", "native"),
    "GpuCoalesceBatches": ("rapids", "native"),
    "GpuColumnarToRow": ("rapids", "to_row"),
    "GpuRowToColumnar": ("rapids", "to_columnar"),
    "ProjectExecTransformer": ("gluten", "native"),
    "InputIteratorTransformer": ("gluten", "neutral"),
    "WholeStageCodegenTransformer (3)": ("gluten", "native"),
    "VeloxColumnarToRow": ("gluten", "to_row"),
    "RowToVeloxColumnar": ("gluten", "to_columnar"),
    "ColumnarExchange": ("gluten", "native"),
    "BatchEvalPython": ("jvm", "jvm"),
    "HashAggregate": ("jvm", "jvm"),
    "Scan parquet spark_catalog.default.t": ("jvm", "jvm"),
    "Exchange": ("jvm", "jvm"),
    "WholeStageCodegen (12)": ("", "neutral"),
    "InputAdapter": ("", "neutral"),
    "AdaptiveSparkPlan": ("", "neutral"),
    "ShuffleQueryStage": ("", "neutral"),
    "AQEShuffleRead": ("", "neutral"),
}


@pytest.mark.parametrize(("operator", "expected"), sorted(KNOWN.items()))
def test_classify(operator: str, expected: tuple[str, str]) -> None:
    assert classify(operator) == expected


def test_a_transition_is_matched_before_its_engines_prefix() -> None:
    # CometColumnarToRow starts with Comet: the exact transition must win over the prefix
    order = [n.text for n in NAMES]
    assert order.index("CometColumnarToRow") < order.index("Comet")
    assert order.index("GpuColumnarToRow") < order.index("Gpu")
    assert order.index("InputIteratorTransformer") < order.index("Transformer")


def test_summary_counts_native_and_jvm_time_and_rows() -> None:
    # the Comet plan of a query with a Python UDF: BatchEvalPython runs in the JVM between two Comet parts
    plan = [
        PlanNode("WholeStageCodegen (3)", time_ms=40),
        PlanNode("HashAggregate", actual_rows=100, time_ms=30),
        PlanNode("ColumnarToRow", actual_rows=200),
        PlanNode("InputAdapter"),
        PlanNode("AQEShuffleRead"),
        PlanNode("CometColumnarExchange", actual_rows=200, time_ms=15),
        PlanNode("HashAggregate", actual_rows=200, time_ms=20),
        PlanNode("Project", actual_rows=1000),
        PlanNode("BatchEvalPython", actual_rows=1000, time_ms=500),
        PlanNode("CometColumnarToRow", actual_rows=1000),
        PlanNode("CometFilter", actual_rows=1000, time_ms=3),
        PlanNode("CometScan parquet ", actual_rows=1200, time_ms=7),
    ]
    s = summary(plan)
    assert (s.engine, s.native_operators, s.jvm_operators, s.transitions) == ("comet", 3, 4, 2)
    assert (s.native_ms, s.jvm_ms, s.native_rows, s.jvm_rows) == (25, 550, 2400, 2300)
    assert s.native_share == pytest.approx(3 / 7)


def test_summary_of_a_plan_without_native_operators() -> None:
    s = summary([PlanNode("WholeStageCodegen (1)"), PlanNode("HashAggregate", 5, 2), PlanNode("Scan parquet t", 9, 1)])
    assert (s.engine, s.native_operators, s.jvm_operators, s.native_share, s.jvm_rows) == ("", 0, 2, 0.0, 14)


def test_engines_of() -> None:
    assert engines_of(["GpuProject", "PhotonAgg", "Sort", "ColumnarToRow"]) == ["photon", "rapids"]


def test_sql_follows_the_same_table() -> None:
    """engine_sql and role_sql evaluated by ClickHouse (chDB) agree with classify on every known name."""
    chdb = pytest.importorskip("chdb")
    names = sorted(KNOWN)
    values = ", ".join("'" + n.replace("'", "\\'") + "'" for n in names)
    sql = (
        f"SELECT op, {engine_sql('op')} AS engine, {role_sql('op')} AS role "
        f"FROM (SELECT arrayJoin([{values}]) AS op) FORMAT TSV"
    )
    rows = [line.split("\t") for line in str(chdb.query(sql)).strip().splitlines()]
    assert {r[0]: (r[1], r[2]) for r in rows} == {n: classify(n) for n in names}


CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "eventlogs"


@functools.cache
def plans_of(log: str) -> list[tuple[int, list[str]]]:
    """(execution id, node names in pre-order) of every SparkPlanInfo in a zstd event log, in log order."""
    import zstandard

    with (CORPUS / log).open("rb") as f:
        text = zstandard.ZstdDecompressor().stream_reader(f).read().decode()
    out = []
    for line in text.splitlines():
        event = json.loads(line)
        if "sparkPlanInfo" not in event:
            continue
        names: list[str] = []
        stack = [event["sparkPlanInfo"]]
        while stack:
            node = stack.pop()
            names.append(node["nodeName"])
            stack.extend(reversed(node.get("children", [])))
        out.append((int(event["executionId"]), names))
    return out


@pytest.mark.parametrize(
    ("log", "prefix", "engine"),
    [("nds_q88_photon_db_13_3.zstd", "Photon", "photon"), ("gpu_oom_eventlog.zstd", "Gpu", "rapids")],
)
def test_every_operator_of_a_real_engine_log_is_its_engines(log: str, prefix: str, engine: str) -> None:
    names = {n for _, plan in plans_of(log) for n in plan}
    engines = {n: classify(n)[0] for n in names if n.startswith(prefix)}
    assert engines and set(engines.values()) == {engine}, engines


def test_the_final_photon_plan_is_native_but_its_result_transition() -> None:
    """Databricks 13.3, TPC-DS q88: AQE's last plan of the query runs 253 Photon operators, no Spark operator, and
    one transition (ColumnarToRow above PhotonResultStage, handing rows to the driver): no fallback to report."""
    execution, plan = plans_of("nds_q88_photon_db_13_3.zstd")[-1]
    s = summary(PlanNode(op) for op in plan)
    assert (execution, s.engine, s.native_operators, s.jvm_operators, s.transitions) == (26, "photon", 253, 0, 1)
    assert plan[:3] == ["AdaptiveSparkPlan", "ResultQueryStage", "WholeStageCodegen (1)"]
    assert plan[3:6] == ["ColumnarToRow", "InputAdapter", "PhotonResultStage"]


def test_a_rapids_plan_with_cpu_subqueries() -> None:
    """RAPIDS: the GPU runs the scan, filter and projection; the scalar subqueries under GpuProject run on the CPU."""
    (plan,) = [p for _, p in plans_of("gpu_oom_eventlog.zstd") if "GpuColumnarToRow" in p]
    s = summary(PlanNode(op) for op in plan)
    assert (s.engine, s.native_operators, s.jvm_operators, s.transitions) == ("rapids", 4, 105, 1)
    assert plan[:6] == ["AdaptiveSparkPlan", "GpuColumnarToRow", "GpuProject", "GpuCoalesceBatches", "GpuFilter",
                        "GpuScan parquet "]  # fmt: skip

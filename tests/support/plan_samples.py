"""Synthetic applications for the plan and streaming rules (issue 16): SQL executions whose ``sql_plan_stats`` show
a scan sized on stale statistics, a misestimated filter under a join (alone, and under a reused exchange) and an
aggregate outside whole-stage codegen; streaming queries falling behind and growing their state; and the controls.
Built with ``sample_app.App``, so every event is valid against the contract.
"""

from __future__ import annotations

from typing import Any

from sparktap.detection.thresholds import MiB
from tests.support.sample_app import BASE_TIME_MS, App


def plan_node(node_id: int, parent: int, operator: str, **fields: Any) -> dict[str, Any]:
    """One node of a ``sql_plan_stats`` event: no estimate, no actual rows, no codegen unless given."""
    return {
        "node_id": node_id,
        "parent_id": parent,
        "operator": operator,
        "est_rows": -1,
        "est_bytes": -1,
        "est_source": "",
        "actual_rows": -1,
        "codegen_stage": -1,
        "codegen_fallback": "",
        "codegen_duration_ms": -1,
        **fields,
    }


def plans(app_id: str = "app-plans", at_ms: int = BASE_TIME_MS, stale: bool = True) -> App:
    """SQL execution 3: a broadcast join whose orders scan the catalog puts at 10 rows (2,000,000 read) and an
    aggregate over 301 fields outside whole-stage codegen, on 120 s of executor CPU. ``stale=False``: the control,
    estimates right and everything fused."""
    app = App(app_id, "orders-report").start()
    app.stage(1, at_ms - 20_000, tasks=8, sql_execution_id=3, cpu_time_ns=120 * 10**9)
    fallback = "" if not stale else "too many fields: 301 > spark.sql.codegen.maxFields=100"
    stage = -1 if stale else 2
    app.emit(
        "sql_plan_stats",
        at_ms,
        execution_id=3,
        whole_stage_codegen=True,
        codegen_max_fields=100,
        codegen_huge_method_limit=65535,
        nodes=[
            plan_node(0, -1, "HashAggregate", actual_rows=10, codegen_stage=stage, codegen_fallback=fallback),
            plan_node(1, 0, "Exchange", actual_rows=80),
            plan_node(2, 1, "HashAggregate", actual_rows=80, codegen_stage=stage, codegen_fallback=fallback),
            plan_node(3, 2, "BroadcastHashJoin", actual_rows=2_000_000, codegen_stage=1),
            plan_node(
                4,
                3,
                "Scan parquet spark_catalog.default.orders",
                est_rows=10 if stale else 2_000_000,
                est_bytes=4096,
                est_source="catalog",
                actual_rows=2_000_000,
                codegen_stage=1,
            ),
            plan_node(
                5,
                3,
                "Scan parquet spark_catalog.default.customers",
                est_rows=50_000,
                est_bytes=10 * MiB,
                est_source="catalog",
                actual_rows=60_000,
                codegen_stage=1,
            ),
        ],
    )
    return app.end(at_ms + 1_000)


def plan_chain(app_id: str = "app-plan-chain", at_ms: int = BASE_TIME_MS, cbo: bool = True) -> App:
    """SQL execution 4 with cost-based optimization on (fresh statistics): a Filter on lineitem estimated at 100
    rows passes 2,000,000 (its scan, estimated by the relation's 6,000,000 rows, is right), and the join above it,
    sized from that filter, is off by as much — one root cause, at the filter."""
    props = {"spark.sql.cbo.enabled": "true", "spark.sql.cbo.joinReorder.enabled": "true"} if cbo else {}
    app = App(app_id, "tpch-q18", properties=props).start()
    app.stage(1, at_ms - 20_000, tasks=8, sql_execution_id=4)
    plan = dict(est_source="plan", est_bytes=MiB)
    app.emit(
        "sql_plan_stats",
        at_ms,
        execution_id=4,
        whole_stage_codegen=True,
        codegen_max_fields=100,
        codegen_huge_method_limit=65535,
        nodes=[
            plan_node(0, -1, "SortMergeJoin", est_rows=10, actual_rows=2_000_000, **plan),
            plan_node(1, 0, "Exchange", actual_rows=2_000_000),
            plan_node(2, 1, "Filter", est_rows=100, actual_rows=2_000_000, **plan),
            plan_node(
                3, 2, "Scan parquet spark_catalog.default.lineitem", est_rows=6_000_000, actual_rows=6_000_000, **plan
            ),
            plan_node(4, 0, "Exchange", actual_rows=1_500_000),
            plan_node(
                5, 4, "Scan parquet spark_catalog.default.orders", est_rows=1_500_000, actual_rows=1_500_000, **plan
            ),
        ],
    )
    return app.end(at_ms + 1_000)


def plan_reused(app_id: str = "app-plan-reused", at_ms: int = BASE_TIME_MS) -> App:
    """As ``plan_chain``, but the misestimated filter's exchange is reused by a second join: the listener walks a
    reused exchange's subtree again under each reuse (as Spark's UI shows it), so node ids 1-3 appear twice in the
    pre-order list. Still one root cause, the filter: neither join (each has a copy of it below) nor the copy."""
    app = App(app_id, "tpch-q18", properties={"spark.sql.cbo.enabled": "true"}).start()
    app.stage(1, at_ms - 20_000, tasks=8, sql_execution_id=4)
    plan = dict(est_source="plan", est_bytes=MiB)
    app.emit(
        "sql_plan_stats",
        at_ms,
        execution_id=4,
        whole_stage_codegen=True,
        codegen_max_fields=100,
        codegen_huge_method_limit=65535,
        nodes=[
            plan_node(0, -1, "SortMergeJoin", est_rows=10, actual_rows=2_000_000, **plan),
            plan_node(1, 0, "Exchange", actual_rows=2_000_000),
            plan_node(2, 1, "Filter", est_rows=100, actual_rows=2_000_000, **plan),
            plan_node(
                3, 2, "Scan parquet spark_catalog.default.lineitem", est_rows=6_000_000, actual_rows=6_000_000, **plan
            ),
            plan_node(7, 0, "SortMergeJoin", est_rows=10, actual_rows=2_000_000, **plan),
            plan_node(1, 7, "Exchange", actual_rows=2_000_000),
            plan_node(2, 1, "Filter", est_rows=100, actual_rows=2_000_000, **plan),
            plan_node(
                3, 2, "Scan parquet spark_catalog.default.lineitem", est_rows=6_000_000, actual_rows=6_000_000, **plan
            ),
            plan_node(4, 7, "Exchange", actual_rows=1_500_000),
            plan_node(
                5, 4, "Scan parquet spark_catalog.default.orders", est_rows=1_500_000, actual_rows=1_500_000, **plan
            ),
        ],
    )
    return app.end(at_ms + 1_000)


QUERY_IDS = {
    "app-stream-behind": "0b6c6f4e-1a2b-4c3d-8e9f-000000000001",
    "app-stream-state": "0b6c6f4e-1a2b-4c3d-8e9f-000000000002",
    "app-stream-ok": "0b6c6f4e-1a2b-4c3d-8e9f-000000000003",
}


def stream(
    app_id: str,
    at_ms: int = BASE_TIME_MS,
    *,
    batches: int = 12,
    every_ms: int,
    duration_ms: int,
    input_rate: float = 100.0,
    processed_rate: float = 100.0,
    backlog_step: int = 0,
    state_step: int = 0,
    evicted: int = 0,
    ended: bool = False,
) -> App:
    """A streaming query "orders" whose batches start every ``every_ms`` and take ``duration_ms``; the source
    backlog grows by ``backlog_step`` a batch, the state by ``state_step`` rows (``evicted`` rows removed a batch)."""
    app = App(app_id, "orders-stream").start()
    query_id, run_id = QUERY_IDS[app_id], QUERY_IDS[app_id].replace("0b6c", "7e11")
    start = at_ms - batches * every_ms
    app.emit("streaming_query_start", start - 1_000, query_id=query_id, run_id=run_id, name="orders")
    for batch in range(batches):
        source = {
            "description": "KafkaV2[Subscribe[orders]]",
            "start_offset": "",
            "end_offset": "",
            "latest_offset": "",
            "num_input_rows": 100,
            "input_rows_per_second": input_rate,
            "processed_rows_per_second": processed_rate,
            "backlog": 1_000 + backlog_step * batch,
        }
        state = (
            [
                {
                    "operator_name": "stateStoreSave",
                    "num_rows_total": 5_000 + state_step * batch,
                    "num_rows_updated": 100,
                    "memory_used_bytes": MiB + state_step * 64 * batch,
                    "num_rows_dropped_by_watermark": 0,
                    "num_rows_removed": evicted,
                }
            ]
            if state_step or evicted
            else []
        )
        app.emit(
            "streaming_query_progress",
            start + batch * every_ms,
            query_id=query_id,
            run_id=run_id,
            name="orders",
            batch_id=batch,
            num_input_rows=100,
            input_rows_per_second=input_rate,
            processed_rows_per_second=processed_rate,
            duration_ms={"triggerExecution": duration_ms, "addBatch": duration_ms - 50},
            watermark_ms=None,
            sources=[source],
            state_operators=state,
        )
    if ended:
        app.emit("streaming_query_end", at_ms, query_id=query_id, run_id=run_id, name="orders")
    return app


def stream_behind() -> App:
    """Busy all the time (2 s batches every 2 s), 1,000 rows/s in, 500 processed, backlog growing: still running."""
    return stream(
        "app-stream-behind",
        every_ms=2_000,
        duration_ms=2_000,
        input_rate=1_000.0,
        processed_rate=500.0,
        backlog_step=1_000,
    )


def stream_state() -> App:
    """An aggregation without watermark: 10,000 more state rows a batch, none evicted; 1 s batches every 10 s."""
    return stream("app-stream-state", every_ms=10_000, duration_ms=1_000, state_step=10_000, ended=True)


def stream_ok() -> App:
    """The control: 0.5 s batches every 5 s, state stable (rows evicted every batch), backlog flat."""
    return stream("app-stream-ok", every_ms=5_000, duration_ms=500, evicted=100, ended=True)


def plan_stream_apps() -> list[App]:
    """The issue-16 scenarios: a stale-statistics join with a wide aggregate, a stream falling behind, a stream
    whose state grows, and their controls."""
    return [plans(), plans("app-plans-ok", stale=False), stream_behind(), stream_state(), stream_ok()]

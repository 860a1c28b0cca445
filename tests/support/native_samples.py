"""A sample application whose plan a native engine runs (DataFusion Comet's operator names) with one operator that
fell back to the JVM: a Python UDF (``BatchEvalPython``) between a native-to-row and a row-to-native transition.
``native_fallback`` raises one warning for it (the time around it is 24 s: its own 20 s, the transitions' 2.5 s
and 1.5 s); the real Comet run is tests/integration/test_native_fallback.py."""

from __future__ import annotations

from tests.support.plan_samples import plan_node
from tests.support.sample_app import BASE_TIME_MS, App


def comet_fallback(app_id: str = "app-comet", at_ms: int = BASE_TIME_MS) -> App:
    """SQL execution 5: CometScan → CometProject → CometColumnarToRow → BatchEvalPython → CometSparkRowToColumnar →
    CometExchange → CometHashAggregate (pre-order from the root), four native operators and one of the JVM."""
    app = App(app_id, "comet-report").start()
    app.stage(1, at_ms - 40_000, tasks=8, sql_execution_id=5, cpu_time_ns=60 * 10**9)
    app.emit(
        "sql_plan_stats",
        at_ms,
        execution_id=5,
        whole_stage_codegen=True,
        codegen_max_fields=100,
        codegen_huge_method_limit=65535,
        nodes=[
            plan_node(0, -1, "CometHashAggregate", actual_rows=10, time_ms=3_000),
            plan_node(1, 0, "CometExchange", actual_rows=80, time_ms=2_000),
            plan_node(2, 1, "CometSparkRowToColumnar", actual_rows=1_000_000, time_ms=1_500),
            plan_node(3, 2, "BatchEvalPython", actual_rows=1_000_000, time_ms=20_000),
            plan_node(4, 3, "CometColumnarToRow", actual_rows=1_000_000, time_ms=2_500),
            plan_node(5, 4, "CometProject", actual_rows=1_000_000, time_ms=1_000),
            plan_node(6, 5, "CometScan parquet spark_catalog.default.orders", actual_rows=1_000_000, time_ms=4_000),
        ],
    )
    return app.end(at_ms + 1_000)

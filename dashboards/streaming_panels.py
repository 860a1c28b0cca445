"""The streaming dashboard's panels (one function per panel, each setting title, description and unit), and the
application drill-down's plan panels (estimated vs actual rows, codegen coverage): what the issue-16 rules
(``plan_misestimate``, ``codegen_off``, ``streaming_saturated``, ``streaming_state_growth``) look at.

A streaming query is labelled as its findings name it: ``<name> (<query id>)``, or the query id when unnamed.
"""

# ruff: noqa: S608 - panel SQL is assembled from our own identifiers and view names, never from user text.

from __future__ import annotations

from sparktap.dashboards.builders import (
    Json,
    barchart_options,
    panel,
    steps,
    table_options,
    timeseries_custom,
    timeseries_options,
    value_colors,
)
from sparktap.dashboards.defaults import SEVERITY_COLORS
from sparktap.dashboards.panels import APP_LINK, _where, time_bucket
from sparktap.detection.native import per_query_sql
from sparktap.detection.query import rule_query
from sparktap.detection.relations import map_int, table_of
from sparktap.detection.sql import SqlContext
from sparktap.detection.thresholds import Thresholds

STREAMING_RULES = ("streaming_saturated", "streaming_state_growth")

QUERY_LABEL = "if(ifNull(name, '') != '', concat(ifNull(name, ''), ' (', query_id, ')'), toString(query_id))"


def _progress(ctx: SqlContext, columns: str) -> str:
    """Per dashboard interval and query: ``columns`` aggregated over its progress events (a time series)."""
    return f"""SELECT {time_bucket("event_time")} AS time, {QUERY_LABEL} AS query, {columns}
FROM {ctx.view("streaming_query_progress")}
{_where(ctx, False)}
GROUP BY time, query
ORDER BY time"""


def streaming_queries(ctx: SqlContext) -> Json:
    sql = f"""SELECT query, run_id, app_name, app_id, started, last_batch_at, batches, last_batch_id, input_rows,
    if(ended = 1, if(failure != '', 'failed', 'stopped'), 'running') AS state, failure
FROM
(
    SELECT cluster, app_id, run_id, any(app_name) AS app_name, any({QUERY_LABEL}) AS query,
        min(event_time) AS started, max(event_time) AS last_batch_at, count() AS batches,
        max(batch_id) AS last_batch_id, sum(num_input_rows) AS input_rows
    FROM {ctx.view("streaming_query_progress")}
    {_where(ctx, False)}
    GROUP BY cluster, app_id, run_id
) AS p
ANY LEFT JOIN
(
    SELECT cluster, app_id, run_id, toUInt8(1) AS ended, any(ifNull(exception, '')) AS failure
    FROM {ctx.view("streaming_query_end")}
    {_where(ctx, False)}
    GROUP BY cluster, app_id, run_id
) AS e USING (cluster, app_id, run_id)
ORDER BY last_batch_at DESC"""
    return panel(
        "table",
        "Streaming queries",
        "Every streaming query run with progress in the range: micro-batches reported, the last batch id, "
        "rows read, and whether it still runs, stopped or failed (with why).",
        "none",
        sql,
        width=24,
        height=7,
        options=table_options(),
    )


def streaming_rates(ctx: SqlContext) -> Json:
    sql = _progress(
        ctx,
        "avg(ifNull(input_rows_per_second, 0)) AS input_rows_per_s, "
        "avg(ifNull(processed_rows_per_second, 0)) AS processed_rows_per_s",
    )
    return panel(
        "timeseries",
        "Input vs processed rows/s",
        "Rows per second arriving at each query's sources and rows per second it processed: processed "
        "staying below input means the query falls behind.",
        "rowsps",
        sql,
        fmt="time_series",
        width=12,
        height=8,
        options=timeseries_options(),
        custom=timeseries_custom(),
    )


def batch_duration(ctx: SqlContext) -> Json:
    trigger = map_int(ctx, "duration_ms", "triggerExecution")
    sql = _progress(
        ctx,
        f"avg({trigger}) / 1000 AS batch_duration_s, "
        "(max(event_time_ms) - min(event_time_ms)) / 1000 "
        "/ greatest(max(batch_id) - min(batch_id), 1) AS batch_interval_s",
    )
    return panel(
        "timeseries",
        "Batch duration vs interval",
        "Mean micro-batch duration (durationMs.triggerExecution) beside the mean time between batch starts: "
        "when the duration reaches the interval the query is busy all the time and misses its trigger.",
        "s",
        sql,
        fmt="time_series",
        width=12,
        height=8,
        options=timeseries_options(),
        custom=timeseries_custom(),
    )


def source_backlog(ctx: SqlContext) -> Json:
    sql = _progress(ctx, "max(arraySum(arrayFilter(b -> b >= 0, sources_backlog))) AS backlog")
    return panel(
        "timeseries",
        "Source backlog",
        "Offsets between where each query's last batch ended and the latest offset of its sources (Kafka, "
        "sparktap-kafka, rate): a backlog that keeps growing is a query falling behind.",
        "short",
        sql,
        fmt="time_series",
        width=12,
        height=8,
        options=timeseries_options(),
        custom=timeseries_custom(),
    )


def state_rows(ctx: SqlContext) -> Json:
    sql = _progress(
        ctx,
        "max(arraySum(state_operators_num_rows_total)) AS state_rows, "
        "sum(arraySum(state_operators_num_rows_removed) "
        "+ arraySum(state_operators_num_rows_dropped_by_watermark)) AS rows_evicted",
    )
    return panel(
        "timeseries",
        "State rows",
        "Rows held by each query's stateful operators, and rows a watermark evicted or dropped: state "
        "that only grows with nothing evicted has no watermark bounding it.",
        "short",
        sql,
        fmt="time_series",
        width=12,
        height=8,
        options=timeseries_options(),
        custom=timeseries_custom(),
    )


def state_memory(ctx: SqlContext) -> Json:
    sql = _progress(ctx, "max(arraySum(state_operators_memory_used_bytes)) AS state_memory")
    return panel(
        "timeseries",
        "State memory",
        "Memory used by each query's state stores.",
        "bytes",
        sql,
        fmt="time_series",
        width=12,
        height=8,
        options=timeseries_options(),
        custom=timeseries_custom(),
    )


def streaming_findings(ctx: SqlContext, t: Thresholds) -> Json:
    sql = f"""SELECT detected_at AS time, severity, rule, cluster, app_name, app_id, stage_name AS query,
    if(running = 1, 'running', 'stopped') AS query_state, explanation, suggested_fix
FROM ({rule_query(STREAMING_RULES, t, ctx, "info")})"""
    return panel(
        "table",
        "Streaming findings",
        "Saturated or falling-behind queries and state growing without eviction, with the numbers and a "
        "concrete fix, most severe first.",
        "none",
        sql,
        width=24,
        height=7,
        options=table_options(),
        mappings=value_colors(SEVERITY_COLORS),
        links=[APP_LINK],
        thresholds=steps((None, "text")),
        custom={"cellOptions": {"type": "color-text"}},
    )


# ----------------------------------------------------------------------------------------- application: plans


def plan_estimates(ctx: SqlContext) -> Json:
    sql = f"""SELECT execution_id, node_id, operator, estimated_rows, actual_rows,
    round(greatest(estimated_rows, actual_rows) / greatest(least(estimated_rows, actual_rows), 1), 1) AS off_by,
    estimate_from, {table_of("operator")} AS scanned_table
FROM
(
    SELECT execution_id, n_node_id AS node_id, n_operator AS operator, n_est_rows AS estimated_rows,
        n_actual_rows AS actual_rows, toString(n_est_source) AS estimate_from
    FROM {ctx.view("sql_plan_stats")}
    ARRAY JOIN nodes_node_id AS n_node_id, nodes_operator AS n_operator, nodes_est_rows AS n_est_rows,
        nodes_actual_rows AS n_actual_rows, nodes_est_source AS n_est_source
    {_where(ctx)} AND n_est_rows >= 0 AND n_actual_rows >= 0
)
ORDER BY off_by DESC, execution_id, node_id
LIMIT 200"""
    return panel(
        "table",
        "Plan: estimated vs actual rows",
        "Plan nodes with both the optimizer's row estimate (catalog statistics of the last ANALYZE, or the "
        "plan's statistics with CBO) and the rows they produced, furthest off first: 10x and more at a scan "
        "or join is a plan misestimate.",
        "none",
        sql,
        width=12,
        height=8,
        options=table_options(),
        thresholds=steps((None, "green"), (10, "orange"), (1000, "red")),
    )


def codegen_coverage(ctx: SqlContext) -> Json:
    sql = f"""SELECT concat('sql ', toString(execution_id)) AS execution,
    arrayCount((s, f) -> s > 0 AND f = '', nodes_codegen_stage, nodes_codegen_fallback) AS operators_in_codegen,
    arrayCount(f -> f != '', nodes_codegen_fallback) AS operators_outside_codegen
FROM {ctx.view("sql_plan_stats")}
{_where(ctx)}
ORDER BY execution_id"""
    return panel(
        "barchart",
        "Codegen coverage",
        "Per SQL execution: plan operators fused into whole-stage codegen, and operators that could be but "
        "run interpreted (codegen off, too many fields for spark.sql.codegen.maxFields, a method past the "
        "JIT limit).",
        "short",
        sql,
        width=12,
        height=8,
        options=barchart_options(stacked=True, x_field="execution"),
        custom={"fillOpacity": 80, "lineWidth": 1},
    )


def native_per_query(ctx: SqlContext) -> Json:
    sql = f"""SELECT execution_id, engine, native_operators, jvm_operators, transitions,
    round(native_ms / 1000, 1) AS native_s, round(jvm_ms / 1000, 1) AS jvm_s, native_rows, jvm_rows
FROM ({per_query_sql(ctx)})
WHERE native_operators > 0
ORDER BY jvm_ms DESC, execution_id
LIMIT 200"""
    return panel(
        "table",
        "Native engine per query",
        "Per SQL execution run partly by a native engine (Comet, Gluten/Velox, RAPIDS, Photon, Blaze): its "
        "operators on the engine and on the JVM, the transitions between them, and the time and rows of each "
        "side. JVM time in a native plan is where native_fallback looks.",
        "none",
        sql,
        width=24,
        height=8,
        options=table_options(),
    )

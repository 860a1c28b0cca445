"""The relations of the plan and streaming rules (issue 16): one row per physical plan node of a finished SQL
execution (``plan``), one row per streaming query run over its last micro-batches (``streaming``).

Same dialect as ``sql.py`` (clickhouse-server 18.16 and chDB 26.x: no CTEs, one JOIN per SELECT, ``ANY LEFT JOIN …
USING``, Grafana time macros), read from the ``_dedup`` views. Kept beside ``sql.py`` rather than in it so the stage
relations there and these can change independently; ``query.py`` composes both.

Finding ids (the columns of ``query.FINDING_COLUMNS``):

- ``plan``: ``sql_exec`` is the SQL execution, ``node_id`` the plan node (``SparkPlan.id``), ``stage_id`` and
  ``stage_attempt`` are -1, ``stage_name`` is the node's operator (``Scan parquet spark_catalog.default.orders``);
- ``streaming``: ``sql_exec``, ``stage_id``, ``stage_attempt`` and ``node_id`` are -1; ``stage_name`` names the query
  run: ``<name> (<query id>)``, or the query id alone for an unnamed query. ``running`` is 1 while the run has no
  ``streaming_query_end``.
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and typed threshold literals (lit()), never from user text.

from __future__ import annotations

from sparktap.detection.sql import SqlContext, app_properties, join_using, lit
from sparktap.schemas.ddl import quote_literal


def map_int(ctx: SqlContext, column: str, key: str) -> str:
    """An integer value of a ``dict[str, int]`` column: a Map on servers that have it, else compact JSON text."""
    if ctx.features.map:
        return f"toInt64({column}[{quote_literal(key)}])"
    return f"toInt64(visitParamExtractInt({column}, {quote_literal(key)}))"


def table_of(operator: str) -> str:
    """The table a scan operator reads ('Scan parquet spark_catalog.default.t' -> 'spark_catalog.default.t')."""
    return f"if(like({operator}, 'Scan %'), replaceRegexpOne({operator}, '^Scan [^ ]+ ?', ''), '')"


def _distinct(array: str) -> str:
    """arrayDistinct without needing it (18.16): keep each element's first occurrence."""
    return f"arrayFilter((x, i) -> indexOf({array}, x) = i, {array}, arrayEnumerate({array}))"


# ------------------------------------------------------------------------------------------------ plan relation


def execution_cpu(ctx: SqlContext) -> str:
    """Per SQL execution: executor CPU and task run time of its finished stages (``stage_completed``)."""
    return f"""SELECT cluster, app_id, app_attempt, toInt64(sql_execution_id) AS sql_exec,
    toFloat64(sum(cpu_time_ns)) / 1000000 AS exec_cpu_ms, toFloat64(sum(run_time_ms_sum)) AS exec_run_ms,
    toFloat64(count()) AS exec_stages
FROM {ctx.view("stage_completed")}
{ctx.where(extend_days=1)} AND isNotNull(sql_execution_id)
GROUP BY cluster, app_id, app_attempt, sql_exec"""


_PARENT_INDEX = (
    "arrayMap((p, i) -> toInt64(if(indexOf(arrayReverse(arraySlice(nodes_node_id, 1, i - 1)), p) = 0, 0, "
    "i - indexOf(arrayReverse(arraySlice(nodes_node_id, 1, i - 1)), p))), nodes_parent_id, "
    "arrayEnumerate(nodes_node_id))"
)
"""Per node (pre-order), the 1-based position of its parent: the nearest node before it with the parent's id, 0 for
the root. Not the first node with that id: a reused exchange's subtree is walked again under each reuse (as Spark's
UI shows it), so its node ids repeat, and the first copy's position would end the subtree of every node between the
two copies early (a join above both copies then missed a misestimated filter below it and fired as well)."""


PLAN_COLUMNS = (
    "cluster, app_id, app_attempt, app_name, job, sql_exec, stage_id, stage_attempt, stage_name, node_id, running, "
    "detected_at_ms, p_whole_stage, p_max_fields, p_parent, p_operator, p_est_rows, p_est_bytes, p_est_source, "
    "p_actual_rows, p_codegen_stage, p_fallback, p_fallback_nodes, p_first_fallback, p_scan_tables, p_nodes, "
    "p_sub_est, p_sub_actual, p_sub_operator, p_idx, p_all_operator, p_all_parent, p_all_time, p_all_actual, "
    "exec_cpu_ms, exec_run_ms, exec_stages, prop_aqe, prop_skew_join, prop_advisory, prop_cbo, prop_join_reorder, "
    "prop_histogram"
)
"""The columns of ``plan_relation`` by name: a ``SELECT *`` of its two joins carries the right sides' ``r.cluster`` …
on 18.16, which a table made of it refuses (duplicate columns)."""


def plan_relation(ctx: SqlContext) -> str:
    """One row per plan node of every ``sql_plan_stats`` (its estimate, actual rows, codegen membership), with what
    the rules need of the whole plan (first node outside codegen, the tables it scans), the estimates, actual rows
    and operators of the node's subtree (``p_sub_*``: the nodes are in pre-order, so a subtree is the run of nodes
    after it whose parents are within it), the whole plan's operators, parent positions, own times and actual rows
    (``p_all_*``, with the node's 1-based position ``p_idx``: the native_fallback rule reads a node's neighbours;
    ``time_ms`` of rows stored before nodes carried it reads -1), the execution's CPU and the application's
    properties."""
    scans = _distinct(f"arrayFilter(x -> x != '', arrayMap(op -> {table_of('op')}, nodes_operator))")
    rel = f"""SELECT cluster, app_id, app_attempt, app_name, toInt64(-1) AS job, sql_exec,
    toInt64(-1) AS stage_id, toInt64(-1) AS stage_attempt, p_operator AS stage_name, node_id, toUInt8(0) AS running,
    detected_at_ms, p_whole_stage, p_max_fields, p_parent, p_operator, p_est_rows, p_est_bytes, p_est_source,
    p_actual_rows, p_codegen_stage, p_fallback, p_fallback_nodes, p_first_fallback, p_scan_tables, p_nodes,
    arraySlice(a_est, p_idx + 1, p_sub_len) AS p_sub_est, arraySlice(a_actual, p_idx + 1, p_sub_len) AS p_sub_actual,
    arraySlice(a_operator, p_idx + 1, p_sub_len) AS p_sub_operator, p_idx, a_operator AS p_all_operator,
    a_parent_idx AS p_all_parent, a_time AS p_all_time, a_actual AS p_all_actual
FROM
(
    SELECT cluster, app_id, app_attempt, app_name, toInt64(execution_id) AS sql_exec,
        toInt64(event_time_ms) AS detected_at_ms, toUInt8(whole_stage_codegen) AS p_whole_stage,
        toFloat64(codegen_max_fields) AS p_max_fields,
        toInt64(n_node_id) AS node_id, toInt64(n_parent_id) AS p_parent, toString(n_operator) AS p_operator,
        toFloat64(n_est_rows) AS p_est_rows, toFloat64(n_est_bytes) AS p_est_bytes,
        toString(n_est_source) AS p_est_source, toFloat64(n_actual_rows) AS p_actual_rows,
        toInt64(n_codegen_stage) AS p_codegen_stage, toString(n_codegen_fallback) AS p_fallback,
        toFloat64(arrayCount(f -> f != '', nodes_codegen_fallback)) AS p_fallback_nodes,
        toInt64(arrayElement(arrayFilter((n, f) -> f != '', nodes_node_id, nodes_codegen_fallback), 1))
            AS p_first_fallback,
        arrayStringConcat({scans}, ', ') AS p_scan_tables, toFloat64(length(nodes_node_id)) AS p_nodes,
        toInt64(n_idx) AS p_idx, arrayMap(x -> toFloat64(x), nodes_est_rows) AS a_est,
        arrayMap(x -> toFloat64(x), nodes_actual_rows) AS a_actual,
        arrayMap(x -> toString(x), nodes_operator) AS a_operator, a_parent_idx,
        if(length(nodes_time_ms) = length(nodes_node_id), arrayMap(x -> toFloat64(x), nodes_time_ms),
            arrayMap(x -> toFloat64(-1), nodes_node_id)) AS a_time,
        toInt64(arrayFirstIndex(p -> p < p_idx, arraySlice(a_parent_idx, p_idx + 1))) AS p_sub_end,
        if(p_sub_end = 0, toInt64(length(nodes_node_id)) - p_idx, p_sub_end - 1) AS p_sub_len
    FROM
    (
        SELECT cluster, app_id, app_attempt, app_name, execution_id, event_time_ms, whole_stage_codegen,
            codegen_max_fields, nodes_node_id, nodes_parent_id, nodes_operator, nodes_est_rows, nodes_est_bytes,
            nodes_est_source, nodes_actual_rows, nodes_codegen_stage, nodes_codegen_fallback, nodes_time_ms,
            {_PARENT_INDEX} AS a_parent_idx
        FROM {ctx.view("sql_plan_stats")}
        {ctx.where()}
    )
    ARRAY JOIN arrayEnumerate(nodes_node_id) AS n_idx,
        nodes_node_id AS n_node_id, nodes_parent_id AS n_parent_id, nodes_operator AS n_operator,
        nodes_est_rows AS n_est_rows, nodes_est_bytes AS n_est_bytes, nodes_est_source AS n_est_source,
        nodes_actual_rows AS n_actual_rows, nodes_codegen_stage AS n_codegen_stage,
        nodes_codegen_fallback AS n_codegen_fallback
    WHERE indexOf(nodes_node_id, n_node_id) = n_idx
)"""
    with_cpu = join_using(rel, execution_cpu(ctx), "cluster, app_id, app_attempt, sql_exec")
    return join_using(with_cpu, ctx.staged("app_properties", app_properties(ctx)), "cluster, app_id, app_attempt")


# ------------------------------------------------------------------------------------------- streaming relation

_BATCH_ARRAYS = (
    "b_start",
    "b_dur",
    "b_in_rate",
    "b_out_rate",
    "b_rows",
    "b_backlog",
    "b_backlog_known",
    "b_state_rows",
    "b_state_mem",
    "b_evicted",
    "b_state_ops",
    "b_watermark",
)


def streaming_relation(ctx: SqlContext, batches: int) -> str:
    """One row per streaming query run (``query_id``, ``run_id``) with the progress of its last ``batches``
    micro-batches as arrays in batch order (``s_*``), and the window's figures the rules compare."""
    trigger = map_int(ctx, "duration_ms", "triggerExecution")
    per_batch = {
        "b_start": "toFloat64(event_time_ms)",
        "b_dur": f"toFloat64({trigger})",
        "b_in_rate": "toFloat64(ifNull(input_rows_per_second, 0))",
        "b_out_rate": "toFloat64(ifNull(processed_rows_per_second, 0))",
        "b_rows": "toFloat64(num_input_rows)",
        "b_backlog": "toFloat64(arraySum(arrayFilter(b -> b >= 0, sources_backlog)))",
        "b_backlog_known": "toFloat64(length(sources_backlog) > 0 AND arrayAll(b -> b >= 0, sources_backlog))",
        "b_state_rows": "toFloat64(arraySum(state_operators_num_rows_total))",
        "b_state_mem": "toFloat64(arraySum(state_operators_memory_used_bytes))",
        "b_evicted": "toFloat64(arraySum(state_operators_num_rows_removed) "
        "+ arraySum(state_operators_num_rows_dropped_by_watermark))",
        "b_state_ops": "toFloat64(length(state_operators_operator_name))",
        "b_watermark": "toFloat64(ifNull(watermark_ms, 0))",
    }
    grouped = ",\n        ".join(
        f"arraySort((v, b) -> b, groupArray({expr}), groupArray(batch_id)) AS {name}"
        for name, expr in per_batch.items()
    )
    sliced = ",\n    ".join(f"arraySlice({name}, toUInt32(s_from)) AS s_{name[2:]}" for name in _BATCH_ARRAYS)
    key = "cluster, app_id, app_attempt, query_id, run_id"
    scope = " AND ".join(["1", *ctx.scope.conditions()])
    return f"""SELECT cluster, app_id, app_attempt, app_name, toInt64(-1) AS job, toInt64(-1) AS sql_exec,
    toInt64(-1) AS stage_id, toInt64(-1) AS stage_attempt, stage_name, toInt64(-1) AS node_id, running,
    detected_at_ms, query_id, run_id, s_batch_ids, {", ".join("s_" + n[2:] for n in _BATCH_ARRAYS)},
    toFloat64(length(s_batch_ids)) AS s_batches,
    toFloat64(arrayElement(s_batch_ids, -1) - arrayElement(s_batch_ids, 1) + 1) AS s_batch_span,
    arrayElement(s_start, -1) + arrayElement(s_dur, -1) - arrayElement(s_start, 1) AS s_wall_ms,
    arraySum(s_dur) / greatest(length(s_dur), 1) AS s_avg_dur_ms,
    arraySum(s_in_rate) / greatest(length(s_in_rate), 1) AS s_input_rate,
    arraySum(s_out_rate) / greatest(length(s_out_rate), 1) AS s_processed_rate,
    toFloat64(arrayAll(x -> x > 0, s_backlog_known)) AS s_backlog_known_all,
    arrayElement(s_backlog, 1) AS s_backlog_first, arrayElement(s_backlog, -1) AS s_backlog_last,
    toFloat64(arrayAll((x, y) -> y >= x, arrayPopBack(s_backlog), arrayPopFront(s_backlog))) AS s_backlog_rising,
    arrayElement(s_state_rows, 1) AS s_state_rows_first, arrayElement(s_state_rows, -1) AS s_state_rows_last,
    arrayElement(s_state_mem, 1) AS s_state_mem_first, arrayElement(s_state_mem, -1) AS s_state_mem_last,
    toFloat64(arrayAll((x, y) -> y >= x, arrayPopBack(s_state_rows), arrayPopFront(s_state_rows)))
        AS s_state_rows_rising,
    toFloat64(arrayAll((x, y) -> y >= x, arrayPopBack(s_state_mem), arrayPopFront(s_state_mem))) AS s_state_mem_rising,
    arraySum(s_evicted) AS s_evicted_rows, arrayReduce('max', s_state_ops) AS s_state_operators,
    arrayReduce('max', s_watermark) AS s_watermark_ms
FROM
(
    SELECT {key}, q_app_name AS app_name,
        if(q_name != '', concat(q_name, ' (', query_id, ')'), query_id) AS stage_name,
        toUInt8(run_id NOT IN (SELECT run_id FROM {ctx.view("streaming_query_end")} WHERE {scope})) AS running,
        detected_at_ms, toUInt32(greatest(toInt64(length(b_batch_ids)) - {lit(batches)} + 1, 1)) AS s_from,
        arraySlice(b_batch_ids, toUInt32(s_from)) AS s_batch_ids,
    {sliced}
    FROM
    (
        SELECT {key}, any(app_name) AS q_app_name, toString(any(ifNull(name, ''))) AS q_name,
            toInt64(max(event_time_ms)) AS detected_at_ms, arraySort(groupArray(batch_id)) AS b_batch_ids,
        {grouped}
        FROM {ctx.view("streaming_query_progress")}
        {ctx.where()}
        GROUP BY {key}
    )
)"""

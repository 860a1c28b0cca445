"""The application drill-down's panels (one function per panel, each setting title, description and unit)."""

# ruff: noqa: S608 - panel SQL is assembled from our own identifiers and view names, never from user text.

from __future__ import annotations

from sparktap.dashboards.builders import Json, barchart_options, panel, stat_options, steps, table_options
from sparktap.dashboards.panels import _scope, _stage_label, _where
from sparktap.detection.sql import SqlContext, stage_input


def app_summary(ctx: SqlContext) -> Json:
    sql = f"""SELECT count() AS stages, sum(num_tasks) AS tasks, sum(tasks_failed) AS failed_tasks,
    countIf(status != 'succeeded') AS failed_stages
FROM {ctx.view("stage_completed")}
{_where(ctx)}"""
    return panel(
        "stat",
        "Stages and tasks",
        "Stages finished in the range, their tasks, failed task attempts and failed stages.",
        "short",
        sql,
        width=8,
        height=5,
        options=stat_options("value"),
    )


def app_bytes(ctx: SqlContext) -> Json:
    sql = f"""SELECT sum({stage_input()}) AS input, sum(shuffle_read_bytes_sum) AS shuffle_read,
    sum(shuffle_write_bytes_sum) AS shuffle_written, sum(disk_spill_bytes_sum) AS spilled_to_disk,
    sum(output_bytes) AS output
FROM {ctx.view("stage_completed")}
{_where(ctx)}"""
    return panel(
        "stat",
        "Data volume",
        "Bytes read from input, read and written by shuffles, spilled to disk and "
        "written as output by the stages finished in the range.",
        "bytes",
        sql,
        width=10,
        height=5,
        options=stat_options("value"),
    )


def app_duration(ctx: SqlContext) -> Json:
    sql = f"""SELECT (if(ended > 0, ended, toInt64(toUInt32(now())) * 1000) - started) / 1000 AS duration
FROM
(
    SELECT max(event_time_ms) AS started FROM {ctx.view("app_start")} WHERE {_scope(ctx)}
) AS s
CROSS JOIN
(
    SELECT max(event_time_ms) AS ended FROM {ctx.view("app_end")} WHERE {_scope(ctx)}
) AS e"""
    return panel(
        "stat",
        "Application duration",
        "Wall time from application start to end (to now while it runs).",
        "s",
        sql,
        width=6,
        height=5,
        options=stat_options("value"),
    )


def stage_timeline(ctx: SqlContext) -> Json:
    sql = f"""SELECT stage_id, stage_attempt, name, submitted, completed,
    round(if(done = 1, toInt64(duration_ms), toInt64(toUInt32(now())) * 1000 - submitted_ms) / 1000, 1) AS duration_s,
    tasks, if(done = 1, status, 'running') AS state
FROM
(
    SELECT stage_id, stage_attempt, any(name) AS name, min(event_time) AS submitted, min(event_time_ms) AS submitted_ms,
        max(num_tasks) AS tasks
    FROM {ctx.view("stage_submitted")}
    {_where(ctx)}
    GROUP BY stage_id, stage_attempt
) AS s
ANY LEFT JOIN
(
    SELECT stage_id, stage_attempt, max(event_time) AS completed, max(duration_ms) AS duration_ms,
        any(status) AS status, toUInt8(1) AS done
    FROM {ctx.view("stage_completed")}
    {_where(ctx)}
    GROUP BY stage_id, stage_attempt
) AS c USING (stage_id, stage_attempt)
ORDER BY submitted, stage_id"""
    return panel(
        "table",
        "Stage timeline",
        "Every stage attempt in submission order with when it started and finished and how long it ran (running "
        "stages so far).",
        "none",
        sql,
        width=24,
        height=9,
        options=table_options(),
    )


def task_duration_quantiles(ctx: SqlContext) -> Json:
    sql = f"""SELECT {_stage_label()} AS stage, task_duration_ms_p50 / 1000 AS p50,
    task_duration_ms_p75 / 1000 AS p75,
    task_duration_ms_p95 / 1000 AS p95, task_duration_ms_max / 1000 AS max
FROM {ctx.view("stage_completed")}
{_where(ctx)}
ORDER BY stage_id, stage_attempt"""
    return panel(
        "barchart",
        "Task duration distribution per stage",
        "Median, 75th and 95th percentile and longest task per stage: a max far above the p95 is a "
        "straggler (task-time skew).",
        "s",
        sql,
        width=12,
        height=8,
        options=barchart_options(x_field="stage"),
        custom={"fillOpacity": 80, "lineWidth": 1},
    )


def task_duration_histogram(ctx: SqlContext) -> Json:
    sql = f"""SELECT duration_ms / 1000 AS task_seconds
FROM {ctx.view("task_end")}
{_where(ctx)}
LIMIT 100000"""
    return panel(
        "histogram",
        "Task duration histogram",
        "How task durations spread over the application's finished tasks (first 100,000).",
        "s",
        sql,
        width=12,
        height=8,
        options={
            "bucketCount": 40,
            "combine": False,
            "legend": {"showLegend": False, "displayMode": "list", "placement": "bottom", "calcs": []},
        },
        custom={"fillOpacity": 80, "lineWidth": 1},
    )


def skew_per_stage(ctx: SqlContext) -> Json:
    sql = f"""SELECT {_stage_label()} AS stage,
    round(task_duration_ms_max / greatest(task_duration_ms_p50, 1), 2) AS duration_max_over_median,
    round(greatest(shuffle_read_bytes_max, input_bytes_max)
          / greatest(if(shuffle_read_bytes_max >= input_bytes_max, shuffle_read_bytes_p50, input_bytes_p50), 1), 2)
        AS bytes_max_over_median
FROM {ctx.view("stage_completed")}
{_where(ctx)}
ORDER BY stage_id, stage_attempt"""
    return panel(
        "barchart",
        "Skew per stage",
        "Largest task over the median task per stage, in time and in bytes read. Above 4 (time) or 3.16 "
        "(bytes) the skew rules fire.",
        "suffix:×",
        sql,
        width=12,
        height=8,
        options=barchart_options(x_field="stage"),
        custom={"fillOpacity": 80, "lineWidth": 1},
        thresholds=steps((None, "green"), (3.16, "orange"), (10, "red")),
    )


def shuffle_locality(ctx: SqlContext) -> Json:
    sql = f"""SELECT {_stage_label()} AS stage, shuffle_read_local_bytes_sum AS local,
    shuffle_read_remote_bytes_sum AS remote
FROM {ctx.view("stage_completed")}
{_where(ctx)} AND shuffle_read_bytes_sum > 0
ORDER BY stage_id, stage_attempt"""
    return panel(
        "barchart",
        "Shuffle read: local vs remote",
        "Shuffle bytes each stage read from its own executor's host versus over the network.",
        "bytes",
        sql,
        width=12,
        height=8,
        options=barchart_options(stacked=True, x_field="stage"),
        custom={"fillOpacity": 80, "lineWidth": 1},
    )


def spills(ctx: SqlContext) -> Json:
    sql = f"""SELECT {_stage_label()} AS stage, memory_spill_bytes_sum AS memory_spill,
    disk_spill_bytes_sum AS disk_spill
FROM {ctx.view("stage_completed")}
{_where(ctx)} AND (memory_spill_bytes_sum > 0 OR disk_spill_bytes_sum > 0)
ORDER BY stage_id, stage_attempt"""
    return panel(
        "barchart",
        "Spills per stage",
        "Bytes spilled per stage (deserialized in memory, serialized on disk): tasks short of memory.",
        "bytes",
        sql,
        width=12,
        height=8,
        options=barchart_options(x_field="stage"),
        custom={"fillOpacity": 80, "lineWidth": 1},
    )


def gc_and_failures(ctx: SqlContext) -> Json:
    sql = f"""SELECT {_stage_label()} AS stage, gc_time_ms_sum / greatest(run_time_ms_sum, 1) AS gc_share,
    tasks_failed / greatest(tasks_succeeded + tasks_failed + tasks_killed, 1) AS failed_share
FROM {ctx.view("stage_completed")}
{_where(ctx)}
ORDER BY stage_id, stage_attempt"""
    return panel(
        "barchart",
        "GC time and task failures per stage",
        "Share of task run time spent in GC, and share of task attempts that failed, per stage.",
        "percentunit",
        sql,
        width=12,
        height=8,
        options=barchart_options(x_field="stage"),
        custom={"fillOpacity": 80, "lineWidth": 1},
        thresholds=steps((None, "green"), (0.1, "orange"), (0.2, "red")),
    )


def aqe_plan_changes(ctx: SqlContext) -> Json:
    sql = f"""SELECT event_time AS time, execution_id,
    arrayStringConcat(previous_join_strategies, ', ') AS joins_before,
    arrayStringConcat(join_strategies, ', ') AS joins_after, arraySum(shuffle_reads_coalesced) AS coalesced_reads,
    arraySum(shuffle_reads_skewed) AS skewed_reads, arraySum(shuffle_reads_local) AS local_reads,
    if(final_plan = 1, 'final', 'intermediate') AS plan
FROM {ctx.view("aqe_plan_update")}
{_where(ctx)}
ORDER BY time"""
    return panel(
        "table",
        "AQE plan changes",
        "Each adaptive re-plan: join strategies before and after (e.g. sort-merge to broadcast) and how many "
        "shuffle reads AQE coalesced, split for skew, or turned into local reads.",
        "none",
        sql,
        width=12,
        height=8,
        options=table_options(),
    )


def aqe_shuffle_reads(ctx: SqlContext) -> Json:
    sql = f"""SELECT execution_id, node_id, argMax(coalesced, seq) AS coalesced, argMax(skewed, seq) AS skewed,
    argMax(local, seq) AS local, argMax(num_partitions, seq) AS partitions,
    formatReadableSize(ifNull(argMax(partition_data_size_bytes, seq), 0)) AS data_size,
    argMax(num_skewed_partitions, seq) AS skewed_partitions, argMax(num_skewed_splits, seq) AS skew_splits,
    argMax(num_coalesced_partitions, seq) AS coalesced_partitions
FROM {ctx.view("aqe_shuffle_read")}
{_where(ctx)}
GROUP BY execution_id, node_id
ORDER BY execution_id, node_id"""
    return panel(
        "table",
        "AQE shuffle reads",
        "AQE shuffle read nodes with their final metrics: partitions after coalescing, data size, skewed "
        "partitions and the splits AQE made of them, local shuffle reads.",
        "none",
        sql,
        width=12,
        height=8,
        options=table_options(),
    )


def sql_executions(ctx: SqlContext) -> Json:
    sql = f"""SELECT started AS time, execution_id, description, round(duration_ms / 1000, 1) AS duration_s,
    if(ended = 1, if(error != '', 'failed', 'succeeded'), 'running') AS state, error
FROM
(
    SELECT execution_id, min(event_time) AS started, any(description) AS description
    FROM {ctx.view("sql_start")} {_where(ctx)} GROUP BY execution_id
) AS s
ANY LEFT JOIN
(
    SELECT execution_id, max(ifNull(duration_ms, 0)) AS duration_ms, any(ifNull(error, '')) AS error,
        toUInt8(1) AS ended
    FROM {ctx.view("sql_end")} {_where(ctx)} GROUP BY execution_id
) AS e USING (execution_id)
ORDER BY time"""
    return panel(
        "table",
        "SQL executions",
        "The application's SQL/DataFrame queries with their duration and outcome.",
        "none",
        sql,
        width=24,
        height=8,
        options=table_options(),
    )

"""The overview dashboard's pipeline-health panels: listener queue fill, losses, sequence gaps, events stored,
the last event per cluster and the listeners per application. One function per panel, as in ``panels.py``."""

# ruff: noqa: S608 - panel SQL is assembled from our own identifiers and view names, never from user text.

from __future__ import annotations

from sparktap.dashboards.builders import (
    Json,
    panel,
    stat_options,
    steps,
    table_options,
    timeseries_custom,
    timeseries_options,
)
from sparktap.dashboards.panels import _scope, _where, time_bucket
from sparktap.detection.sql import SqlContext


def listener_queue(ctx: SqlContext) -> Json:
    sql = f"""SELECT {time_bucket("event_time")} AS time, cluster,
    max(queue_depth / greatest(queue_capacity, 1)) AS queue_fill
FROM {ctx.view("listener_health")}
{_where(ctx, False)}
GROUP BY time, cluster
ORDER BY time"""
    return panel(
        "timeseries",
        "Listener queue fill",
        "Highest fill of any listener's bounded event queue, per cluster. At 100 % the listener drops events "
        "rather than block Spark.",
        "percentunit",
        sql,
        fmt="time_series",
        width=8,
        height=6,
        options=timeseries_options(),
        custom=timeseries_custom(),
        min_value=0,
        max_value=1,
    )


def listener_losses(ctx: SqlContext) -> Json:
    sql = f"""SELECT sum(dropped) AS dropped_by_listener, sum(lost) AS lost_in_kafka,
    sum(errors) AS kafka_delivery_errors, sum(backlog) AS relay_backlog
FROM
(
    SELECT app_id, max(events_dropped) AS dropped, max(kafka_events_lost) AS lost,
        max(kafka_delivery_errors) AS errors, argMax(relay_backlog, event_time_ms) AS backlog
    FROM {ctx.view("listener_health")}
    {_where(ctx, False)}
    GROUP BY app_id
)"""
    return panel(
        "stat",
        "Listener and relay losses",
        "Events the listeners dropped (full queue) or the relays lost or failed to deliver to Kafka, summed over "
        "applications (counters since each application started), and the current relay backlog.",
        "short",
        sql,
        width=8,
        height=6,
        options=stat_options(),
        thresholds=steps((None, "green"), (1, "red")),
    )


def sequence_gaps(ctx: SqlContext) -> Json:
    tables = (
        "app_start",
        "app_end",
        "job_start",
        "job_end",
        "sql_start",
        "sql_end",
        "stage_submitted",
        "stage_completed",
        "task_end",
        "aqe_plan_update",
        "aqe_shuffle_read",
        "executor_added",
        "executor_removed",
        "listener_health",
        "raw_events",
    )
    started = (
        f"app_id IN (SELECT app_id FROM {ctx.view('app_start')} WHERE {_scope(ctx, False)} "
        "AND $__timeFilter(event_time))"
    )
    parts = "\nUNION ALL\n".join(
        f"SELECT app_id, max(seq) AS top, count() AS n FROM {ctx.view(t)} WHERE {_scope(ctx, False)} "
        f"AND {started} GROUP BY app_id"
        for t in tables
    )
    sql = f"""SELECT sum(lost) AS events_missing, countIf(lost > 0) AS applications_affected
FROM (SELECT app_id, max(top) - sum(n) AS lost FROM ({parts}) GROUP BY app_id)"""
    return panel(
        "stat",
        "Events missing (sequence gaps)",
        "For applications started in the range: events the collector never stored, from gaps in each "
        "application's sequence numbers (listener drops, Kafka loss, or events still in flight).",
        "short",
        sql,
        width=8,
        height=6,
        options=stat_options(),
        thresholds=steps((None, "green"), (1, "orange")),
    )


def events_stored(ctx: SqlContext) -> Json:
    tables = (
        "task_end",
        "stage_completed",
        "stage_submitted",
        "listener_health",
        "aqe_plan_update",
        "job_start",
        "sql_start",
        "raw_events",
    )
    parts = "\nUNION ALL\n".join(
        f"SELECT {time_bucket('event_time')} AS time, '{t}' AS event_table, count() AS events "
        f"FROM {ctx.view(t)} {_where(ctx, False)} GROUP BY time"
        for t in tables
    )
    sql = f"SELECT time, event_table, events FROM ({parts}) ORDER BY time"
    return panel(
        "timeseries",
        "Events stored by the collector",
        "Events per interval landed in ClickHouse, by table (raw_events: event types this version does not know). "
        "A flat line while applications run means the collector or Kafka is stuck.",
        "short",
        sql,
        fmt="time_series",
        width=12,
        height=6,
        options=timeseries_options(),
        custom=timeseries_custom("bars", stack=True, fill=60),
    )


def last_event(ctx: SqlContext) -> Json:
    parts = "\nUNION ALL\n".join(
        f"SELECT cluster, max(emitted_at_ms) AS t FROM {ctx.view(tb)} WHERE {_scope(ctx, False)} "
        f"AND event_time <= $__toTime AND event_time >= $__fromTime - INTERVAL 1 DAY GROUP BY cluster"
        for tb in ("listener_health", "stage_completed", "app_start", "app_end")
    )
    sql = f"SELECT cluster, max(t) AS last_event FROM ({parts}) GROUP BY cluster ORDER BY cluster"
    return panel(
        "stat",
        "Last event per cluster",
        "When each cluster's newest event was emitted: a cluster going quiet while jobs run points at the "
        "listener, the relay, Kafka or the collector.",
        "dateTimeFromNow",
        sql,
        width=12,
        height=6,
        options=stat_options("none"),
    )


def listener_by_app(ctx: SqlContext) -> Json:
    sql = f"""SELECT app_name, app_id,
    round(100 * max(queue_depth / greatest(queue_capacity, 1)), 1) AS max_queue_pct,
    max(events_accepted) AS accepted, max(events_dropped) AS dropped, max(kafka_delivery_errors) AS kafka_errors,
    max(kafka_events_lost) AS kafka_lost, argMax(relay_backlog, event_time_ms) AS relay_backlog,
    max(relay_restarts) AS relay_restarts
FROM {ctx.view("listener_health")}
{_where(ctx, False)}
GROUP BY app_name, app_id
ORDER BY dropped DESC, max_queue_pct DESC
LIMIT 200"""
    return panel(
        "table",
        "Listener health by application",
        "Per application: highest queue fill, events accepted and dropped by the listener, Kafka delivery errors and "
        "losses, relay backlog and restarts (counters since the application started).",
        "none",
        sql,
        width=24,
        height=8,
        options=table_options("dropped"),
    )

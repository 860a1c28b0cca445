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
from sparktap.detection.sql import SqlContext, identifier_match
from sparktap.schemas.ddl import quote_ident, quote_literal
from sparktap.schemas.health_rollups import (
    HEALTH_EDGES,
    HEALTH_FIVE,
    HEALTH_HOURS,
    HEALTH_ROLLUP,
    highest_bit,
    popcount,
)


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


def _table(ctx: SqlContext, name: str) -> str:
    return f"{quote_ident(ctx.database)}.{quote_ident(name)}"


def _row_scope(ctx: SqlContext, app_match: bool) -> str:
    """The scope's row filter over a health rollup; without ``app_match`` the dashboards' check that a row's
    ``app_id`` is an identifier (``Scope.grafana``) is left to the caller, which keeps only applications a subquery
    with that check returned (the same rows; on 18.16 ``match`` over every row cost ~0.1 s per 7 M rows)."""
    scope = _scope(ctx, False)
    return scope if app_match else scope.replace(f" AND {identifier_match('app_id')}", "")


def _merged(ctx: SqlContext, table: str, condition: str, columns: str, app_match: bool = True, needed: str = "") -> str:
    """One row per key of a health rollup (``schemas/health_rollups.py``) with its blocks' merged ``mask`` of stored
    sequence numbers: ``FINAL`` ORs the states of a key still in several parts (a redelivered event sets a bit already
    set), about 10x cheaper than a ``GROUP BY`` of the whole key on merged parts. ``condition`` is on key columns (all
    the rows of a key pass or none), so it is a ``PREWHERE``: applied before the merge of ``FINAL``, where 18.16
    applies a ``WHERE`` after it, to every key of the sorting key's range (a few minutes of the minute table cost as
    much as the whole table). The scope (an ``IN`` and regular expressions) is the ``WHERE``, on the merged rows that
    passed; ``needed``, a condition on constants only, false when the read has no rows (18.16 then reads nothing,
    where a ``PREWHERE`` the sorting key cannot narrow reads the key columns of the whole range)."""
    where = _row_scope(ctx, app_match) + (f" AND {needed}" if needed else "")
    return f"""SELECT {columns}, finalizeAggregation(seq_mask) AS mask
    FROM {_table(ctx, table)} FINAL
    PREWHERE {condition}
    WHERE {where}"""


def _counted(ctx: SqlContext, inner: str, columns: str, top: bool = False) -> str:
    """``columns`` and ``n``, the events stored in each row of ``inner`` (the popcount of its mask), and with
    ``top`` the row's highest sequence number."""
    native = ctx.features.low_cardinality  # bitCount: servers from 20.x
    exprs = popcount("mask", "n", native) + (highest_bit("mask", "hb", native) if top else [])
    exprs += ["seq_block * 64 + hb AS top"] if top else []
    return f"SELECT {columns}, {', '.join(exprs)}\n    FROM ({inner})"


def sequence_gaps(ctx: SqlContext) -> Json:
    # the raw form (per event table: max(seq) and count() over its _dedup view) is the reference in
    # tests/integration/test_health_rollup.py; this reads the hour rollup of all 15 event tables (HEALTH_SOURCES):
    # the same bits as the minute rollup in ~3x fewer rows (a gap does not depend on when an event happened)
    started = (
        f"app_id IN (SELECT app_id FROM {_table(ctx, HEALTH_EDGES)} WHERE {_scope(ctx, False)} "
        "AND event_table = 'app_start' AND event_time >= $__fromTime AND event_time <= $__toTime "
        "AND event_time + subsecond <= $__toTime)"
    )
    # per application attempt (each numbers its events from 1), summed per application; `started` keeps only
    # identifiers, so the rows need no app_id check of their own
    inner = _merged(ctx, HEALTH_HOURS, started, "app_id, app_attempt, seq_block", app_match=False)
    rows = _counted(ctx, inner, "app_id, app_attempt", top=True)
    sql = f"""SELECT sum(lost) AS events_missing, countIf(lost > 0) AS applications_affected
FROM (SELECT app_id, sum(attempt_lost) AS lost FROM (SELECT app_id, app_attempt, max(top) - sum(n) AS attempt_lost
    FROM ({rows}) GROUP BY app_id, app_attempt) GROUP BY app_id)"""
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


STORED_TABLES = (
    "task_end",
    "stage_completed",
    "stage_submitted",
    "listener_health",
    "aqe_plan_update",
    "job_start",
    "sql_start",
    "raw_events",
)
"""the event tables the events-stored panel shows"""


def events_stored(ctx: SqlContext) -> Json:
    # whole hours inside the range from the hour rollup (when the interval is whole hours), the other whole 5 minutes
    # from the 5-minute rollup (when the interval is whole 5 minutes), the other whole minutes from the minute rollup
    # (when the interval is whole minutes), the partial minutes at either end, and every second when the interval is
    # not whole minutes, from the edge rollup (by second, with `subsecond` for chDB's millisecond event times): exactly
    # the raw `$__timeFilter(event_time)` rows. Hours and 5 minutes as epoch arithmetic (the stored ones are UTC's;
    # toStartOfHour of a bound would use the server's time zone)
    tables = f"event_table IN ({', '.join(quote_literal(t) for t in STORED_TABLES)})"
    whole, five, hourly = "$__interval_s % 60 = 0", "$__interval_s % 300 = 0", "$__interval_s % 3600 = 0"

    def first(s: int) -> str:  # the first whole `s` seconds inside the range, the start of the last partial one
        return f"toDateTime(intDiv(toUInt32($__fromTime) + {s - 1}, {s}) * {s})"

    def last(s: int) -> str:
        return f"toDateTime(intDiv(toUInt32($__toTime), {s}) * {s})"

    def inside(s: int, grain: str, outer: tuple[str, int] | None) -> str:
        """the rows of the `s`-second grain wholly inside the range, but those the coarser `outer` grain reads"""
        out = f"{tables} AND {grain} AND event_time >= $__fromTime AND event_time + {s} <= $__toTime"
        if outer:
            cond, o = outer
            out += f" AND (NOT {cond} OR event_time < {first(o)} OR event_time >= {last(o)})"
        return out

    hours = inside(3600, hourly, None)
    fives = inside(300, five, (hourly, 3600))
    minutes = inside(60, whole, (five, 300))
    edges = (
        f"{tables} AND event_time >= $__fromTime AND event_time <= $__toTime AND event_time + subsecond <= $__toTime "
        f"AND (event_time < if({whole}, toStartOfMinute($__fromTime + 59), $__toTime + 1) "
        f"OR event_time >= if({whole}, toStartOfMinute($__toTime), $__toTime + 1))"
    )
    # a grain's rows are needed when the coarser grain does not cover every whole one of them in the range

    def needed(grain: str, s: int, outer: tuple[str, int]) -> str:
        cond, o = outer
        return f"{grain} AND (NOT {cond} OR {first(s)} < {first(o)} OR {last(o)} < {last(s)})"

    cols = "event_table, event_time"
    reads = (
        (HEALTH_HOURS, hours, hourly),
        (HEALTH_FIVE, fives, needed(five, 300, (hourly, 3600))),
        (HEALTH_ROLLUP, minutes, needed(whole, 60, (five, 300))),
        (HEALTH_EDGES, edges, ""),
    )
    parts = "\n    UNION ALL\n    ".join(_merged(ctx, t, cond, cols, needed=n) for t, cond, n in reads)
    sql = f"""SELECT time, event_table, events
FROM (
    SELECT {time_bucket("event_time")} AS time, toString(event_table) AS event_table, sum(n) AS events
    FROM ({_counted(ctx, parts, cols)})
    GROUP BY time, event_table
)
ORDER BY time"""
    out = panel(
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
    out["interval"] = "1m"  # Grafana's minimum interval: whole minutes, read from the minute rollup
    # At most MAX_POINTS buckets (Grafana caps it further at the panel's width in pixels): a range past ~7 hours gets
    # 5-minute or coarser buckets, read from the 5-minute and hour rollups, and the minute rollup is read over a few
    # hours at most. Without it a half-width panel asks ~900 points, 2-minute buckets for a day: the minute rollup's
    # whole day under FINAL, 1.7-1.8 s on clickhouse-server 18.16 at 100 M task rows (docs/benchmarks.md).
    out["maxDataPoints"] = MAX_POINTS
    return out


MAX_POINTS = 200
"""the events-stored panel's ``maxDataPoints``"""

# Grafana's interval ladder from 1 minute up (@grafana/data rangeutil.roundInterval): the bucket it asks for is the
# range over the panel's maxDataPoints, rounded by this table (upper bound, interval), in milliseconds
_LADDER = (
    (90_000, 60_000),
    (210_000, 120_000),
    (450_000, 300_000),
    (750_000, 600_000),
    (1_050_000, 900_000),
    (1_500_000, 1_200_000),
    (2_700_000, 1_800_000),
    (5_400_000, 3_600_000),
)


def grafana_interval(range_ms: int, max_points: int, min_ms: int) -> int:
    """The ``$__interval`` Grafana gives a panel with ``max_points`` (a width of at least that many pixels) and a
    minimum interval of ``min_ms``, for ranges up to a few days."""
    raw = range_ms / max_points
    step = next((v for bound, v in _LADDER if raw < bound), 7_200_000) if raw >= 45_000 else 30_000
    return max(step, min_ms)


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

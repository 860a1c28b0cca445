"""The panels of the overview and cluster dashboards (the application drill-down's are in ``application_panels.py``,
the pipeline-health ones in ``health_panels.py``): one function per panel, each setting its title, description and
unit.

Queries read the ``<table>_dedup`` views, filter on the dashboard time range with the plugin's macros and on the
``$cluster`` / ``$app`` template variables. The overview's and cluster view's findings panels read the stored
findings (``findings_dedup``, ``schemas/findings_table.py``: one row per finding, written by the alerter after each
pass, ``sparktap findings --store`` for the past), so they never run the detection query over every application of the
range; the application drill-down's findings table runs the detection SQL itself (``detection/rules/``, composed by
``detection/query.py``) over its one application, so it shows findings even where no alerter runs. What each panel
reads is checked by the contract test (``tests/support/dashboard_columns.py``, every query run on chDB).

Fleet scale: the application and cluster panels read the rollups (``schemas/rollups.py``: ``stage_rollup``, one row
per finished stage, and ``app_rollup``, one row per application start and end), never ``task_end``; the findings
over time panel shows the stored findings of finished stages (``findings_over_time``). ``tests/integration/
test_rollups.py`` and ``test_findings_store.py`` check them.
"""

# ruff: noqa: S608 - panel SQL is assembled from our own identifiers and view names, never from user text.

from __future__ import annotations

from sparktap.dashboards.builders import (
    Json,
    barchart_options,
    panel,
    stat_options,
    steps,
    table_options,
    timeseries_custom,
    timeseries_options,
    value_colors,
)
from sparktap.dashboards.defaults import APPLICATION_UID, DASHBOARD_SLUGS, SEVERITY_COLORS
from sparktap.detection.query import rule_query
from sparktap.detection.sql import SqlContext
from sparktap.detection.thresholds import Thresholds


def time_bucket(column: str) -> str:
    """The time series' bucket of a DateTime column: the panel's interval (``$__interval_s``, which the plugin sets
    from the time range and the panel width), in SQL that clickhouse-server 18.16 runs too (the plugin's
    ``$__timeInterval`` expands to ``toStartOfInterval``, which 18.16 lacks)."""
    return f"toDateTime(intDiv(toUInt32({column}), $__interval_s) * $__interval_s)"


def _where(ctx: SqlContext, app: bool = True) -> str:
    return ctx.where(with_app=app)


def _scope(ctx: SqlContext, app: bool = True) -> str:
    return " AND ".join(["1", *ctx.scope.conditions(app)])


STAGES = "stage_rollup"
"""per-stage rollup (``schemas/rollups.py``), read through its ``_dedup`` view like an event table"""
APPS = "app_rollup"
"""per-application rollup: one row per ``app_start`` and per ``app_end`` (``event_type`` tells which)"""


FINDINGS = "findings"
"""the stored findings (``schemas/findings_table.py``), read through ``findings_dedup``"""
_FINDING_ORDER = (
    "time_lost_ms DESC, indexOf(['info', 'warning', 'critical'], severity) DESC, detected_at_ms DESC, rule, cluster, "
    "app_id, stage_id, node_id"
)
"""the detection query's order (``detection/query.py``): the most time lost first, then the most severe, the latest"""
FINDINGS_LIMIT = 1000
"""the rows a findings table shows (the most time lost first): at fleet scale a range holds tens of thousands"""


def _findings(ctx: SqlContext, t: Thresholds) -> str:
    """The findings shown in the range: the stored ones (the alerter's last evaluation of each), not resolved, detected
    in the range, in the detection query's columns (``detected_at`` from ``event_time``). ``t`` is unused: the alerter
    stored them with its own thresholds."""
    return f"""SELECT *, event_time AS detected_at FROM {ctx.view(FINDINGS)}
{_where(ctx)} AND resolved = 0"""


def _live_findings(ctx: SqlContext, t: Thresholds) -> str:
    """The detection query itself (the application drill-down: one application, cheap)."""
    return rule_query(None, t, ctx, "info")


def _starts(ctx: SqlContext) -> str:
    return f"(SELECT * FROM {ctx.view(APPS)} WHERE event_type = 'app_start')"


def _ends(ctx: SqlContext) -> str:
    return f"(SELECT * FROM {ctx.view(APPS)} WHERE event_type = 'app_end')"


def _stage_label() -> str:
    return "concat(toString(stage_id), '.', toString(stage_attempt), ' ', substringUTF8(name, 1, 40))"


APP_LINK: Json = {
    "title": "Open the application dashboard",
    "type": "link",
    "icon": "dashboard",
    "tooltip": "",
    "url": f"/d/{APPLICATION_UID}/{DASHBOARD_SLUGS[APPLICATION_UID]}?var-cluster=${{__data.fields.cluster}}"
    "&var-app=${__data.fields.app_id}&${__url_time_range}",
    "tags": [],
    "asDropdown": False,
    "targetBlank": False,
    "includeVars": False,
    "keepTime": False,
}


# ----------------------------------------------------------------------------------------------- findings


def findings_count(ctx: SqlContext, t: Thresholds, severity: str, width: int = 4) -> Json:
    sql = f"""SELECT count() AS findings
FROM {ctx.view(FINDINGS)}
{_where(ctx)} AND resolved = 0 AND severity = '{severity}'"""
    what = {"critical": "alerted at once", "warning": "alerted", "info": "shown here, not alerted"}[severity]
    return panel(
        "stat",
        f"{severity.capitalize()} findings",
        f"Detection findings of severity {severity} ({what}) in the time range: skew, tiny partitions or files, "
        "shuffle blow-ups, task failures, GC pressure, over stages finished in the range and stages still running, as "
        "the alerter last evaluated them (the stored findings).",
        "short",
        sql,
        width=width,
        height=5,
        options=stat_options(),
        thresholds=steps((None, "green"), (1, SEVERITY_COLORS[severity])),
    )


def findings_over_time(ctx: SqlContext, t: Thresholds, width: int = 10) -> Json:
    sql = f"""SELECT {time_bucket("event_time")} AS time, severity, count() AS findings
FROM {ctx.view(FINDINGS)}
{_where(ctx)} AND resolved = 0 AND running = 0
GROUP BY time, severity
ORDER BY time"""
    return panel(
        "timeseries",
        "Findings over time",
        "Findings of finished stages per interval by severity, at the time each stage finished (stages still "
        "running are in the findings table).",
        "short",
        sql,
        fmt="time_series",
        width=width,
        height=5,
        options=timeseries_options(),
        custom=timeseries_custom("bars", stack=True, fill=80),
    )


def findings_table(ctx: SqlContext, t: Thresholds, title: str = "Findings", live: bool = False) -> Json:
    """``live``: run the detection query (the application drill-down), else read the stored findings."""
    source = f"({_live_findings(ctx, t)})" if live else f"{ctx.view(FINDINGS)}\n{_where(ctx)} AND resolved = 0"
    order = "" if live else f"\nORDER BY {_FINDING_ORDER}\nLIMIT {FINDINGS_LIMIT}"
    sql = f"""SELECT {"detected_at" if live else "event_time"} AS time, severity, rule, cluster, app_name, app_id,
    multiIf(stage_id >= 0, concat(toString(stage_id), '.', toString(stage_attempt)),
            sql_execution_id >= 0, concat('sql ', toString(sql_execution_id), ' node ', toString(node_id)),
            'stream') AS stage,
    stage_name, if(running = 1, 'running', 'finished') AS stage_state, explanation, suggested_fix
FROM {source}{order}"""
    return findings_table_panel(
        title,
        "Every finding with its numbers and a concrete fix, the most time lost first"
        + ("" if live else f" (the first {FINDINGS_LIMIT:,})")
        + ". Click a row to open the application's dashboard.",
        sql,
    )


def findings_table_panel(title: str, description: str, sql: str) -> Json:
    """A full-width table of findings rows: severity colours, the application link on each row."""
    return panel(
        "table",
        title,
        description,
        "none",
        sql,
        width=24,
        height=10,
        options=table_options(),
        mappings=value_colors(SEVERITY_COLORS),
        links=[APP_LINK],
        thresholds=steps((None, "text")),
        custom={"cellOptions": {"type": "color-text"}},
    )


def findings_by_rule(ctx: SqlContext, t: Thresholds, width: int = 6) -> Json:
    sql = f"""SELECT rule, countIf(severity = 'critical') AS critical, countIf(severity = 'warning') AS warning,
    countIf(severity = 'info') AS info
FROM {ctx.view(FINDINGS)}
{_where(ctx)} AND resolved = 0
GROUP BY rule
ORDER BY rule"""
    return panel(
        "barchart",
        "Findings by rule",
        "How many findings each detection rule produced, by severity.",
        "short",
        sql,
        width=width,
        height=5,
        options=barchart_options(horizontal=True, stacked=True, x_field="rule"),
        custom={"fillOpacity": 80, "lineWidth": 1},
    )


# ----------------------------------------------------------------------------------------------- applications


def _apps_in_range(ctx: SqlContext, app: bool = False) -> str:
    """Applications alive during the time range: started before its end and not ended before its start."""
    return (
        f"app_id IN (SELECT app_id FROM {_starts(ctx)} WHERE {_scope(ctx, app)} "
        f"AND event_time <= $__toTime AND app_id NOT IN (SELECT app_id FROM {_ends(ctx)} "
        f"WHERE {_scope(ctx, app)} AND event_time < $__fromTime))"
    )


def applications_stat(ctx: SqlContext, width: int = 6) -> Json:
    sql = f"""SELECT uniqExact(app_id) AS applications,
    uniqExactIf(app_id, app_id NOT IN (SELECT app_id FROM {_ends(ctx)} WHERE {_scope(ctx, False)}
        AND event_time <= $__toTime)) AS running
FROM {_starts(ctx)}
WHERE {_scope(ctx, False)} AND {_apps_in_range(ctx)}"""
    return panel(
        "stat",
        "Applications alive",
        "Spark applications alive during the time range, and how many have not ended yet.",
        "short",
        sql,
        width=width,
        height=5,
        options=stat_options("value"),
    )


def applications_table(ctx: SqlContext) -> Json:
    sql = f"""SELECT cluster, app_name, app_id, started, if(ended_ms > 0, 'finished', 'running') AS state,
    round((if(ended_ms > 0, ended_ms, toInt64(toUInt32(now())) * 1000) - started_ms) / 60000, 1) AS duration_min,
    stages, tasks, failed_tasks, round(task_ms / 3600000, 2) AS task_hours,
    formatReadableSize(shuffle_written) AS shuffle_written, formatReadableSize(spilled) AS spilled_to_disk
FROM
(
    SELECT * FROM
    (
        SELECT cluster, app_id, any(app_name) AS app_name, min(event_time) AS started, min(event_time_ms) AS started_ms
        FROM {_starts(ctx)}
        WHERE {_scope(ctx, False)} AND {_apps_in_range(ctx)}
        GROUP BY cluster, app_id
    ) AS a
    ANY LEFT JOIN
    (
        SELECT cluster, app_id, max(event_time_ms) AS ended_ms
        FROM {_ends(ctx)} WHERE {_scope(ctx, False)} AND event_time <= $__toTime GROUP BY cluster, app_id
    ) AS e USING (cluster, app_id)
) AS ae
ANY LEFT JOIN
(
    SELECT cluster, app_id, count() AS stages, sum(num_tasks) AS tasks, sum(tasks_failed) AS failed_tasks,
        sum(task_duration_ms_sum) AS task_ms, sum(shuffle_write_bytes_sum) AS shuffle_written,
        sum(disk_spill_bytes_sum) AS spilled
    FROM {ctx.view(STAGES)}
    {_where(ctx, False)}
    GROUP BY cluster, app_id
) AS s USING (cluster, app_id)
ORDER BY started DESC
LIMIT 500"""
    return panel(
        "table",
        "Applications",
        "Applications alive during the time range with their size: stages and tasks finished, total task time, "
        "shuffle written and disk spill. Click a row to drill down.",
        "none",
        sql,
        width=24,
        height=9,
        options=table_options("started"),
        links=[APP_LINK],
    )


# ----------------------------------------------------------------------------------------------- cluster


def applications_started(ctx: SqlContext) -> Json:
    sql = f"""SELECT {time_bucket("event_time")} AS time, count() AS applications
FROM {_starts(ctx)}
{_where(ctx, False)}
GROUP BY time
ORDER BY time"""
    return panel(
        "timeseries",
        "Applications started",
        "Spark applications started per interval.",
        "short",
        sql,
        fmt="time_series",
        width=8,
        height=7,
        options=timeseries_options(),
        custom=timeseries_custom("bars", fill=60),
    )


TOP_APP_NAMES = 20
"""the application names a per-name time series panel shows; the rest are summed as ``(other)``"""


def _by_top_names(ctx: SqlContext, value: str, alias: str, divisor: int = 1) -> str:
    """``time, app_name, <alias>``: ``sum(value) / divisor`` per interval for the ``TOP_APP_NAMES`` names with the
    largest sum over the range, the other names' sum as ``(other)``: at fleet scale (thousands of recurring jobs) one
    series per name is a million points that no graph can show."""
    where = _where(ctx, False)
    top = f"""SELECT app_name FROM {ctx.view(STAGES)}
        {where}
        GROUP BY app_name ORDER BY sum({value}) DESC, app_name LIMIT {TOP_APP_NAMES}"""
    scaled = f"sum(t_value) / {divisor}" if divisor != 1 else "sum(t_value)"
    return f"""SELECT time, t_name AS app_name, {scaled} AS {alias}
FROM
(
    SELECT {time_bucket("event_time")} AS time, if(app_name IN ({top}), app_name, '(other)') AS t_name,
        {value} AS t_value
    FROM {ctx.view(STAGES)}
    {where}
)
GROUP BY time, app_name
ORDER BY time, app_name"""


def task_time_by_app(ctx: SqlContext) -> Json:
    sql = _by_top_names(ctx, "task_duration_ms_sum", "task_seconds", 1000)
    return panel(
        "timeseries",
        "Task time by application",
        f"Task time of the stages finished per interval, by application name (the {TOP_APP_NAMES} largest over the "
        "range; the rest as (other)): who uses the cluster.",
        "s",
        sql,
        fmt="time_series",
        width=8,
        height=7,
        options=timeseries_options(),
        custom=timeseries_custom(stack=True, fill=30),
    )


def shuffle_by_app(ctx: SqlContext) -> Json:
    sql = _by_top_names(ctx, "shuffle_write_bytes_sum", "shuffle_written")
    return panel(
        "timeseries",
        "Shuffle written by application",
        f"Shuffle bytes written by the stages finished per interval, by application name (the {TOP_APP_NAMES} "
        "largest over the range; the rest as (other)).",
        "bytes",
        sql,
        fmt="time_series",
        width=8,
        height=7,
        options=timeseries_options(),
        custom=timeseries_custom(stack=True, fill=30),
    )


def executors(ctx: SqlContext) -> Json:
    sql = f"""SELECT time, sum(added) AS executors_added, sum(removed) AS executors_removed
FROM
(
    SELECT {time_bucket("event_time")} AS time, count() AS added, 0 AS removed
    FROM {ctx.view("executor_added")} {_where(ctx, False)} GROUP BY time
    UNION ALL
    SELECT {time_bucket("event_time")} AS time, 0 AS added, count() AS removed
    FROM {ctx.view("executor_removed")} {_where(ctx, False)} GROUP BY time
)
GROUP BY time
ORDER BY time"""
    return panel(
        "timeseries",
        "Executors added and removed",
        "Executor churn per interval: dynamic allocation at work, or executors lost.",
        "short",
        sql,
        fmt="time_series",
        width=12,
        height=7,
        options=timeseries_options(),
        custom=timeseries_custom("bars", fill=60),
    )


def failed_tasks(ctx: SqlContext) -> Json:
    sql = f"""SELECT {time_bucket("event_time")} AS time, sum(tasks_failed) AS failed_tasks,
    sum(tasks_killed) AS killed_tasks
FROM {ctx.view(STAGES)}
{_where(ctx, False)}
GROUP BY time
ORDER BY time"""
    return panel(
        "timeseries",
        "Failed and killed tasks",
        "Task attempts that failed or were killed, in the stages finished per interval.",
        "short",
        sql,
        fmt="time_series",
        width=12,
        height=7,
        options=timeseries_options(),
        custom=timeseries_custom("bars", fill=60),
    )


def top_applications(ctx: SqlContext) -> Json:
    sql = f"""SELECT app_name, app_id, count() AS stages, sum(num_tasks) AS tasks,
    round(sum(task_duration_ms_sum) / 3600000, 2) AS task_hours,
    round(100 * sum(gc_time_ms_sum) / greatest(sum(run_time_ms_sum), 1), 1) AS gc_pct,
    formatReadableSize(sum(shuffle_write_bytes_sum)) AS shuffle_written,
    formatReadableSize(sum(disk_spill_bytes_sum)) AS spilled_to_disk, sum(tasks_failed) AS failed_tasks
FROM {ctx.view(STAGES)}
{_where(ctx, False)}
GROUP BY app_name, app_id
ORDER BY task_hours DESC
LIMIT 50"""
    return panel(
        "table",
        "Top applications by task time",
        "The applications that used the most task time in the range, with GC share, shuffle, spill and failures.",
        "none",
        sql,
        width=24,
        height=9,
        options=table_options("task_hours"),
    )


def active_silences(ctx: SqlContext) -> Json:
    """The alerter's silences in force at the end of the time range (``sparktap silence add``;
    ``detection/silences.py``): a silence's end is the least ``ends_at_ms`` of its rows (an expiry adds a row)."""
    from sparktap.detection.sql import in_variable
    from sparktap.schemas.ddl import SILENCES_TABLE, quote_ident

    table = f"{quote_ident(ctx.database)}.{quote_ident(SILENCES_TABLE)}"
    now_ms = "toInt64(toUnixTimestamp($__toTime)) * 1000"  # now, for a range ending now
    sql = f"""SELECT s_id AS id, s_rule AS rule, s_app_name AS app_name_glob, s_cluster AS cluster, s_team AS team,
    s_user AS `user`, toDateTime(intDiv(s_starts, 1000), 'UTC') AS starts,
    toDateTime(intDiv(s_ends, 1000), 'UTC') AS ends, s_by AS created_by, s_reason AS reason
FROM
(
    SELECT id AS s_id, any(rule) AS s_rule, any(app_name) AS s_app_name, any(cluster) AS s_cluster,
        any(team) AS s_team, any(`user`) AS s_user, any(starts_at_ms) AS s_starts, min(ends_at_ms) AS s_ends,
        any(created_by) AS s_by, any(reason) AS s_reason
    FROM {table}
    GROUP BY id
)
WHERE s_starts <= {now_ms} AND s_ends > {now_ms} AND (s_cluster = '' OR {in_variable("cluster", "cluster")})
ORDER BY ends"""
    return panel(
        "table",
        "Active silences",
        "Silences in force at the end of the time range, i.e. now for a range ending now (sparktap silence add / "
        "list / expire): the built-in alerter sends no message for a finding they match (rule, application-name "
        "glob, cluster, team, user; empty = any) until they end.",
        "none",
        sql,
        width=24,
        height=5,
        options=table_options("ends", descending=False),
    )

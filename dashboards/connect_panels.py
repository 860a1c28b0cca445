"""The "Spark Connect" dashboard's variables and panels (issue 26): who ran what on a shared Spark Connect server.

Variables ``$user`` (Spark Connect users of the operations, else the Spark user of applications) and ``$team``
(``app_start.tags['team']``); an application or operation without one is ``(none)``, so "All" keeps it. Values
reach SQL only through ``in_variable`` (Grafana's percentencode format); a user or team holding a comma would be
split in two.

Panels: operations by user (operations, failed, duration, rows, findings), the operations one by one, and the
findings with who ran them (the attribution columns of ``detection/attribution.py``), read from the stored findings
(``findings_dedup``, written by the alerter: ``panels._findings``).
"""

# ruff: noqa: S608 - panel SQL is assembled from our own identifiers and view names, never from user text.

from __future__ import annotations

from sparktap.dashboards.builders import Json, panel, query_variable, table_options
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.panels import _FINDING_ORDER, APP_LINK, FINDINGS_LIMIT, _findings, findings_table_panel
from sparktap.detection.attribution import tag
from sparktap.detection.sql import Scope, SqlContext, in_variable
from sparktap.detection.thresholds import Thresholds

NONE = "(none)"


def _label(expr: str) -> str:
    return f"if({expr} = '', '{NONE}', {expr})"


def _app_team(ctx: SqlContext, where: str = "") -> str:
    """Per application attempt: its team tag (the variable's and the filters' values)."""
    return f"""SELECT cluster, app_id, app_attempt, any({_label(f"toString({tag(ctx, 'team')})")}) AS team
FROM {ctx.view("app_start")}
WHERE {where or " AND ".join(["1", *ctx.scope.conditions(False)])}
GROUP BY cluster, app_id, app_attempt"""


def _team_apps(ctx: SqlContext) -> str:
    """``app_id IN`` the applications of the chosen teams."""
    return f"app_id IN (SELECT app_id FROM ({_app_team(ctx)}) WHERE {in_variable('team', 'team')})"


def user_variable(cfg: GrafanaConfig) -> Json:
    ctx = SqlContext(cfg.database, cfg.clickhouse_version, Scope())
    sql = f"""SELECT DISTINCT `user` FROM
(
    SELECT {_label("toString(user_id)")} AS `user` FROM {ctx.view("operation")}
    WHERE event_time <= $__toTime AND {in_variable("cluster", "cluster")}
    UNION ALL
    SELECT {_label("toString(`user`)")} AS `user` FROM {ctx.view("app_start")}
    WHERE event_time <= $__toTime AND {in_variable("cluster", "cluster")}
)
ORDER BY `user`"""
    return query_variable(
        "user",
        "User",
        f"Who ran it: Spark Connect users, and the Spark user of other applications ({NONE}: unknown)",
        sql,
        multi=True,
        include_all=True,
        datasource_uid=cfg.datasource_uid,
    )


def team_variable(cfg: GrafanaConfig) -> Json:
    ctx = SqlContext(cfg.database, cfg.clickhouse_version, Scope())
    where = f"event_time <= $__toTime AND {in_variable('cluster', 'cluster')}"
    sql = f"""SELECT DISTINCT team FROM ({_app_team(ctx, where)})
WHERE 1 ORDER BY team"""
    return query_variable(
        "team",
        "Team",
        f"The applications' team tag (spark.sparktap.tags; {NONE}: no tag)",
        sql,
        multi=True,
        include_all=True,
        datasource_uid=cfg.datasource_uid,
    )


def _operations(ctx: SqlContext) -> str:
    """One row per operation: user, session, last status, start and end, rows, statement (the time range and the
    cluster, user and team variables applied)."""
    return f"""SELECT cluster, app_id, operation_id, any(session_id) AS session,
    anyIf(toString(user_id), status = 'started') AS op_user, argMax(toString(status), event_time_ms) AS state,
    min(ifNull(start_time_ms, event_time_ms)) AS start_ms,
    maxIf(event_time_ms, status IN ('finished', 'failed', 'canceled')) AS end_ms,
    sum(ifNull(rows, 0)) AS op_rows, anyIf(statement, status = 'started') AS op_statement
FROM {ctx.view("operation")}
{ctx.where(with_app=False)} AND operation_id != '' AND {_team_apps(ctx)}
GROUP BY cluster, app_id, operation_id
HAVING {in_variable(_label("op_user"), "user")}"""


def operations_by_user(ctx: SqlContext, t: Thresholds) -> Json:
    sql = f"""SELECT `user`, operations, failed, duration_s, rows, findings
FROM
(
    SELECT {_label("op_user")} AS `user`, count() AS operations, countIf(state IN ('failed', 'canceled')) AS failed,
        sum(if(end_ms >= start_ms, end_ms - start_ms, 0)) / 1000 AS duration_s, sum(op_rows) AS rows
    FROM ({_operations(ctx)})
    GROUP BY `user`
) AS o
ANY LEFT JOIN
(
    SELECT {_label("`user`")} AS `user`, count() AS findings
    FROM ({_findings(ctx, t)})
    WHERE session_id != ''
    GROUP BY `user`
) AS f USING (`user`)
ORDER BY duration_s DESC, `user`"""
    return panel(
        "table",
        "Operations by user",
        "Spark Connect operations per user in the time range: how many, how many failed or were cancelled, their "
        "total duration (start to finish), the rows they returned, and the findings on their jobs.",
        "none",
        sql,
        width=24,
        height=8,
        options=table_options(),
    )


def operations_table(ctx: SqlContext) -> Json:
    sql = f"""SELECT toDateTime(intDiv(start_ms, 1000)) AS time, {_label("op_user")} AS `user`, session, operation_id,
    state, if(end_ms >= start_ms, (end_ms - start_ms) / 1000, 0) AS duration_s, op_rows AS rows, app_id,
    substringUTF8(op_statement, 1, 200) AS statement
FROM ({_operations(ctx)})
ORDER BY start_ms DESC
LIMIT 500"""
    return panel(
        "table",
        "Operations",
        "Each Spark Connect operation: who ran it, in which session, its last status, duration and rows, and the "
        "start of its (redacted) statement. Click a row to open the server's application dashboard.",
        "none",
        sql,
        width=24,
        height=10,
        options=table_options(),
        links=[APP_LINK],
    )


def findings_by_who(ctx: SqlContext, t: Thresholds) -> Json:
    sql = f"""SELECT detected_at AS time, severity, rule, {_label("`user`")} AS `user`, {_label("team")} AS team,
    arrayStringConcat(job_tags, ', ') AS tags, session_id, operation_id, app_name, app_id, stage_name, explanation
FROM ({_findings(ctx, t)})
WHERE {in_variable(_label("`user`"), "user")} AND {in_variable(_label("team"), "team")}
ORDER BY {_FINDING_ORDER}
LIMIT {FINDINGS_LIMIT}"""
    return findings_table_panel(
        "Findings by who ran them",
        "Every finding with its user (the Spark Connect user, else the Spark user), team tag, job tags, session "
        "and operation, the most time lost first.",
        sql,
    )

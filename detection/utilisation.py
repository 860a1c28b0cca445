"""Utilisation and cost as SQL (issue 25): allocated against busy core-time, idle share, memory held and its cost,
per application, job, SQL execution and stage, attributed to the Spark user, the team and cost-centre tags and the
recurring job (the application name).

- **Allocated core-ms** of an executor: its cores × its lifetime, from ``executor_added`` to ``executor_removed``;
  lifetimes still open close at the application's ``app_end`` (a standalone cluster kills its executors after the
  application ends, so they never send a removal), or at the end of the time range while it runs. Of a job, SQL
  execution or stage: the cores × the part of each lifetime inside its interval (the cores held while it ran).
- **Busy core-ms**: task run time (``executorRunTime``) × ``spark.task.cpus`` (1 when unset), summed over the
  stage attempts (``stage_completed.run_time_ms_sum``).
- **Idle** = allocated − busy (never below 0); idle share = idle / allocated.
- **Memory GiB-ms**: (``memory_mb`` + ``memory_overhead_mb`` + ``pyspark_memory_mb``) of each executor / 1024 × its
  lifetime; 0 where the listener did not report the request.
- **Cost** = allocated core-hours × the cluster's core-hour price + GiB-hours × its GiB-hour price
  (``detection/prices.py``).

Applications are those whose ``app_start`` lies in the time range (``$__timeFilter``), so each one is counted once,
on the day it started; cost per day (``usage_by_day``) splits each across the UTC days its executors were held.
Same dialect as ``sql.py``: 18.16 and chDB, no CTE, one ``ANY LEFT JOIN … USING`` per SELECT; executor lifetimes
travel as parallel arrays per application and intervals are summed with lambdas. A lambda never captures a column
(18.16 prunes captured columns of a subquery: "Unknown identifier"): a per-row value goes in as an array argument,
``replicate(value, array)``.
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and typed literals (lit()), never from user text.

from __future__ import annotations

from typing import Literal

from sparktap.detection.history import history_app_ids
from sparktap.detection.prices import DEFAULT_COST, CostSettings
from sparktap.detection.sql import SqlContext, join_using
from sparktap.schemas.ddl import quote_literal

Level = Literal["app", "job", "sql", "stage"]
LEVELS: tuple[Level, ...] = ("app", "job", "sql", "stage")
APP_KEY = "cluster, app_id, app_attempt"
HOUR_MS = 3_600_000.0

COST_SUMS = f"""sum(allocated_core_ms) / {HOUR_MS!r} AS core_hours, sum(busy_core_ms) / {HOUR_MS!r} AS busy_core_hours,
    sum(idle_core_ms) / {HOUR_MS!r} AS idle_core_hours,
    if(sum(allocated_core_ms) > 0, sum(idle_core_ms) / sum(allocated_core_ms), 0.) AS idle_share,
    sum(allocated_gib_ms) / {HOUR_MS!r} AS gib_hours, sum(core_cost) AS core_cost, sum(memory_cost) AS memory_cost,
    sum(cost) AS cost"""
"""The cost and utilisation sums of a grouping over usage rows (``cost_query``, ``cost_sql.owner_cost_query``)."""

USAGE_COLUMNS: tuple[str, ...] = (
    "cluster",
    "app_id",
    "app_attempt",
    "app_name",
    "user",
    "team",
    "cost_centre",
    "level",
    "id",
    "attempt",
    "name",
    "start_ms",
    "end_ms",
    "running",
    "executors",
    "allocated_core_ms",
    "busy_core_ms",
    "idle_core_ms",
    "idle_share",
    "allocated_gib_ms",
    "core_cost",
    "memory_cost",
    "cost",
    "executor_heap_mb",
    "cores",
    "oom_removals",
)
"""The columns of ``usage_query`` (every level)."""


def tag(ctx: SqlContext, key: str) -> str:
    """A value of ``app_start.tags`` ('' when absent)."""
    if ctx.features.map:
        return f"tags[{quote_literal(key)}]"
    return f"visitParamExtractString(tags, {quote_literal(key)})"


def _started(ctx: SqlContext, days: int = 0) -> str:
    """``WHERE`` of the applications started in the range, or (``days`` > 0: a recurring job's history) in the range
    widened ``days`` into the past, of the jobs (cluster, application name) started in the range and scope: the only
    history the rules keep, so a pass reads in proportion to those jobs' runs, not to the store."""
    if not days:
        return ctx.where()
    if ctx.scope.app:
        return f"{ctx.where(extend_days=days, with_app=False)} AND app_id IN ({_job_apps(ctx, days)})"
    jobs = f"SELECT cluster, app_name FROM {ctx.view('app_start')} {ctx.where()}"
    return f"{ctx.where(extend_days=days, with_app=False)} AND (cluster, app_name) IN ({jobs})"


def _job_apps(ctx: SqlContext, days: int) -> str:
    """The ids of the applications ``_started(ctx, days)`` selects, in one read of ``app_start``: its rows in the
    widened range grouped by job, the jobs with a start in the range and scope kept (the range and scope are a part of
    the widened range and its cluster scope, so this is the same set). ``_from_start`` narrows every source of the
    ``app`` relation with it: a nested ``IN`` there (two reads) made ClickHouse analyse twice the subqueries.

    With an application scope (an event-driven pass): the scoped runs and their jobs' last ``ctx.history_runs``
    earlier runs, from the job-ordered index of runs (``history.py``), so the pass reads a bounded number of runs per
    job instead of every run of the window."""
    if ctx.scope.app:
        return history_app_ids(ctx, days, ctx.history_runs)
    now = " AND ".join(["$__timeFilter(event_time)", *ctx.scope.conditions()])
    return f"""SELECT arrayJoin(s_ids) AS app_id FROM (SELECT groupArray(app_id) AS s_ids
    FROM (SELECT cluster, app_name, app_id, toUInt8({now}) AS s_now FROM {ctx.view("app_start")}
        {ctx.where(extend_days=days, with_app=False)})
    GROUP BY cluster, app_name HAVING max(s_now) = 1)"""


def _from_start(ctx: SqlContext, days: int = 0) -> str:
    """``WHERE`` (``SqlContext.filter``) of the rows of the applications started in the range: anything they did from
    the range's start on."""
    apps = _job_apps(ctx, days) if days else f"SELECT app_id FROM {ctx.view('app_start')} {_started(ctx)}"
    since = f"greatest($__fromTime, toDateTime({days * 86_400})) - INTERVAL {days} DAY" if days else "$__fromTime"
    app = " AND ".join([f"app_id IN ({apps})", *([ctx.scope.app] if ctx.scope.app and not days else [])])
    if ctx.final_reads:
        return ctx.filter([f"event_time >= {since}", *ctx.scope.conditions(False)], app)
    return "WHERE " + " AND ".join([f"event_time >= {since}", f"app_id IN ({apps})", *ctx.scope.conditions(not days)])


Props = tuple[tuple[str, str], ...]
"""Extra Spark properties to carry along, as (column, property key): '' when absent."""


def applications(ctx: SqlContext, days: int = 0, props: Props = ()) -> str:
    """Per application attempt started in the range: name, user, tags, start, end (0 while running), task cpus, and
    the ``props`` asked for."""
    cpus = f"greatest(toFloat64OrZero(any({ctx.prop('spark.task.cpus')})), 1.)"
    extra = "".join(f", toString(any({ctx.prop(key)})) AS {name}" for name, key in props)
    started = f"""SELECT {APP_KEY}, any(app_name) AS u_app_name, toString(any(user)) AS u_user,
    toString(any({tag(ctx, "team")})) AS u_team, toString(any({tag(ctx, "cost_centre")})) AS u_cost_centre,
    toInt64(min(event_time_ms)) AS u_start_ms, {cpus} AS u_task_cpus{extra}
FROM {ctx.view("app_start")}
{_started(ctx, days)}
GROUP BY {APP_KEY}"""
    ended = f"""SELECT {APP_KEY}, toInt64(max(event_time_ms)) AS u_end_ms
FROM {ctx.view("app_end")}
{_from_start(ctx, days)}
GROUP BY {APP_KEY}"""
    return join_using(started, ended, APP_KEY)


def executor_lifetimes(ctx: SqlContext, days: int = 0) -> str:
    """Per executor (``driver`` too, where Spark reports it): add time, cores, memory requested (MiB), removal time
    (0 while open) and removal class."""
    mem = " + ".join(f"ifNull({f}, 0)" for f in ("memory_mb", "memory_overhead_mb", "pyspark_memory_mb"))
    added = f"""SELECT {APP_KEY}, executor_id, toInt64(min(event_time_ms)) AS x_add_ms,
    toFloat64(max(total_cores)) AS x_cores, toFloat64(max({mem})) AS x_mem_mb,
    toFloat64(max(ifNull(memory_mb, 0))) AS x_heap_mb
FROM {ctx.view("executor_added")}
{_from_start(ctx, days)}
GROUP BY {APP_KEY}, executor_id"""
    removed = f"""SELECT {APP_KEY}, executor_id, toInt64(min(event_time_ms)) AS x_removed_ms,
    argMin(toString(removal_class), event_time_ms) AS x_class, argMin(toString(reason), event_time_ms) AS x_reason
FROM {ctx.view("executor_removed")}
{_from_start(ctx, days)}
GROUP BY {APP_KEY}, executor_id"""
    return join_using(added, removed, f"{APP_KEY}, executor_id")


def app_executors(ctx: SqlContext, days: int = 0) -> str:
    """Per application attempt: its executors' lifetimes as parallel arrays (``ex_*``)."""
    return f"""SELECT {APP_KEY}, groupArray(toString(executor_id)) AS ex_ids, groupArray(x_add_ms) AS ex_add,
    groupArray(x_removed_ms) AS ex_removed, groupArray(x_cores) AS ex_cores, groupArray(x_mem_mb) AS ex_mem_mb,
    groupArray(x_heap_mb) AS ex_heap_mb, groupArray(x_class) AS ex_class
FROM
(
{executor_lifetimes(ctx, days)}
)
GROUP BY {APP_KEY}"""


def app_busy(ctx: SqlContext, days: int = 0) -> str:
    """Per application attempt: task run time of its stage attempts, and its stages' wall time. Of the applications
    started in the range only, whatever ``days``: a recurring job's history (``fleet.HISTORY``) carries no busy time,
    and reading every earlier run's stages would make a pass grow with the store (0 for the earlier runs)."""
    return f"""SELECT {APP_KEY}, toFloat64(sum(run_time_ms_sum)) AS b_run_ms, toFloat64(count()) AS b_stages
FROM {ctx.view("stage_completed")}
{_from_start(ctx)}
GROUP BY {APP_KEY}"""


APP_COLUMNS = (
    "u_app_name",
    "u_user",
    "u_team",
    "u_cost_centre",
    "u_start_ms",
    "u_task_cpus",
    "u_end_ms",
    "u_close_ms",
    "ex_ids",
    "ex_add",
    "ex_removed",
    "ex_cores",
    "ex_mem_mb",
    "ex_heap_mb",
    "ex_class",
    "b_run_ms",
    "b_stages",
)
"""The columns of ``app_relation`` besides the key (and ``ex_end``), listed: a ``SELECT *`` of joins carries the
right side's ``r.cluster`` … on 18.16, and joining that again crashes the server."""


def app_relation(ctx: SqlContext, days: int = 0, props: Props = ()) -> str:
    """Per application attempt: the arrays of its executor lifetimes, each closed (``ex_end``) at its removal, else
    at ``app_end``, else at the end of the range; its task run time; close time ``u_close_ms``."""
    executors = join_using(
        ctx.staged("applications", applications(ctx, days, props)),
        ctx.staged("app_executors", app_executors(ctx, days)),
        APP_KEY,
    )
    rel = join_using(executors, ctx.staged("app_busy", app_busy(ctx, days)), APP_KEY)
    now = "toInt64(toUInt32($__toTime)) * 1000"
    return f"""SELECT {APP_KEY}, {", ".join((*APP_COLUMNS, *(name for name, _ in props)))},
    arrayMap((a, r, c) -> greatest(a, if(r > 0, least(r, c), c)), ex_add, ex_removed,
    replicate(u_close_ms, ex_add)) AS ex_end
FROM
(
    SELECT *, if(u_end_ms > 0, u_end_ms, greatest({now}, u_start_ms)) AS u_close_ms
    FROM
    (
{rel}
    )
)"""


def _intervals(ctx: SqlContext, level: Level) -> str:
    """The jobs, SQL executions or stage attempts of the applications in range: level, id, attempt, name, start,
    end (the interval the allocation is measured over) and busy task run time. One level per query: 18.16 crashes on
    a ``UNION ALL`` of the levels joined to the applications."""
    where = _from_start(ctx)
    stages = f"""SELECT {APP_KEY}, 'stage' AS i_level, toInt64(stage_id) AS i_id, toInt64(stage_attempt) AS i_attempt,
    toString(name) AS i_name, toInt64(ifNull(submission_time_ms, event_time_ms - duration_ms)) AS i_start,
    toInt64(ifNull(completion_time_ms, event_time_ms)) AS i_end, toFloat64(run_time_ms_sum) AS i_run_ms
FROM {ctx.view("stage_completed")}
{where}"""

    def grouped(level: str, start_table: str, end_table: str, id_col: str, stage_col: str, name: str) -> str:
        begin = f"""SELECT {APP_KEY}, toInt64({id_col}) AS g_id, toString(any({name})) AS g_name,
    toInt64(min(event_time_ms)) AS g_start
FROM {ctx.view(start_table)}
{where}
GROUP BY {APP_KEY}, g_id"""
        end = f"""SELECT {APP_KEY}, toInt64({id_col}) AS g_id, toInt64(max(event_time_ms)) AS g_end
FROM {ctx.view(end_table)}
{where}
GROUP BY {APP_KEY}, g_id"""
        busy = f"""SELECT {APP_KEY}, toInt64({stage_col}) AS g_id, toFloat64(sum(run_time_ms_sum)) AS g_run_ms
FROM {ctx.view("stage_completed")}
{where} AND isNotNull({stage_col})
GROUP BY {APP_KEY}, g_id"""
        rel = join_using(join_using(begin, end, f"{APP_KEY}, g_id"), busy, f"{APP_KEY}, g_id")
        return f"""SELECT {APP_KEY}, {quote_literal(level)} AS i_level, g_id AS i_id, toInt64(0) AS i_attempt,
    g_name AS i_name, g_start AS i_start, if(g_end > 0, g_end, toInt64(toUInt32($__toTime)) * 1000) AS i_end,
    g_run_ms AS i_run_ms
FROM
(
{rel}
)"""

    if level == "job":
        return grouped("job", "job_start", "job_end", "job_id", "job_id", "ifNull(description, '')")
    if level == "sql":
        return grouped("sql", "sql_start", "sql_end", "execution_id", "sql_execution_id", "description")
    return stages


def usage_query(
    ctx: SqlContext, level: Level = "app", cost: CostSettings = DEFAULT_COST, days: int = 0, props: Props = ()
) -> str:
    """One row per application attempt (``level='app'``), job, SQL execution or stage attempt of the applications
    started in the range (widened ``days`` into the past, applications only), with ``USAGE_COLUMNS`` (and the
    ``props`` asked for, applications only)."""
    if level not in LEVELS:
        raise ValueError(f"unknown utilisation level {level!r}: use one of {', '.join(LEVELS)}")
    if level == "app":
        inner = f"""SELECT *, 'app' AS level, toInt64(-1) AS id, toInt64(-1) AS attempt, toString(u_app_name) AS name,
    u_start_ms AS start_ms, u_end_ms AS end_ms, b_run_ms * u_task_cpus AS busy_core_ms,
    arraySum((a, e, c) -> c * toFloat64(e - a), ex_add, ex_end, ex_cores) AS allocated_core_ms,
    arraySum((a, e, m) -> m / 1024 * toFloat64(e - a), ex_add, ex_end, ex_mem_mb) AS allocated_gib_ms
FROM
(
{ctx.staged("app_relation", app_relation(ctx, days, props))}
)"""
    else:
        overlap = "toFloat64(greatest(least(e, ie) - greatest(a, ib), 0))"
        within = "replicate(i_start, ex_add), replicate(i_end, ex_add)"
        inner = f"""SELECT *, i_level AS level, i_id AS id, i_attempt AS attempt, i_name AS name, i_start AS start_ms,
    i_end AS end_ms, i_run_ms * u_task_cpus AS busy_core_ms,
    arraySum((a, e, ib, ie, c) -> c * {overlap}, ex_add, ex_end, {within}, ex_cores) AS allocated_core_ms,
    arraySum((a, e, ib, ie, m) -> m / 1024 * {overlap}, ex_add, ex_end, {within}, ex_mem_mb) AS allocated_gib_ms
FROM
(
{join_using(_intervals(ctx, level), app_relation(ctx), APP_KEY)}
)"""
    core, gib = cost.price_sql("core_hour"), cost.price_sql("gib_hour")
    carried = "".join(f", {name}" for name, _ in props)
    return f"""SELECT cluster, app_id, app_attempt, toString(u_app_name) AS app_name, u_user AS user, u_team AS team,
    u_cost_centre AS cost_centre, level, id, attempt, name, start_ms, end_ms, toUInt8(u_end_ms = 0) AS running,
    toFloat64(length(ex_ids)) AS executors, allocated_core_ms, busy_core_ms,
    greatest(allocated_core_ms - busy_core_ms, 0.) AS idle_core_ms,
    if(allocated_core_ms > 0, idle_core_ms / allocated_core_ms, 0.) AS idle_share, allocated_gib_ms,
    allocated_core_ms / {HOUR_MS!r} * {core} AS core_cost, allocated_gib_ms / {HOUR_MS!r} * {gib} AS memory_cost,
    core_cost + memory_cost AS cost, arrayReduce('max', ex_heap_mb) AS executor_heap_mb,
    arraySum(ex_cores) AS cores, toFloat64(countEqual(ex_class, 'oom')) AS oom_removals{carried}
FROM
(
{inner}
)"""


DAY_MS = 86_400_000


def usage_by_day(ctx: SqlContext, cost: CostSettings = DEFAULT_COST) -> str:
    """One row per application attempt started in the range and UTC day it ran on (``d_day``: days since 1970-01-01),
    with the ``usage_query`` figures of that day: the core-time and memory its executors held within the day, and
    its busy core-time in proportion (task run time is not split by time of day: a day's share of it is the day's
    share of the held core-time; all of it on the start day when no executor was held)."""
    n = f"toUInt64(intDiv(greatest(u_close_ms - 1, u_start_ms), {DAY_MS}) - intDiv(u_start_ms, {DAY_MS}) + 1)"
    days = f"arrayMap((i, f) -> f + toInt64(i), range({n}), replicate(intDiv(u_start_ms, {DAY_MS}), range({n})))"
    overlap = f"toFloat64(greatest(least(e, ds + {DAY_MS}) - greatest(a, ds), 0))"
    within = "replicate(d_day * " + str(DAY_MS) + ", ex_add)"
    core, gib = cost.price_sql("core_hour"), cost.price_sql("gib_hour")
    busy = "b_run_ms * u_task_cpus"
    return f"""SELECT cluster, app_id, app_attempt, toString(u_app_name) AS app_name, u_user AS user, u_team AS team,
    u_cost_centre AS cost_centre, d_day, allocated_core_ms,
    if(total_core_ms > 0, {busy} * allocated_core_ms / total_core_ms,
        if(d_day = intDiv(u_start_ms, {DAY_MS}), {busy}, 0.)) AS busy_core_ms,
    greatest(allocated_core_ms - busy_core_ms, 0.) AS idle_core_ms, allocated_gib_ms,
    allocated_core_ms / {HOUR_MS!r} * {core} AS core_cost, allocated_gib_ms / {HOUR_MS!r} * {gib} AS memory_cost,
    core_cost + memory_cost AS cost
FROM
(
    SELECT *, d_day, arraySum((a, e, ds, c) -> c * {overlap}, ex_add, ex_end, {within}, ex_cores) AS allocated_core_ms,
        arraySum((a, e, ds, m) -> m / 1024 * {overlap}, ex_add, ex_end, {within}, ex_mem_mb) AS allocated_gib_ms,
        arraySum((a, e, c) -> c * toFloat64(e - a), ex_add, ex_end, ex_cores) AS total_core_ms
    FROM
    (
{app_relation(ctx)}
    )
    ARRAY JOIN {days} AS d_day
)"""


DAY_TEXT = "toString(toDate(toUInt16(d_day)))"
"""``usage_by_day``'s day as ``YYYY-MM-DD`` (UTC; a Date is a day number on 18.16 and chDB alike)."""
GROUPS = {
    "team": "team",
    "user": "user",
    "app": "app_name",
    "cluster": "cluster",
    "cost_centre": "cost_centre",
    "day": DAY_TEXT,
}


def cost_query(ctx: SqlContext, by: str, cost: CostSettings = DEFAULT_COST, per_day: bool = False) -> str:
    """Cost and utilisation of the applications started in the range, summed by team, user, application name
    (``app``), cluster, cost centre or UTC day (and day, with ``per_day``): the most expensive first, day by day.

    By day, an application's cost is split across the days its executors were held (``usage_by_day``): one that
    runs over midnight counts on both days, each with the core-time and memory held on it."""
    if by not in GROUPS:
        raise ValueError(f"unknown grouping {by!r}: use one of {', '.join(GROUPS)}")
    per_day = per_day and by != "day"
    daily = per_day or by == "day"
    day = f"{DAY_TEXT} AS day, " if per_day else ""
    keys = "day, key" if per_day else "key"
    source = usage_by_day(ctx, cost) if daily else usage_query(ctx, "app", cost)
    order = "key, " if by == "day" else "day, " if per_day else ""
    return f"""SELECT {day}{GROUPS[by]} AS key, toFloat64(count()) AS applications,
    {COST_SUMS}
FROM
(
{source}
)
GROUP BY {keys}
ORDER BY {order}cost DESC, core_hours DESC, key"""

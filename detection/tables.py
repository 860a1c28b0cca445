"""The per-table reads of the detection rules (issue 42): the table a SQL execution wrote (the ``tables`` enrichment
of the stage relation, for ``small_files``) and the ``table`` relation (one row per table, for ``table_file_growth``).

Both read ``table_rollup`` (``schemas/rollups.py``: one row per ``table_access`` event, kept with the application
summaries), never the names as SQL: a table's name and location are values of rows, compared and returned, never
spliced into a query. A table is keyed by ``(cluster, catalog, table key, format)``, the table key being its qualified
name, else (a bare path) its location.

Finding ids of the ``table`` relation: the top writer's latest run that wrote the table (``app_id``, ``app_attempt``,
``app_name``), so the finding is attributed and routed like that run's;
``stage_name`` is the table key; ``job``, ``stage_id``, ``stage_attempt`` and ``node_id`` are -1. An application
scope keeps the tables whose finding is attributed to a scoped application (the pass of that run raises it).

Same dialect as ``sql.py`` (18.16 and chDB): one JOIN per SELECT, every join's columns selected by name, no lambda
capturing a column (a per-row value goes in as ``replicate(value, array)``).
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and typed threshold literals (lit()), never from user text.

from __future__ import annotations

from sparktap.detection.history import job_key
from sparktap.detection.sql import SqlContext, join_using
from sparktap.schemas.ddl import quote_literal
from sparktap.schemas.rollups import COMPACTION_MODES, TABLE_KEY, TABLE_ROLLUP

DAY_MS = 86_400_000
TREND_DAYS = 30
"""How far back the ``small_files`` trend of a written table reads (the table's files written per day)"""

_COMPACTION = f"lower(write_mode) IN ({', '.join(quote_literal(m) for m in COMPACTION_MODES)})"
TABLE_KEY_COLUMNS = "cluster, t_catalog, t_key, t_format"


def written_tables(ctx: SqlContext) -> str:
    """Per SQL execution (``cluster, app_id, app_attempt, sql_exec``): the table it wrote the most files to
    (``tw_table``: the table key, ``tw_format``, ``tw_location``) and that table's files written per day over the
    last ``TREND_DAYS`` days up to the range's end (``tw_trend_files``, ``tw_trend_days``: the days written)."""
    writes = f"""SELECT cluster, app_id, app_attempt, toInt64(execution_id) AS sql_exec,
    argMax(toString(catalog), ifNull(files, 0)) AS t_catalog, argMax({TABLE_KEY}, ifNull(files, 0)) AS t_key,
    argMax(toString(format), ifNull(files, 0)) AS t_format, argMax(location, ifNull(files, 0)) AS tw_location
FROM {ctx.view(TABLE_ROLLUP)}
{ctx.where(extend_days=1)} AND role = 'write'
GROUP BY cluster, app_id, app_attempt, sql_exec"""
    scope = " AND ".join(["1", *ctx.scope.conditions(False)])
    trend = f"""SELECT cluster, toString(catalog) AS t_catalog, {TABLE_KEY} AS t_key, toString(format) AS t_format,
    toFloat64(sum(ifNull(files, 0))) AS tw_trend_files, toFloat64(uniqExact(toDate(event_time))) AS tw_trend_days
FROM {ctx.view(TABLE_ROLLUP)}
WHERE role = 'write' AND event_time >= $__toTime - INTERVAL {TREND_DAYS} DAY AND event_time <= $__toTime AND {scope}
GROUP BY cluster, t_catalog, t_key, t_format"""
    joined = join_using(writes, trend, TABLE_KEY_COLUMNS)
    return f"""SELECT cluster, app_id, app_attempt, sql_exec, t_key AS tw_table, t_format AS tw_format, tw_location,
    tw_trend_files, tw_trend_days
FROM
(
{joined}
)"""


def written_columns(ctx: SqlContext) -> str:
    """``written_tables``' columns for each stage row, as a SELECT-list fragment over a relation with ``cluster,
    app_id, app_attempt, sql_exec``: looked up in one scalar subquery (arrays by execution key) instead of a JOIN.
    clickhouse-server 18.16 analyses the stage relation again at every nesting level above it: one more JOIN level
    made the single detection query (a Grafana panel) about 7 s slower there."""
    key = "concat(cluster, ' ', app_id, ' ', app_attempt, ' ', toString(sql_exec))"  # identifiers hold no space
    rows = ctx.staged("written_tables", written_tables(ctx))
    table = (
        f"(SELECT tuple(groupArray({key}), groupArray(tw_table), groupArray(tw_format), groupArray(tw_location), "
        f"groupArray(tw_trend_files), groupArray(tw_trend_days)) FROM ({rows}))"
    )
    names = ("tw_table", "tw_format", "tw_location", "tw_trend_files", "tw_trend_days")
    found = f"indexOf(tupleElement(tw_all, 1), {key})"
    picked = ", ".join(f"arrayElement(tupleElement(tw_all, {i + 2}), tw_at) AS {n}" for i, n in enumerate(names))
    return f"{table} AS tw_all, {found} AS tw_at, {picked}"


def _writers(ctx: SqlContext, days: int, parts: tuple[str, ...]) -> str:
    """Per table: the writer (recurring job key, else application name) that wrote the most files over the window,
    its files, and its latest run that wrote the table (the finding's ids)."""
    rows = f"""SELECT cluster, app_id, app_attempt, toString(app_name) AS w_app_name, toString(catalog) AS t_catalog,
    {TABLE_KEY} AS t_key, toString(format) AS t_format, toFloat64(ifNull(files, 0)) AS w_files, event_time_ms,
    toInt64(execution_id) AS w_exec
FROM {ctx.view(TABLE_ROLLUP)}
{ctx.where(extend_days=days, with_app=False)} AND role = 'write' AND NOT {_COMPACTION}"""
    jobs = f"""SELECT cluster, app_id, app_attempt, {job_key(ctx, parts)} AS w_job
FROM {ctx.view("app_start")}
{ctx.where(extend_days=days + 1, with_app=False)}"""
    keyed = join_using(rows, jobs, "cluster, app_id, app_attempt")
    per_writer = f"""SELECT cluster, t_catalog, t_key, t_format, w_writer, sum(w_files) AS ww_files,
    argMax(app_id, event_time_ms) AS ww_app_id, argMax(app_attempt, event_time_ms) AS ww_app_attempt,
    argMax(w_app_name, event_time_ms) AS ww_app_name, argMax(w_exec, event_time_ms) AS ww_exec
FROM
(
    SELECT cluster, app_id, app_attempt, w_app_name, t_catalog, t_key, t_format, w_files, event_time_ms, w_exec,
        if(w_job != '', w_job, concat('app_name=', w_app_name)) AS w_writer
    FROM
    (
{keyed}
    )
)
GROUP BY cluster, t_catalog, t_key, t_format, w_writer"""
    return f"""SELECT cluster, t_catalog, t_key, t_format, argMax(w_writer, ww_files) AS g_top_writer,
    max(ww_files) AS g_top_writer_files, argMax(ww_app_id, ww_files) AS g_app_id,
    argMax(ww_app_attempt, ww_files) AS g_app_attempt, argMax(ww_app_name, ww_files) AS g_app_name,
    argMax(ww_exec, ww_files) AS g_exec, toFloat64(count()) AS g_writers
FROM
(
{per_writer}
)
GROUP BY cluster, t_catalog, t_key, t_format"""


TABLE_COLUMNS = (
    "cluster, app_id, app_attempt, app_name, job, sql_exec, stage_id, stage_attempt, stage_name, node_id, running, "
    "detected_at_ms, g_format, g_location, g_files, g_bytes, g_writes, g_days, g_first_ms, g_last_ms, "
    "g_compactions, g_last_compaction_ms, g_reads, g_bytes_read, g_in_range, g_top_writer, g_top_writer_files, "
    "g_writers"
)
"""The columns of ``table_relation`` by name (a staged table of it refuses a join's duplicate columns on 18.16)."""


def table_relation(ctx: SqlContext, days: int, parts: tuple[str, ...]) -> str:
    """One row per table written in the ``days`` before the range's end (and after the range's start, widened by
    ``days``): the files, bytes and writes since its last compaction in the window (all of them without one), the
    days they span, its compactions, reads and bytes read, and its top writer (``_writers``). ``g_in_range``: the
    table was written in the range itself (a pass raises a table once it is written again, not at every pass)."""
    after = "arrayFilter((t, c) -> t > c, t_w_ms, replicate(t_last_compaction_ms, t_w_ms))"
    kept = "arrayFilter((x, t, c) -> t > c, {arr}, t_w_ms, replicate(t_last_compaction_ms, t_w_ms))"
    stats = f"""SELECT cluster, t_catalog, t_key, t_format, g_location,
    arraySum({kept.format(arr="t_w_files")}) AS g_files, arraySum({kept.format(arr="t_w_bytes")}) AS g_bytes,
    toFloat64(length({after})) AS g_writes,
    toInt64(arrayReduce('min', {after})) AS g_first_ms, toInt64(arrayReduce('max', {after})) AS g_last_ms,
    if(g_writes > 0, toFloat64(intDiv(g_last_ms - g_first_ms, {DAY_MS}) + 1), 0.) AS g_days,
    g_compactions, toInt64(t_last_compaction_ms) AS g_last_compaction_ms, g_reads, g_bytes_read,
    toUInt8(t_in_range > 0 AND g_last_ms > t_last_compaction_ms) AS g_in_range
FROM
(
    SELECT cluster, toString(catalog) AS t_catalog, {TABLE_KEY} AS t_key, toString(format) AS t_format,
        argMax(location, event_time_ms) AS g_location,
        toInt64(maxIf(event_time_ms, role = 'write' AND {_COMPACTION})) AS t_last_compaction_ms,
        toFloat64(countIf(role = 'write' AND {_COMPACTION})) AS g_compactions,
        countIf(role = 'write' AND NOT {_COMPACTION} AND ($__timeFilter(event_time))) AS t_in_range,
        groupArrayIf(toInt64(event_time_ms), role = 'write' AND NOT {_COMPACTION}) AS t_w_ms,
        groupArrayIf(toFloat64(ifNull(files, 0)), role = 'write' AND NOT {_COMPACTION}) AS t_w_files,
        groupArrayIf(toFloat64(ifNull(bytes, 0)), role = 'write' AND NOT {_COMPACTION}) AS t_w_bytes,
        toFloat64(countIf(role = 'read')) AS g_reads, toFloat64(sumIf(ifNull(bytes, 0), role = 'read')) AS g_bytes_read
    FROM {ctx.view(TABLE_ROLLUP)}
    {ctx.where(extend_days=days, with_app=False)}
    GROUP BY cluster, t_catalog, t_key, t_format
)"""
    joined = join_using(stats, _writers(ctx, days, parts), TABLE_KEY_COLUMNS)
    return f"""SELECT cluster, toString(g_app_id) AS app_id, toString(g_app_attempt) AS app_attempt,
    toString(g_app_name) AS app_name, toInt64(-1) AS job, toInt64(-1) AS sql_exec, toInt64(-1) AS stage_id,
    toInt64(-1) AS stage_attempt, t_key AS stage_name, toInt64(-1) AS node_id, toUInt8(0) AS running,
    g_last_ms AS detected_at_ms, t_format AS g_format, g_location, g_files, g_bytes, g_writes, g_days, g_first_ms,
    g_last_ms, g_compactions, g_last_compaction_ms, g_reads, g_bytes_read, g_in_range, g_top_writer,
    g_top_writer_files, g_writers
FROM
(
{joined}
)
WHERE {" AND ".join(["g_writes > 0 AND g_app_id != ''", *([ctx.scope.app] if ctx.scope.app else [])])}"""

"""The panels of the "Tables" dashboard (issue 42): the tables of the fleet by files written, by small-file share and
by bytes read, and one table's trend and writers. One function per panel, each setting its title, description and
unit.

The SQL reads the per-table rollup (``table_rollup``, ``schemas/rollups.py``: ``table_daily``), scoped by the
``$cluster`` variable like every panel. A table's name and location are untrusted text: they are values of rows,
never SQL. The ``$table`` variable (one table) reaches SQL only through Grafana's ``percentencode`` format decoded by
ClickHouse (``table_value``): whatever the name holds (quotes, backslashes, ``$``, commas, braces), the literal holds
only ``A-Z a-z 0-9 - _ . ~ %``.
"""

# ruff: noqa: S608 - panel SQL is assembled from our own identifiers and view names, never from user text.

from __future__ import annotations

from sparktap.dashboards.builders import Json, panel, query_variable, table_options, timeseries_options
from sparktap.detection.attribution import tag
from sparktap.detection.sql import SqlContext
from sparktap.schemas.rollups import TABLE_KEY, TABLE_ROLLUP, table_daily

TOP = 25
"""Tables a top-N panel lists"""


def table_value() -> str:
    """SQL: the ``$table`` variable's one value as a string, safe whatever it holds (``detection.sql.variable_values``
    for one value: no splitting, a table name may hold a comma)."""
    return "decodeURLComponent('${table:percentencode}')"


def _scope(ctx: SqlContext) -> str:
    return " AND ".join(["$__timeFilter(event_time)", *ctx.scope.conditions(False)])


def _per_table(ctx: SqlContext) -> str:
    """Per table over the range: writes, files, bytes, average file size, small-file share, reads, bytes read."""
    daily = table_daily(ctx.view(TABLE_ROLLUP), _scope(ctx))
    return f"""SELECT cluster, table_key AS table_name, any(format) AS table_format, toFloat64(sum(writes)) AS writes,
    toFloat64(sum(files_written)) AS files_written, toFloat64(sum(bytes_written)) AS bytes_written,
    if(files_written > 0, bytes_written / files_written, 0.) AS avg_file_bytes,
    if(files_written > 0, sum(small_files_written) / files_written, 0.) AS small_file_share,
    toFloat64(sum(reads)) AS reads, toFloat64(sum(bytes_read)) AS bytes_read,
    toFloat64(sum(compactions)) AS compactions, toFloat64(count()) AS days
FROM ({daily})
GROUP BY cluster, table_name"""


def table_variable(ctx: SqlContext, datasource_uid: str) -> Json:
    sql = f"""SELECT table_name FROM ({_per_table(ctx)})
WHERE writes > 0 OR reads > 0
ORDER BY files_written DESC, table_name
LIMIT 500"""
    return query_variable(
        "table",
        "Table",
        "A table (catalog name, or the path of a bare-path write) of the selected clusters, the most files written "
        "in the time range first",
        sql,
        multi=False,
        include_all=False,
        datasource_uid=datasource_uid,
    )


def _columns() -> str:
    return (
        "cluster, table_name, table_format, files_written, avg_file_bytes, small_file_share, writes, bytes_written, "
        "reads, bytes_read, compactions"
    )


def top_by_files(ctx: SqlContext) -> Json:
    sql = f"""SELECT {_columns()} FROM ({_per_table(ctx)})
WHERE files_written > 0
ORDER BY files_written DESC, table_name
LIMIT {TOP}"""
    return panel(
        "table",
        "Top tables by files written",
        "The tables that got the most files in the time range: files, average file size, the share of files written "
        "by writes averaging under 32 MiB a file, writes, bytes, reads, and compactions seen (Delta OPTIMIZE, Iceberg "
        "rewrite_data_files writes). Many files averaging a few MiB, read often and never compacted, is the "
        "table_file_growth finding.",
        "short",
        sql,
        width=24,
        height=9,
        options=table_options("files_written"),
    )


def top_by_small_share(ctx: SqlContext) -> Json:
    sql = f"""SELECT {_columns()} FROM ({_per_table(ctx)})
WHERE files_written >= 100
ORDER BY small_file_share DESC, files_written DESC, table_name
LIMIT {TOP}"""
    return panel(
        "table",
        "Top tables by small-file share",
        "Tables with at least 100 files written in the time range, by the share of their files written by writes "
        "averaging under 32 MiB a file (1 = every file small): the tables each read of which opens the most files "
        "per byte.",
        "percentunit",
        sql,
        width=12,
        height=9,
        options=table_options("small_file_share"),
    )


def top_by_bytes_read(ctx: SqlContext) -> Json:
    sql = f"""SELECT cluster, table_name, table_format, bytes_read, reads, files_written, avg_file_bytes
FROM ({_per_table(ctx)})
WHERE reads > 0
ORDER BY bytes_read DESC, table_name
LIMIT {TOP}"""
    return panel(
        "table",
        "Top tables by bytes read",
        "The tables scans read the most bytes of in the time range (the scans' own size of files read), with how "
        "often they were read and the files written to them meanwhile.",
        "bytes",
        sql,
        width=12,
        height=9,
        options=table_options("bytes_read"),
    )


def table_trend(ctx: SqlContext) -> Json:
    daily = table_daily(ctx.view(TABLE_ROLLUP), f"{_scope(ctx)} AND {TABLE_KEY} = {table_value()}")
    sql = f"""SELECT toDateTime(day) AS time, toFloat64(sum(files_written)) AS files_written,
    if(files_written > 0, toFloat64(sum(bytes_written)) / files_written, 0.) AS avg_file_bytes,
    toFloat64(sum(reads)) AS reads, toFloat64(sum(compactions)) AS compactions
FROM ({daily})
GROUP BY time
ORDER BY time"""
    return panel(
        "timeseries",
        "Files written per day: $table",
        "The selected table, per day of the time range: files written, their average size, reads and compactions "
        "(a day without a write shows no point). Set the time range to 30 days for the table_file_growth window.",
        "short",
        sql,
        fmt="time_series",
        width=12,
        height=8,
        options=timeseries_options(),
    )


def table_writers(ctx: SqlContext) -> Json:
    writes = f"""SELECT cluster, app_id, app_attempt, toString(app_name) AS w_app_name, toFloat64(ifNull(files, 0))
    AS w_files, toFloat64(ifNull(bytes, 0)) AS w_bytes
FROM {ctx.view(TABLE_ROLLUP)}
WHERE {_scope(ctx)} AND role = 'write' AND {TABLE_KEY} = {table_value()}"""
    teams = f"""SELECT cluster, app_id, app_attempt, any(toString({tag(ctx, "team")})) AS w_team
FROM {ctx.view("app_start")}
WHERE {" AND ".join(["1", *ctx.scope.conditions(False)])}
GROUP BY cluster, app_id, app_attempt"""
    sql = f"""SELECT cluster, w_app_name AS app_name, if(w_team = '', '(none)', w_team) AS team,
    toFloat64(count()) AS writes, toFloat64(uniqExact(app_id)) AS runs, sum(w_files) AS files_written,
    sum(w_bytes) AS bytes_written
FROM
(
    SELECT * FROM ({writes}) AS l
    ANY LEFT JOIN ({teams}) AS r USING (cluster, app_id, app_attempt)
)
GROUP BY cluster, app_name, team
ORDER BY files_written DESC, app_name
LIMIT {TOP}"""
    return panel(
        "table",
        "Writers of $table",
        "Who wrote the selected table in the time range: the application name and its team tag (app_start tags), "
        "with writes, runs, files and bytes.",
        "short",
        sql,
        width=12,
        height=8,
        options=table_options("files_written"),
    )

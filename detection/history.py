"""The recurring jobs' history, read from the job-ordered index of runs (``run_rollup``, ``schemas/rollups.py``).

A recurring job has a key (``job_key``, issue 39), never shared across clusters: ``spark.sparktap.job`` when the
application sets it (its ``job`` tag, or the property); else a combination of the application name, the Spark user
and the schedule's own job id where the scheduler sets one (``spark.databricks.job.id``; Airflow's
``dag_id.task_id`` as the OpenLineage provider passes it, ``spark.openlineage.parentJobName``), chosen by
``run_regression.job_key`` (default: name and schedule). Names that unrelated applications share by default (a
shell's, a notebook's: ``SHARED_NAMES``, ``SHARED_NAME_PATTERNS``) are no job unless keyed (an explicit job or a
schedule id): such an application has no earlier runs, so no history rule compares it with strangers. The
history rules compare a run with the job's earlier runs: the shuffle blow-up history (a stage's shuffle bytes
against the median of its last ``history_runs`` runs) and the ``app`` relation (``fleet.py``: run regression, memory
over-provisioned over the last ``runs`` finished runs, and the stages that grew).

``run_rollup`` holds one row per ``app_start``, ``app_end`` and ``stage_completed`` event, ordered by ``(cluster,
app_name, event_type, app_id, …)``: the runs of one job are together, whatever their day, so a read of a few jobs
prunes to their granules (``index_granularity`` 256) instead of every earlier run's day of the event tables.

**Event-driven pass** (the scope names applications): ``history_apps`` reads the scoped applications' jobs' starts and
ends from the index (one row per run, not per stage), and keeps, per job, the scoped runs and every run that started
at or after the ``runs``-th newest *finished* run started before the earliest scoped one. So the history reads take
a bounded number of runs per job (``runs`` plus those started since), not every run of the window, and every rule
still sees its last ``runs`` earlier runs (runs by start time; a run in which a stage did not run counts as one of the
job's last runs). **Full pass** (no application scope): every run of the window, as before.
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers, typed literals and the scope's quoted literals.

from __future__ import annotations

from typing import Literal

from sparktap.detection.sql import SqlContext, lit
from sparktap.schemas.ddl import quote_literal
from sparktap.schemas.rollups import RUN_ROLLUP

_MAX_MS = 9_223_372_036_854_775_807

SHARED_NAMES = (
    "Spark shell",  # spark-shell
    "PySparkShell",  # pyspark
    "pyspark-shell",  # a SparkSession built without appName (PySpark's default)
    "SparkR",  # sparkR
    "sparklyr",
    "Spark Connect server",
    "Thrift JDBC/ODBC Server",
    "Zeppelin",
    "Livy",
)
"""Default application names that unrelated applications share: never one recurring job."""
SHARED_NAME_PATTERNS = (
    r"^SparkSQL::",  # spark-sql: SparkSQL::<host address>
    r"^livy-session-[0-9]+",  # Livy's interactive sessions
    r"^Databricks Shell",  # every notebook on a Databricks cluster
    r"^(Untitled|Notebook)[ -]?[0-9]*$",  # notebooks left unnamed
)
"""Patterns of such names (RE2, as ClickHouse's ``match``); the names and patterns are ours, never user text."""


def shared_name(column: str = "app_name") -> str:
    """SQL: whether ``column`` is a name unrelated applications share (then it is no recurring job)."""
    names = ", ".join(lit(n) for n in SHARED_NAMES)
    patterns = " OR ".join(f"match({column}, {lit(p)})" for p in SHARED_NAME_PATTERNS)
    return f"({column} IN ({names}) OR {patterns})"


JobPart = Literal["app_name", "user", "schedule"]
DEFAULT_JOB_KEY: tuple[JobPart, ...] = ("app_name", "schedule")
EXPLICIT_JOB = "spark.sparktap.job"
"""The Spark property that names the recurring job; the listener carries it as the ``job`` tag."""
SCHEDULE_PROPERTIES = ("spark.databricks.job.id", "spark.openlineage.parentJobName")
"""The scheduler's job id where one is set: a Databricks job's id (the same for each of its runs), an Airflow task's
``dag_id.task_id`` (the OpenLineage provider's parent job name)."""


def _text(ctx: SqlContext, column: str, key: str) -> str:
    """A value of the ``app_start`` map (or JSON text on 18.16) ``column``, '' when absent."""
    if ctx.features.map:
        return f"{column}[{quote_literal(key)}]"
    return f"visitParamExtractString({column}, {quote_literal(key)})"


def job_key(ctx: SqlContext, parts: tuple[str, ...] = DEFAULT_JOB_KEY) -> str:
    """SQL over an ``app_start`` row: the key of the recurring job the application is a run of, '' when it is none
    (a shared default name, not keyed). The cluster is not in it: every caller groups by cluster first."""
    tag = _text(ctx, "tags", "job")
    explicit = f"if({tag} != '', {tag}, {_text(ctx, 'properties', EXPLICIT_JOB)})"
    ids = ", ".join(_text(ctx, "properties", p) for p in SCHEDULE_PROPERTIES)
    schedule = f"arrayStringConcat(arrayFilter(x -> x != '', [{ids}]), ' ')"
    values = {"app_name": "toString(app_name)", "user": "toString(user)", "schedule": schedule}
    combined = ", '|', ".join(f"'{p}=', {values[p]}" for p in parts)
    return (
        f"multiIf({explicit} != '', concat('job=', {explicit}), {shared_name()} AND {schedule} = '', '', "
        f"concat({combined}))"
    )


def _jobs(ctx: SqlContext) -> str:
    """(cluster, app_name) of the scoped applications that belong to a recurring job (their ``app_start``, pruned by
    the ``app_id`` key): a shared default name has no job unless keyed, so no earlier runs are read for it. Runs of
    another job of the same name are read too (the index is by name) and told apart by ``job_key`` afterwards."""
    scope = " AND ".join(["1", *ctx.scope.conditions(), f"{job_key(ctx, ctx.job_parts)} != ''"])
    return f"SELECT cluster, app_name FROM {ctx.view('app_start')} WHERE {scope}"


def history_apps(ctx: SqlContext, days: int, runs: int) -> str:
    """``SELECT cluster, app_name, app_id`` of the runs the history rules need, in the range widened ``days`` back:
    with an application scope, the scoped runs and their jobs' runs started since the ``runs``-th newest finished
    one before them; without, every run of the window (jobs of the range's applications only: the callers join)."""
    where = ctx.where(extend_days=days, with_app=False)
    if not ctx.scope.app:
        return (
            f"SELECT DISTINCT cluster, app_name, app_id FROM {ctx.view(RUN_ROLLUP)}\n"
            f"    {where} AND event_type = 'app_start'"
        )
    now = " AND ".join(["event_type = 'app_start'", *ctx.scope.conditions()])
    mine = "arrayFilter((s, n) -> n = 1 AND s > 0, r_starts, r_nows)"
    ref = f"arrayReduce('min', arrayPushBack({mine}, toInt64({_MAX_MS})))"
    prev = (
        "arrayReverseSort(arrayFilter((s, e, n, r) -> e > 0 AND n = 0 AND s < r, r_starts, r_ends, r_nows, "
        "replicate(r_ref, r_starts)))"
    )
    cut = f"if(length(r_prev) >= {lit(runs)}, arrayElement(r_prev, {lit(runs)}), toInt64(0))" if runs > 0 else "0"
    per_run = f"""SELECT cluster, app_name, toString(app_id) AS r_app,
    toInt64(minIf(event_time_ms, event_type = 'app_start')) AS r_start,
    toInt64(maxIf(event_time_ms, event_type = 'app_end')) AS r_end, toUInt8(max({now})) AS r_now
FROM {ctx.view(RUN_ROLLUP)}
{where} AND event_type IN ('app_start', 'app_end') AND (cluster, app_name) IN ({_jobs(ctx)})
GROUP BY cluster, app_name, app_id"""
    per_job = f"""SELECT cluster, app_name, groupArray(r_app) AS r_apps, groupArray(r_start) AS r_starts,
    groupArray(r_end) AS r_ends, groupArray(r_now) AS r_nows
FROM
(
{per_run}
)
GROUP BY cluster, app_name"""
    kept = f"""SELECT h_cluster AS cluster, h_name AS app_name, h_app AS app_id
FROM
(
    SELECT cluster AS h_cluster, app_name AS h_name, r_apps, r_starts, r_nows, {cut} AS r_cut
    FROM
    (
        SELECT *, {prev} AS r_prev
        FROM
        (
            SELECT *, {ref} AS r_ref
            FROM
            (
{per_job}
            )
        )
    )
)
ARRAY JOIN r_apps AS h_app, r_starts AS h_start, r_nows AS h_now
WHERE h_now = 1 OR h_start >= r_cut"""
    return ctx.staged(f"history_{int(days)}_{int(runs)}", kept, in_subquery=True)


def history_app_ids(ctx: SqlContext, days: int, runs: int) -> str:
    """``SELECT app_id`` of ``history_apps``: to narrow the event tables (sorting key ``cluster, day, app_id``)."""
    return f"SELECT app_id FROM ({history_apps(ctx, days, runs)})"


def history_stages(ctx: SqlContext, days: int, runs: int, where: str = "", until_range_end: bool = True) -> str:
    """The ``stage_completed`` rows of the history runs (every run of the window without an application scope), from
    the index: ``FROM … WHERE …`` (``where``: more conditions), columns as in ``stage_completed`` (``name``,
    ``status``, ``duration_ms``, the shuffle sums); ``until_range_end`` False: no upper time bound."""
    extra = f" AND {where}" if where else ""
    window = ctx.where(extend_days=days, with_app=False)
    if not until_range_end:  # from the widened range's start on, like ``utilisation._from_start``
        since = f"greatest($__fromTime, toDateTime({int(days) * 86_400})) - INTERVAL {int(days)} DAY"
        window = "WHERE " + " AND ".join([f"event_time >= {since}", *ctx.scope.conditions(False)])
    if ctx.scope.app:
        extra += f"\n        AND (cluster, app_name, app_id) IN ({history_apps(ctx, days, runs)})"
    return f"""FROM {ctx.view(RUN_ROLLUP)}
    {window} AND event_type = 'stage_completed'{extra}"""


def stage_history(ctx: SqlContext, days: int) -> str:
    """Per (cluster, app_name, stage name): shuffle bytes of each earlier run (application), as parallel arrays, from
    the job-ordered index of runs (``history.py``: with an application scope, the jobs' last ``ctx.history_runs``)."""
    return f"""SELECT cluster, app_name, stage_name, groupArray(h_app) AS hist_apps, groupArray(h_bytes) AS hist_bytes,
    groupArray(h_time) AS hist_times
FROM
(
    SELECT cluster, app_name, name AS stage_name,
        toString(app_id) AS h_app,
        toFloat64(max(greatest(shuffle_write_bytes_sum, shuffle_read_bytes_sum))) AS h_bytes,
        toInt64(min(event_time_ms)) AS h_time
    {history_stages(ctx, days, ctx.history_runs, f"status = 'succeeded' AND NOT {shared_name()}")}
    GROUP BY cluster, app_name, name, app_id
)
GROUP BY cluster, app_name, stage_name"""

"""The ``app`` relation of the utilisation, memory and run-over-run rules (issue 25): one row per application attempt
started in the range, with its utilisation (``utilisation.py``), the properties the fixes quote, its executors' and
driver's memory peaks against their requests, its executors lost to memory, and the history of its recurring job
(earlier applications of the same job key on the same cluster: ``history.job_key``) with the stages that grew.

Finding ids: ``job``, ``sql_exec``, ``stage_id``, ``stage_attempt`` and ``node_id`` are -1 and ``stage_name`` is ''
(the finding is about the application). ``running`` is 1 while it has no ``app_end``.

Same dialect as ``sql.py`` (18.16 and chDB): every join's result is selected by name (18.16 carries the right side's
``r.cluster`` … in a ``SELECT *`` and crashes when that is joined again), and no lambda captures a column (a per-row
value goes in as ``replicate(value, array)``).
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and typed threshold literals (lit()), never from user text.

from __future__ import annotations

from sparktap.detection.history import history_stages, job_key
from sparktap.detection.sql import SqlContext, join_using, lit, size_bytes
from sparktap.detection.utilisation import APP_KEY, USAGE_COLUMNS, _from_start, _started, usage_query

MiB = 1_048_576

PROPS = (
    ("p_executor_memory", "spark.executor.memory"),
    ("p_driver_memory", "spark.driver.memory"),
    ("p_dynamic", "spark.dynamicAllocation.enabled"),
    ("p_idle_timeout", "spark.dynamicAllocation.executorIdleTimeout"),
    ("p_master", "spark.master"),
)

PEAK_COLUMNS = (
    "m_heap",
    "m_off_heap",
    "m_used",
    "m_rss",
    "m_python_rss",
    "m_gc_ms",
    "m_driver_heap",
    "m_driver_used",
    "m_driver_gc_ms",
    "m_rows",
)

FACT_COLUMNS = (*USAGE_COLUMNS, *(name for name, _ in PROPS), *PEAK_COLUMNS, "heap_bytes", "driver_bytes", "used_share")


def memory_peaks(ctx: SqlContext, days: int = 0) -> str:
    """Per application attempt, from ``executor_metrics``: the largest executor peaks (heap, off-heap, their sum,
    process-tree RSS, Python RSS), the executors' GC time (lifetime summaries), and the driver's."""
    ex, drv = "executor_id != 'driver'", "executor_id = 'driver'"
    lifetime = "isNull(stage_id)"
    rss = "process_tree_jvm_rss_memory + process_tree_python_rss_memory + process_tree_other_rss_memory"
    return f"""SELECT {APP_KEY},
    toFloat64(max(if({ex}, jvm_heap_memory, 0))) AS m_heap,
    toFloat64(max(if({ex}, jvm_off_heap_memory, 0))) AS m_off_heap,
    toFloat64(max(if({ex}, jvm_heap_memory + jvm_off_heap_memory, 0))) AS m_used,
    toFloat64(max(if({ex}, {rss}, 0))) AS m_rss,
    toFloat64(max(if({ex}, process_tree_python_rss_memory, 0))) AS m_python_rss,
    toFloat64(sum(if({ex} AND {lifetime}, total_gc_time, 0))) AS m_gc_ms,
    toFloat64(max(if({drv}, jvm_heap_memory, 0))) AS m_driver_heap,
    toFloat64(max(if({drv}, jvm_heap_memory + jvm_off_heap_memory, 0))) AS m_driver_used,
    toFloat64(sum(if({drv} AND {lifetime}, total_gc_time, 0))) AS m_driver_gc_ms,
    toFloat64(count()) AS m_rows
FROM {ctx.view("executor_metrics")}
{_from_start(ctx, days)}
GROUP BY {APP_KEY}"""


def _named(rel: str, columns: tuple[str, ...], key: str = APP_KEY) -> str:
    return f"SELECT {key}, {', '.join(c for c in columns if c not in key.split(', '))}\nFROM\n(\n{rel}\n)"


def app_facts(ctx: SqlContext, days: int = 0) -> str:
    """Utilisation, properties and memory peaks per application attempt (``FACT_COLUMNS``), its recurring job's key
    ``job_key`` ('' when it is no job: ``history.job_key``, with ``ctx.job_parts``), with the heap request
    ``heap_bytes`` (the executors' ``memory_mb``, else ``spark.executor.memory``), ``driver_bytes``
    (``spark.driver.memory``, Spark's 1 GiB when unset) and ``used_share`` (peak heap + off-heap over the heap)."""
    usage = usage_query(ctx, "app", days=days, props=PROPS)
    usage = ctx.staged("usage", usage)
    rel = _named(join_using(usage, ctx.staged("memory_peaks", memory_peaks(ctx, days)), APP_KEY), FACT_COLUMNS[:-3])
    driver = size_bytes("p_driver_memory")
    facts = f"""SELECT *, if(heap_bytes > 0 AND m_used > 0, m_used / heap_bytes, 0.) AS used_share
FROM
(
    SELECT *,
        if(executor_heap_mb > 0, executor_heap_mb * {MiB}, {size_bytes("p_executor_memory")}) AS heap_bytes,
        if({driver} > 0, {driver}, {1024 * MiB}.) AS driver_bytes
    FROM
    (
{rel}
    )
)"""
    keys = f"""SELECT {APP_KEY}, any({job_key(ctx, ctx.job_parts)}) AS job_key
FROM {ctx.view("app_start")}
{_started(ctx, days)}
GROUP BY {APP_KEY}"""
    return _named(join_using(facts, keys, APP_KEY), (*FACT_COLUMNS, "job_key"))


def grown_stages(ctx: SqlContext, days: int, runs: int, ratio: float, min_growth_ms: int) -> str:
    """Per application attempt: its stages (by name) whose wall time is ≥ ``ratio`` × their median over the
    recurring job's last ``runs`` earlier runs and ≥ ``min_growth_ms`` longer, the largest growth first. The earlier
    runs' stages come from the job-ordered index of runs (``history.py``)."""
    now = f"""SELECT {APP_KEY}, any(app_name) AS app_name, toString(name) AS stage_name,
    toFloat64(sum(duration_ms)) AS s_dur, toInt64(min(event_time_ms)) AS s_time
FROM {ctx.view("stage_completed")}
{_from_start(ctx)}
GROUP BY {APP_KEY}, stage_name"""
    runs_of = f"""SELECT cluster, app_name, stage_name, groupArray(g_app) AS g_apps, groupArray(g_dur) AS g_durs,
    groupArray(g_time) AS g_times
FROM
(
    SELECT cluster, app_name, toString(name) AS stage_name, toString(app_id) AS g_app,
        toFloat64(sum(duration_ms)) AS g_dur, toInt64(min(event_time_ms)) AS g_time
    {history_stages(ctx, days, ctx.history_runs, until_range_end=False)}
    GROUP BY cluster, app_name, stage_name, app_id
)
GROUP BY cluster, app_name, stage_name"""
    key = "cluster, app_name, stage_name"
    joined = _named(
        join_using(ctx.staged("stage_durations", now), ctx.staged("job_stage_runs", runs_of), key),
        ("app_id", "app_attempt", "s_dur", "s_time", "g_apps", "g_durs", "g_times"),
        key,
    )
    prev = "(d, a, t, me, b) -> a != me AND t < b"
    args = "g_durs, g_apps, g_times, replicate(toString(app_id), g_apps), replicate(s_time, g_apps)"
    return f"""SELECT {APP_KEY}, groupArray(stage_name) AS gs_names, groupArray(s_dur) AS gs_durs,
    groupArray(gs_median) AS gs_medians, groupArray(gs_delta) AS gs_deltas
FROM
(
    SELECT *, {median("gs_recent")} AS gs_median, s_dur - gs_median AS gs_delta
    FROM
    (
        SELECT *, arraySlice(arrayReverseSort((d, t) -> t, arrayFilter({prev}, {args}),
            arrayFilter((t, a, me, b) -> a != me AND t < b, g_times, g_apps, replicate(toString(app_id), g_apps),
            replicate(s_time, g_apps))), 1, {lit(runs)}) AS gs_recent
        FROM
        (
{joined}
        )
    )
    WHERE length(gs_recent) > 0 AND s_dur >= {lit(ratio)} * gs_median AND s_dur - gs_median >= {lit(min_growth_ms)}
)
GROUP BY {APP_KEY}"""


def median(array: str) -> str:
    """The median of a numeric array (the mean of the two middle values for an even count); 0 when empty."""
    s = f"arraySort({array})"
    n = f"length({array})"
    return (
        f"if({n} = 0, 0., (toFloat64(arrayElement({s}, toUInt32(intDiv({n} + 1, 2)))) "
        f"+ toFloat64(arrayElement({s}, toUInt32(intDiv({n}, 2) + 1)))) / 2)"
    )


HISTORY = (
    ("h_apps", "toString(app_id)"),
    ("h_starts", "start_ms"),
    ("h_ends", "end_ms"),
    ("h_durs", "toFloat64(end_ms - start_ms)"),
    ("h_core_ms", "allocated_core_ms"),
    ("h_used", "m_used"),
    ("h_share", "used_share"),
)
GROWN_COLUMNS = ("gs_names", "gs_durs", "gs_medians", "gs_deltas")


RUNS_OF = "if(job_key = '', concat('app=', toString(app_id)), job_key)"
"""The group of an application's runs in ``app_facts``: its recurring job, else itself alone (no job)."""


def app_rule_relation(ctx: SqlContext, days: int, runs: int, ratio: float, min_growth_ms: int) -> str:
    """One row per application attempt started in the range: ``app_facts`` with its recurring job's runs in the
    range widened ``days`` back (``h_*`` arrays, this run included) and its grown stages (``gs_*``), in the finding
    columns' shape. The facts are computed once, over the widened range: grouped by job into arrays, then array-joined
    back to one row per application, of which those started in the range are kept."""
    facts = [c for c in FACT_COLUMNS if c != "cluster"]
    grouped = ",\n    ".join(
        [*(f"groupArray({c}) AS f_{c}" for c in facts), *(f"groupArray({e}) AS {n}" for n, e in HISTORY)]
    )
    joined = ", ".join(f"f_{c} AS {c}" for c in facts)
    start = "intDiv(start_ms, 1000)"
    current = [f"{start} >= toUInt32($__fromTime)", f"{start} <= toUInt32($__toTime)", *ctx.scope.conditions()]
    per_app = f"""SELECT cluster, {", ".join(facts)}, {", ".join(n for n, _ in HISTORY)}
FROM
(
    SELECT cluster,
    {grouped}
    FROM
    (
{ctx.staged("app_facts", app_facts(ctx, days))}
    )
    GROUP BY cluster, {RUNS_OF}
)
ARRAY JOIN {joined}
WHERE {" AND ".join(current)}"""
    rel = _named(
        join_using(per_app, ctx.staged("grown_stages", grown_stages(ctx, days, runs, ratio, min_growth_ms)), APP_KEY),
        (*FACT_COLUMNS, *(n for n, _ in HISTORY), *GROWN_COLUMNS),
    )
    return f"""SELECT *, toInt64(-1) AS job, toInt64(-1) AS sql_exec, toInt64(-1) AS stage_id,
    toInt64(-1) AS stage_attempt, '' AS stage_name, toInt64(-1) AS node_id,
    toInt64(if(end_ms > 0, end_ms, start_ms)) AS detected_at_ms, toFloat64(end_ms - start_ms) AS app_duration_ms
FROM
(
{rel}
)"""

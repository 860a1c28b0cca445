"""Where the rules are blind (issue 39): an application whose stored events lack what a group of rules reads, so
those rules say nothing about it although they did not look. Said once per application, in the report and in
``sparktap findings --explain``, instead of a silence that reads as "clean".

Read by a query over the stored event tables (no view, no table of its own: the facts are aggregates of what is
already stored, and they change as late events arrive). Three inputs, each with the rules that need it:

- shuffle metrics: stages whose shuffle only their operators' SQL metrics report (``stage_completed``'s
  ``sql_shuffle_*``; their tasks report none): the stage rows take those totals, so ``SQL_TOTAL_RULES`` read them, but
  the spread across tasks is not in them, and the line names ``PER_TASK_RULES`` ("per-task shuffle metrics"). Where no
  stage carries the SQL figures (a listener before schema minor 3, or an engine whose metrics have other names): the
  application ran jobs of several stages (stage boundaries are shuffles) over at least ``MIN_INPUT_BYTES`` of input,
  yet its tasks report under one byte of shuffle read and write per ``SHUFFLE_PER_INPUT`` bytes of input; where its
  plans show a native engine's operators (``sql_plan_stats`` nodes, or the scan and write operators of
  ``table_access``, classified by ``detection/native.py``), at any input size, naming the engine (with the shuffle
  the plans' SQL metrics report written, ``shuffle_write_bytes`` of ``sql_plan_stats``, where a live listener stored
  it). Where the SQL figures are there and agree with the tasks' (the corpus Photon log: 402 KB of shuffle over 4,896
  tasks against 53 GB of input, in both), the shuffle is small, not hidden: no line;
- executor metrics: tasks ran, but no executor reported peak memory (``executor_metrics``): an event log older than
  Spark 3.0 (SPARK-23429), or ``spark.executor.processTreeMetrics`` / ``spark.eventLog.logStageExecutorMetrics`` off;
- SQL plans: SQL executions ran, but no plan statistics were stored (``sql_plan_stats``): an imported event log (a
  replay has no ``QueryExecution`` to read estimates from) or a listener started without plan statistics.

Same dialect as ``sql.py`` (clickhouse-server 18.16 and chDB: no CTEs, one JOIN per SELECT).
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and typed literals, never from user text.

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sparktap.detection.macros import expand
from sparktap.detection.native import NATIVE_ENGINES, engine_sql
from sparktap.detection.sql import SqlContext, stage_input
from sparktap.detection.stage_rows import SQL_READ, SQL_WRITE

GiB = 2**30
MIN_INPUT_BYTES = GiB
"""Input below which a job without shuffle bytes is unremarkable."""
SHUFFLE_PER_INPUT = 10_000
"""Shuffle bytes under input / this: no shuffle metrics (Photon's 402 KB over 53 GB is 1 per 130,000)."""

SHUFFLE_RULES = (
    "data_skew",
    "skew_not_fixed",
    "shuffle_blowup",
    "remote_heavy_shuffle",
    "shuffle_block_explosion",
    "small_partitions",
    "oversized_partition",
)
SQL_TOTAL_RULES = ("shuffle_blowup", "small_partitions")
"""The shuffle rules that read a stage's totals only, which its SQL metrics give where its tasks report none."""
PER_TASK_RULES = tuple(r for r in SHUFFLE_RULES if r not in SQL_TOTAL_RULES)
"""The shuffle rules that read the spread across tasks (or the tasks' fetch waits and blocks): task metrics only."""
EXECUTOR_RULES = ("memory_pressure", "memory_overprovisioned", "driver_memory_pressure")
PLAN_RULES = ("plan_misestimate", "codegen_off")

Query = Callable[[str], Sequence[dict[str, Any]]]


@dataclass(frozen=True)
class Blind:
    """One application attempt whose events lack one input: the rules that read it and why they cannot."""

    cluster: str
    app_id: str
    app_attempt: str
    app_name: str
    missing: str
    """'shuffle metrics', 'executor metrics' or 'SQL plans'"""
    rules: tuple[str, ...]
    why: str

    def line(self) -> str:
        """The one line the report and ``sparktap findings --explain`` print."""
        return f"blind to {self.missing}: {self.why}; {', '.join(self.rules)} cannot fire here"


def _size(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


SQL_ONLY = (
    f"if({SQL_WRITE}, toFloat64(ifNull(sql_shuffle_write_bytes, 0)), 0.) "
    f"+ if({SQL_READ}, toFloat64(ifNull(sql_shuffle_read_bytes, 0)), 0.)"
)
"""A stage's shuffle bytes that only its operators' SQL metrics report: the tasks report none of it (the stage rows
take those totals, ``detection/stage_rows.py``)."""


def shuffle_sql(ctx: SqlContext) -> str:
    """Application attempts blind to shuffle: stages whose shuffle only their SQL metrics report (``sql_only`` > 0),
    or, where no stage carries the SQL figures (a listener before schema minor 3, an engine whose shuffle metrics
    have other names), jobs of several stages with next to no shuffle in the task metrics, at any input size
    (``blind_spots`` asks ``MIN_INPUT_BYTES`` of an application without native operators). Where the SQL figures are
    there and agree with the tasks', a small shuffle is a small shuffle."""
    return f"""SELECT cluster, app_id, app_attempt, any(name) AS app_name, sum(inp) AS input, sum(shuf) AS shuffle,
    sum(tasks) AS tasks, max(stages) AS widest, sum(sql_known) AS sql_stages, sum(sql_only) AS sql_only,
    sum(sql_only_stages) AS sql_only_stages
FROM
(
    SELECT cluster, app_id, app_attempt, any(app_name) AS name, ifNull(job_id, -1) AS job,
        sum({stage_input()}) AS inp,
        toFloat64(sum(ifNull(shuffle_read_bytes_sum, 0)) + sum(ifNull(shuffle_write_bytes_sum, 0))) AS shuf,
        toFloat64(sum(num_tasks)) AS tasks, uniqExact(stage_id) AS stages,
        countIf(isNotNull(sql_shuffle_write_bytes) OR isNotNull(sql_shuffle_read_bytes)) AS sql_known,
        toFloat64(sum({SQL_ONLY})) AS sql_only, countIf({SQL_ONLY} > 0) AS sql_only_stages
    FROM {ctx.view("stage_completed")}
    {ctx.where()}
    GROUP BY cluster, app_id, app_attempt, job
)
GROUP BY cluster, app_id, app_attempt
HAVING sql_only > 0 OR (sql_stages = 0 AND widest >= 2 AND input > 0
    AND shuffle * {SHUFFLE_PER_INPUT} < input)
ORDER BY cluster, app_id, app_attempt"""


def native_sql(ctx: SqlContext) -> str:
    """Application attempts whose plans show a native engine's operators: the engines (in ``NATIVE_ENGINES`` order
    of their counts) and how many such operators, from the plan statistics of live applications and the scan and
    write operators of ``table_access`` (which imported event logs carry too)."""
    natives = ", ".join(f"'{e}'" for e in NATIVE_ENGINES)
    return f"""SELECT cluster, app_id, app_attempt, groupUniqArray(engine) AS engines, count() AS operators
FROM
(
    SELECT cluster, app_id, app_attempt, {engine_sql("op")} AS engine
    FROM
    (
        SELECT cluster, app_id, app_attempt, arrayJoin(nodes_operator) AS op
        FROM {ctx.view("sql_plan_stats")}
        {ctx.where()}
        UNION ALL
        SELECT cluster, app_id, app_attempt, operator AS op
        FROM {ctx.view("table_access")}
        {ctx.where()}
    )
)
WHERE engine IN ({natives})
GROUP BY cluster, app_id, app_attempt
ORDER BY cluster, app_id, app_attempt"""


def sql_shuffle_sql(ctx: SqlContext) -> str:
    """Per application attempt, the shuffle bytes its plans' SQL metrics report written (``shuffle_write_bytes`` of
    the ``sql_plan_stats`` nodes; a reused exchange repeats its node id under each reuse: counted once)."""
    once = (
        "arraySum(arrayMap((b, i) -> if(indexOf(nodes_node_id, nodes_node_id[i]) = i AND b > 0, b, 0), "
        "nodes_shuffle_write_bytes, arrayEnumerate(nodes_node_id)))"
    )
    return f"""SELECT cluster, app_id, app_attempt, toFloat64(sum({once})) AS written
FROM {ctx.view("sql_plan_stats")}
{ctx.where()} AND length(nodes_shuffle_write_bytes) = length(nodes_node_id)
GROUP BY cluster, app_id, app_attempt
HAVING written > 0"""


def _without(ctx: SqlContext, table: str, present: str, measure: str) -> str:
    """Application attempts with rows in ``table`` (``measure`` of them) and none in ``present``."""
    return f"""SELECT cluster, app_id, app_attempt, any(app_name) AS app_name, {measure} AS n
FROM {ctx.view(table)}
{ctx.where()} AND (cluster, app_id, app_attempt) NOT IN
(
    SELECT cluster, app_id, app_attempt FROM {ctx.view(present)} {ctx.where(extend_days=1)}
)
GROUP BY cluster, app_id, app_attempt
ORDER BY cluster, app_id, app_attempt"""


def blind_spots(query: Query, ctx: SqlContext, start_ms: int, end_ms: int) -> list[Blind]:
    """Every blind spot of the applications in ``ctx.scope`` with events in [start_ms, end_ms], by application."""

    def rows(sql: str) -> Sequence[dict[str, Any]]:
        return query(expand(sql, start_ms, end_ms))

    out: list[Blind] = []
    native = {(str(r["cluster"]), str(r["app_id"]), str(r["app_attempt"])): r for r in rows(native_sql(ctx))}
    written = (
        {
            (str(r["cluster"]), str(r["app_id"]), str(r["app_attempt"])): float(r["written"])
            for r in rows(sql_shuffle_sql(ctx))
        }
        if native
        else {}
    )
    for r in rows(shuffle_sql(ctx)):
        key = (str(r["cluster"]), str(r["app_id"]), str(r["app_attempt"]))
        engines = [e for e in NATIVE_ENGINES if key in native and e in native[key]["engines"]]
        if float(r["sql_only"]) > 0:
            on = f"its plans run on {' and '.join(engines)}; " if engines else ""
            stages = int(r["sql_only_stages"])
            why = (
                f"{on}{_size(float(r['sql_only']))} of its shuffle, in {stages} stage{'' if stages == 1 else 's'}, is "
                "in its operators' SQL metrics only, its tasks report none: shuffle_blowup and small_partitions read "
                "it there, the spread across tasks is not in them"
            )
            out.append(_blind(r, "per-task shuffle metrics", PER_TASK_RULES, why))
        elif engines:
            why = (
                f"its plans run on {' and '.join(engines)} ({int(native[key]['operators'])} native operators), whose "
                f"shuffle and spill are in its SQL metrics only: {_size(float(r['shuffle']))} of shuffle read and "
                f"written over {int(r['tasks'])} tasks against {_size(float(r['input']))} of input, in jobs of "
                "several stages"
            )
            if written.get(key):
                why += f"; its plans' SQL metrics report {_size(written[key])} of shuffle written"
            out.append(_blind(r, "shuffle metrics", SHUFFLE_RULES, why))
        elif float(r["input"]) >= MIN_INPUT_BYTES:
            why = (
                f"{_size(float(r['shuffle']))} of shuffle read and written over {int(r['tasks'])} tasks against "
                f"{_size(float(r['input']))} of input, in jobs of several stages (a native engine such as Photon "
                "keeps its shuffle out of Spark's task metrics)"
            )
            out.append(_blind(r, "shuffle metrics", SHUFFLE_RULES, why))
    for r in rows(_without(ctx, "stage_completed", "executor_metrics", "toFloat64(sum(num_tasks))")):
        why = (
            f"{int(r['n'])} tasks ran but no executor reported its peak memory (an event log older than Spark 3.0, or "
            "spark.eventLog.logStageExecutorMetrics off)"
        )
        out.append(_blind(r, "executor metrics", EXECUTOR_RULES, why))
    for r in rows(_without(ctx, "sql_start", "sql_plan_stats", "toFloat64(uniqExact(execution_id))")):
        why = (
            f"{int(r['n'])} SQL executions ran but no plan statistics were stored (an imported event log carries "
            "none: a replay has no query plan to read estimates from)"
        )
        out.append(_blind(r, "SQL plans", PLAN_RULES, why))
    out.sort(key=lambda b: (b.cluster, b.app_id, b.app_attempt))
    return out


def _blind(r: dict[str, Any], missing: str, rules: tuple[str, ...], why: str) -> Blind:
    return Blind(str(r["cluster"]), str(r["app_id"]), str(r["app_attempt"]), str(r["app_name"]), missing, rules, why)


def explained(
    query: Query,
    ctx: SqlContext,
    since_seconds: float,
    now_ms: int,
) -> list[str]:
    """``sparktap findings --explain``: one line per blind spot of the applications in scope with events in the last
    ``since_seconds``: ``<name> (<app id>[, attempt <n>]) on <cluster>: blind to …``."""
    out = []
    for b in blind_spots(query, ctx, now_ms - int(since_seconds * 1000), now_ms + 60_000):
        app = f"{b.app_name} ({b.app_id}" if b.app_name else f"({b.app_id}"
        attempt = f", attempt {b.app_attempt}" if b.app_attempt else ""
        out.append(f"{app}{attempt}) on {b.cluster}: {b.line()}")
    return out

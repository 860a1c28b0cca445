"""Native engines in a physical plan (issue 42): which engine runs each plan operator, and where rows cross between
a native engine's columnar batches and Spark's JVM rows.

One table, ``NAMES``, maps operator names (``SparkPlan.nodeName``, as ``sql_plan_stats`` and the event log's
``SparkPlanInfo`` carry them) to an engine and a role, by exact name or by prefix; the first entry that matches wins,
and an operator no entry matches is Spark's own (``jvm``). The same table gives Python (``classify``, ``summary``)
and ClickHouse (``engine_sql``, ``role_sql``), so the rules and the tests read one definition.

Where the names come from:

- **Photon** (Databricks): every Photon operator's name starts with ``Photon`` (``PhotonScan parquet``,
  ``PhotonProject``, ``PhotonAgg``, ``PhotonBroadcastHashJoin``, ``PhotonShuffleExchangeSink``/``Source``, and the
  stage markers ``PhotonShuffleMapStage`` and ``PhotonResultStage``); rows leave Photon through Spark's own
  ``ColumnarToRow`` above a ``PhotonResultStage``. Read in a Databricks Runtime 13.3 event log
  (``tests/corpus/eventlogs/nds_q88_photon_db_13_3.zstd``).
- **DataFusion Comet**: ``Comet*`` (``CometScan``, ``CometFilter``, ``CometHashAggregate``, ``CometExchange``,
  ``CometColumnarExchange`` …); transitions ``CometColumnarToRow`` (``CometColumnarToRowExec``) and
  ``CometSparkRowToColumnar`` (``CometSparkToColumnarExec``); ``CometSinkPlaceHolder`` only wraps a plan. Read in
  plans of Comet 0.12.0 on Spark 3.5 (``tests/integration/test_native_fallback.py`` runs it).
- **Gluten** (Velox or ClickHouse backend): operators named ``…Transformer`` (``ProjectExecTransformer``,
  ``WholeStageCodegenTransformer`` …), ``ColumnarExchange``, ``ColumnarBroadcastExchange``, ``VeloxResizeBatches``;
  transitions ``VeloxColumnarToRow``, ``RowToVeloxColumnar`` and the ClickHouse backend's ``CHColumnarToRow``,
  ``RowToCHNativeColumnar``. From Gluten's source (apache/incubator-gluten), not yet from a real event log.
- **RAPIDS** (NVIDIA spark-rapids): ``Gpu*`` (``GpuScan parquet``, ``GpuProject``, ``GpuFilter``,
  ``GpuCoalesceBatches``, ``GpuHashAggregate``, ``GpuColumnarExchange`` …); transitions ``GpuColumnarToRow`` and
  ``GpuRowToColumnar``. Read in RAPIDS event logs (``tests/corpus/eventlogs/gpu_oom_eventlog.zstd``).
- Spark's own transitions ``ColumnarToRow`` and ``RowToColumnar`` (``ColumnarToRowExec``/``RowToColumnarExec``: a
  columnar scan or an extension's batches to rows and back) count for whichever engine is beside them.

Roles: ``native`` (an engine's operator), ``jvm`` (Spark's own operator), ``to_row`` and ``to_columnar``
(transitions), ``neutral`` (plan structure that runs nothing itself: ``AdaptiveSparkPlan``, ``WholeStageCodegen``,
``InputAdapter``, query stages, ``AQEShuffleRead``, reused exchanges and subqueries).
"""

# ruff: noqa: S608 - SQL is assembled from our own identifiers and quoted literals of the table, never from user text.

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from sparktap.detection.sql import SqlContext
from sparktap.schemas.ddl import quote_literal

Engine = Literal["photon", "comet", "gluten", "rapids", "jvm", ""]
Role = Literal["native", "jvm", "to_row", "to_columnar", "neutral"]
NATIVE_ENGINES: tuple[Engine, ...] = ("photon", "comet", "gluten", "rapids")


@dataclass(frozen=True)
class Name:
    """An operator name (``exact``) or the start of one (``prefix``), the engine that runs it and its role."""

    match: Literal["exact", "prefix", "suffix"]
    text: str
    engine: Engine
    role: Role


NAMES: tuple[Name, ...] = (
    # transitions first: they share their engine's prefix
    Name("exact", "CometColumnarToRow", "comet", "to_row"),
    Name("exact", "CometNativeColumnarToRow", "comet", "to_row"),
    Name("exact", "CometSparkRowToColumnar", "comet", "to_columnar"),
    Name("exact", "CometSinkPlaceHolder", "comet", "neutral"),
    Name("exact", "GpuColumnarToRow", "rapids", "to_row"),
    Name("exact", "GpuColumnarToRowExec", "rapids", "to_row"),
    Name("exact", "GpuRowToColumnar", "rapids", "to_columnar"),
    Name("exact", "VeloxColumnarToRow", "gluten", "to_row"),
    Name("exact", "RowToVeloxColumnar", "gluten", "to_columnar"),
    Name("exact", "CHColumnarToRow", "gluten", "to_row"),
    Name("exact", "RowToCHNativeColumnar", "gluten", "to_columnar"),
    Name("exact", "ColumnarToRow", "", "to_row"),
    Name("exact", "RowToColumnar", "", "to_columnar"),
    # engines by prefix
    Name("prefix", "Photon", "photon", "native"),
    Name("prefix", "Comet", "comet", "native"),
    Name("prefix", "Gpu", "rapids", "native"),
    Name("prefix", "Velox", "gluten", "native"),
    Name("exact", "ColumnarExchange", "gluten", "native"),
    Name("exact", "ColumnarBroadcastExchange", "gluten", "native"),
    Name("exact", "ColumnarUnion", "gluten", "native"),
    Name("prefix", "WholeStageCodegenTransformer", "gluten", "native"),
    Name("prefix", "InputIteratorTransformer", "gluten", "neutral"),
    Name("suffix", "Transformer", "gluten", "native"),
    # plan structure: runs nothing itself
    Name("exact", "AdaptiveSparkPlan", "", "neutral"),
    Name("prefix", "WholeStageCodegen", "", "neutral"),
    Name("exact", "InputAdapter", "", "neutral"),
    Name("exact", "ShuffleQueryStage", "", "neutral"),
    Name("exact", "BroadcastQueryStage", "", "neutral"),
    Name("exact", "ResultQueryStage", "", "neutral"),
    Name("exact", "TableCacheQueryStage", "", "neutral"),
    Name("exact", "AQEShuffleRead", "", "neutral"),
    Name("exact", "CustomShuffleReader", "", "neutral"),
    Name("exact", "ReusedExchange", "", "neutral"),
    Name("exact", "ReusedSubquery", "", "neutral"),
    Name("exact", "Subquery", "", "neutral"),
    Name("exact", "SubqueryBroadcast", "", "neutral"),
    Name("exact", "SubqueryAdaptiveBroadcast", "", "neutral"),
)


def _matches(name: Name, operator: str) -> bool:
    if name.match == "exact":
        return operator == name.text
    if name.match == "prefix":
        return operator.startswith(name.text)
    return operator.split(" ", 1)[0].endswith(name.text)


def classify(operator: str) -> tuple[Engine, Role]:
    """The engine and role of one plan operator; Spark's own operators are ``("jvm", "jvm")``."""
    for name in NAMES:
        if _matches(name, operator):
            return name.engine, name.role
    return "jvm", "jvm"


def _condition(name: Name, expr: str) -> str:
    if name.match == "exact":
        return f"{expr} = {quote_literal(name.text)}"
    # like() rather than startsWith/endsWith: clickhouse-server 18.16 has no such functions; no name has % or _
    if name.match == "prefix":
        return f"like({expr}, {quote_literal(name.text + '%')})"
    return f"like(splitByChar(' ', concat({expr}, ' '))[1], {quote_literal('%' + name.text)})"


def engine_sql(expr: str) -> str:
    """ClickHouse: the engine of the operator name ``expr`` (the same table as ``classify``)."""
    arms = ", ".join(f"{_condition(n, expr)}, {quote_literal(n.engine)}" for n in NAMES)
    return f"multiIf({arms}, 'jvm')"


def role_sql(expr: str) -> str:
    """ClickHouse: the role of the operator name ``expr`` (the same table as ``classify``)."""
    arms = ", ".join(f"{_condition(n, expr)}, {quote_literal(n.role)}" for n in NAMES)
    return f"multiIf({arms}, 'jvm')"


@dataclass(frozen=True)
class PlanNode:
    """What ``summary`` reads of one ``sql_plan_stats`` node."""

    operator: str
    actual_rows: int = -1
    time_ms: int = -1


@dataclass(frozen=True)
class NativeSummary:
    """Per SQL execution: how much of its plan a native engine ran, by operators, own time and output rows."""

    engine: Engine
    """the native engine with the most operators; '' when none ran"""
    native_operators: int
    jvm_operators: int
    transitions: int
    native_ms: int
    jvm_ms: int
    native_rows: int
    jvm_rows: int

    @property
    def native_share(self) -> float:
        """Native operators over native and JVM operators (transitions and plan structure left out)."""
        total = self.native_operators + self.jvm_operators
        return self.native_operators / total if total else 0.0


def summary(nodes: Iterable[PlanNode]) -> NativeSummary:
    """Native vs JVM operators, own time (``time_ms``) and output rows of one plan."""
    count = {"native": 0, "jvm": 0, "to_row": 0, "to_columnar": 0, "neutral": 0}
    ms = {"native": 0, "jvm": 0}
    rows = {"native": 0, "jvm": 0}
    engines: dict[str, int] = {}
    for node in nodes:
        engine, role = classify(node.operator)
        count[role] += 1
        if role in ("native", "jvm"):
            ms[role] += max(node.time_ms, 0)
            rows[role] += max(node.actual_rows, 0)
        if role == "native":
            engines[engine] = engines.get(engine, 0) + 1
    top: Engine = ""
    if engines:
        top = next(e for e in NATIVE_ENGINES if engines.get(e, 0) == max(engines.values()))
    return NativeSummary(
        top,
        count["native"],
        count["jvm"],
        count["to_row"] + count["to_columnar"],
        ms["native"],
        ms["jvm"],
        rows["native"],
        rows["jvm"],
    )


def engines_of(operators: Sequence[str]) -> list[str]:
    """The native engines of these operators, in ``NATIVE_ENGINES`` order."""
    found = {classify(op)[0] for op in operators}
    return [e for e in NATIVE_ENGINES if e in found]


def per_query_sql(ctx: SqlContext) -> str:
    """ClickHouse: per SQL execution of ``sql_plan_stats`` in ``ctx`` (Grafana time macros), the native
    engine with the most operators ('' for none) and the native vs JVM operators, own time (``time_ms``) and output
    rows, as ``summary`` counts them. A reused exchange's subtree repeats under each reuse, as in Spark's UI: each
    copy counts, as in ``summary`` over the same nodes."""
    role, engine = role_sql("op"), engine_sql("op")

    def total(what: str, of: str) -> str:
        return f"toInt64(arraySum(arrayMap((r, x) -> if(r = {quote_literal(what)}, greatest(x, 0), 0), roles, {of})))"

    # the top engine without a lambda inside a lambda (clickhouse-server 18.16 resolves no outer column there)
    counts = [f"countEqual(engines, {quote_literal(e)})" for e in NATIVE_ENGINES]
    top = counts[-1]
    for c in reversed(counts[:-1]):
        top = f"greatest({c}, {top})"
    arms = ", ".join(f"{c} = top_count, {quote_literal(e)}" for c, e in zip(counts, NATIVE_ENGINES, strict=True))
    return f"""SELECT cluster, app_id, app_attempt, toInt64(execution_id) AS execution_id, {top} AS top_count,
    multiIf(top_count = 0, '', {arms}, '') AS engine,
    toInt64(countEqual(roles, 'native')) AS native_operators, toInt64(countEqual(roles, 'jvm')) AS jvm_operators,
    toInt64(countEqual(roles, 'to_row') + countEqual(roles, 'to_columnar')) AS transitions,
    {total("native", "times")} AS native_ms, {total("jvm", "times")} AS jvm_ms,
    {total("native", "out_rows")} AS native_rows, {total("jvm", "out_rows")} AS jvm_rows
FROM
(
    SELECT cluster, app_id, app_attempt, execution_id, arrayMap(op -> {role}, nodes_operator) AS roles,
        arrayMap(op -> {engine}, nodes_operator) AS engines,
        if(length(nodes_time_ms) = length(nodes_node_id), arrayMap(x -> toInt64(x), nodes_time_ms),
            arrayMap(x -> toInt64(-1), nodes_node_id)) AS times,
        arrayMap(x -> toInt64(x), nodes_actual_rows) AS out_rows
    FROM {ctx.view("sql_plan_stats")}
    {ctx.where()}
)
ORDER BY cluster, app_id, app_attempt, execution_id"""

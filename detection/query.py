"""The detection query: the composition that turns any set of rules (``registry.py``; one module per rule in
``detection/rules/``, the Detection table of ``docs/architecture.md``) into one query returning findings.

A rule's ``sql`` returns ``RuleSql`` parts (``rule.py``): expressions over a relation (``stage`` statistics or
``aqe_read`` nodes, ``detection/sql.py``) for the condition, severity, main value, the threshold crossed, named evidence
numbers, a one-line explanation carrying the numbers, and a concrete suggested fix; the ``plan`` (plan nodes) and
``streaming`` (streaming query runs) relations are in ``detection/relations.py``. ``rule_query`` evaluates the
parts of many rules in one pass over each relation (``ARRAY JOIN`` of one tuple per rule), so the stage tables are
read once whatever the number of rules.

Finding columns (every query): cluster, app_id, app_attempt, app_name, job_id, sql_execution_id, stage_id,
stage_attempt, stage_name, node_id, running, rule, severity, value, threshold, evidence_names, evidence_values,
explanation, suggested_fix, detected_at_ms, detected_at, then who it belongs to (``attribution.py``): user, team,
job_tags, session_id, operation_id. Unknown ids are -1 (job, SQL execution; stage and attempt
for AQE-node and plan-node findings; node for stage findings; all four for streaming findings, whose ``stage_name``
names the query run: ``<name> (<query id>)``; all of them and ``stage_name`` '' for application findings, the
``app`` relation of ``fleet.py``; for table findings, the ``table`` relation of ``tables.py``, ``stage_name`` is the
table and the ids are its top writer's latest run that wrote it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from sparktap.detection.attribution import ATTRIBUTION_COLUMNS, attributed
from sparktap.detection.fleet import app_rule_relation
from sparktap.detection.registry import RULE_IDS, RULES, RULES_BY_ID
from sparktap.detection.relations import PLAN_COLUMNS, plan_relation, streaming_relation
from sparktap.detection.rule import SEVERITIES, TIME_LOST, RuleSql, Severity, Source
from sparktap.detection.sql import (
    RULES_MARK,
    RuleChoice,
    SqlContext,
    aqe_read_relation,
    lit,
    stage_relation_columns,
    strings,
)
from sparktap.detection.stage_relation import stage_relation
from sparktap.detection.tables import TABLE_COLUMNS, table_relation
from sparktap.detection.thresholds import DEFAULT_THRESHOLDS, Thresholds
from sparktap.schemas.ddl import quote_ident

__all__ = [
    "FINDING_COLUMNS",
    "OPTIONAL_INPUTS",
    "RULES",
    "RULES_BY_ID",
    "RULE_IDS",
    "input_probe",
    "rule_parts",
    "rule_query",
]

_RULE_COLUMNS: tuple[str, ...] = (
    "cluster",
    "app_id",
    "app_attempt",
    "app_name",
    "job_id",
    "sql_execution_id",
    "stage_id",
    "stage_attempt",
    "stage_name",
    "node_id",
    "running",
    "rule",
    "severity",
    "value",
    "threshold",
    "evidence_names",
    "evidence_values",
    "explanation",
    "suggested_fix",
    "detected_at_ms",
    "detected_at",
)
FINDING_COLUMNS: tuple[str, ...] = _RULE_COLUMNS + ATTRIBUTION_COLUMNS


# ----------------------------------------------------------------------------------------------- composition


def _projection(source: Source) -> str:
    stage = (
        "stage_id, stage_attempt, toInt64(-1) AS node_id" if source == "stage" else "stage_id, stage_attempt, node_id"
    )
    return (
        f"cluster, app_id, app_attempt, app_name, job AS job_id, sql_exec AS sql_execution_id, {stage}, stage_name, "
        "running, tupleElement(f, 1) AS rule, tupleElement(f, 2) AS severity, tupleElement(f, 3) AS value, "
        "tupleElement(f, 4) AS threshold, tupleElement(f, 5) AS evidence_names, tupleElement(f, 6) AS evidence_values, "
        "tupleElement(f, 7) AS explanation, tupleElement(f, 8) AS suggested_fix, detected_at_ms, "
        "toDateTime(intDiv(detected_at_ms, 1000)) AS detected_at"
    )


def _derived(parts: list[RuleSql]) -> str:
    """The parts' derived columns, as ``, <expr> AS <name>`` lines."""
    derived: dict[str, str] = {}
    for part in parts:
        for name, expr in part.derived:
            if derived.setdefault(name, expr) != expr:
                raise ValueError(f"derived column {name!r} defined twice with different expressions")
    return "".join(f",\n    {expr} AS {name}" for name, expr in derived.items())


def _source_query(
    source: Source, parts: list[RuleSql], relation: str, tuples: list[str] | None = None, derive: bool = True
) -> str:
    """The findings of ``parts`` over ``relation`` (``tuples``: instead of the parts' own, see ``RuleChoice``;
    ``derive`` False: ``relation`` has the derived columns already)."""
    extra = _derived(parts) if derive else ""
    each = ",\n    ".join(tuples if tuples is not None else [p.as_tuple() for p in parts])
    return (
        f"SELECT {_projection(source)}\nFROM\n(\nSELECT *{extra}\nFROM\n(\n{relation}\n)\n)\n"
        f"ARRAY JOIN [\n    {each}\n] AS f\nWHERE severity != ''"
    )


def _findings(ctx: SqlContext, source: Source, parts: list[RuleSql], relation: str) -> str:
    """The findings of ``parts`` over ``relation``, staged with a ``RuleChoice`` when the pass is staged."""
    if ctx.staging is None:
        return _source_query(source, parts, relation)
    # the relation's table carries the derived columns: analysed once, not in the probe and again in the findings
    derived = f"SELECT *{_derived(parts)}\nFROM\n(\n{relation}\n)"
    read = ctx.staged(source if source != "stage" else "stages", derived)
    table = ctx.staging.table(f"{source}_findings", _source_query(source, parts, read, derive=False))
    if table not in ctx.staging.choices:
        ctx.staging.choices[table] = RuleChoice(
            _source_query(source, parts, read, [p.probe_tuple(i) for i, p in enumerate(parts)], derive=False),
            [p.as_tuple() for p in parts],
            _source_query(source, parts, read, [RULES_MARK], derive=False),
        )
    return f"SELECT * FROM {quote_ident(table)}"  # noqa: S608 - our identifier


def rule_parts(rules: Iterable[str] | None = None, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> list[RuleSql]:
    """The SQL parts of the chosen rules (all by default), in the order of ``RULES``."""
    chosen = set(RULE_IDS if rules is None else rules)
    unknown = chosen - set(RULE_IDS)
    if unknown:
        raise ValueError(f"unknown detection rule(s) {sorted(unknown)}; known: {', '.join(RULE_IDS)}")
    return [part for info in RULES if info.id in chosen for part in info.sql(thresholds)]


OPTIONAL_INPUTS: dict[str, tuple[tuple[str, int], ...]] = {
    "aqe_read": (("aqe_shuffle_read", 0),),
    "plan": (("sql_plan_stats", 0),),
    "streaming": (("streaming_query_progress", 0),),
    "aqe": (("aqe_plan_update", 1), ("aqe_shuffle_read", 1)),
    "table": (("table_access", 0),),
}
"""The inputs a detection pass can leave out when they have no row in its range: the only table of the ``aqe_read``,
``plan`` and ``streaming`` relations (their rows come from it alone: no row, no finding), the ``table`` relation's
events (it reads 30 days of them, but raises a finding only for a table written in the range: no event in the range,
no finding), and the AQE tables of the
stage relation's ``aqe`` enrichment (a LEFT JOIN: no row, every stage gets its zero defaults). Each with its tables and
how many days the relation widens the range into the past (``SqlContext.where``). ClickHouse 26.x spends about 0.2 s
of the Detector's ~1.1 s CPU analysing and planning these relations even when their tables are empty (issue 22)."""

_NO_AQE = (
    "toUInt64(0) AS aqe_updates, toUInt64(0) AS aqe_skew_reads, toUInt64(0) AS aqe_skewed_partitions, "
    "toUInt64(0) AS aqe_skew_splits"
)
"""What the ``aqe`` enrichment (``sql.aqe_per_execution``: sums of UInt64) gives a stage without AQE rows"""


def input_probe(ctx: SqlContext) -> str:
    """A cheap query naming (column ``input``) each of ``OPTIONAL_INPUTS`` with a row in the range and scope: a
    ``LIMIT 1`` over each table; on one node (``final_reads``) the table itself, not deduplicated (FINAL keeps a row
    of every key, so a table has rows in the range exactly when its deduplicated view has), else its view. A
    detection pass runs it first and leaves out what it does not name (``rule_query(absent=…)``): the same findings,
    without analysing relations over empty tables."""

    def source(table: str) -> str:  # one node: the table itself; a cluster: the view (its <t> ALIASes event_time)
        return f"{quote_ident(ctx.database)}.{quote_ident(table)}" if ctx.final_reads else ctx.view(table)

    reads = [
        f"SELECT {lit(name)} AS input FROM (SELECT 1 AS x FROM {source(table)} "  # noqa: S608 - our identifiers
        f"{ctx.where(extend_days=days)} LIMIT 1)"
        for name, tables in OPTIONAL_INPUTS.items()
        for table, days in tables
    ]
    return "SELECT DISTINCT input FROM\n(\n" + "\nUNION ALL\n".join(reads) + "\n)"


def rule_query(
    rules: Iterable[str] | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ctx: SqlContext | None = None,
    min_severity: Severity = "info",
    *,
    absent: frozenset[str] = frozenset(),
) -> str:
    """One query returning the findings of the chosen rules (``FINDING_COLUMNS``), the most time lost first (then
    the most severe). ``absent``: names of ``OPTIONAL_INPUTS`` known to have no row in the range (``input_probe``),
    left out of the query; the same findings.

    Times are Grafana macros (``$__timeFilter``, ``$__fromTime``, ``$__toTime``): expand them with
    ``sparktap.detection.macros.expand`` to run the query outside Grafana."""
    ctx = ctx or SqlContext()
    unknown = absent - set(OPTIONAL_INPUTS)
    if unknown:
        raise ValueError(f"absent inputs {sorted(unknown)}: expected some of {', '.join(OPTIONAL_INPUTS)}")
    parts = [p for p in rule_parts(rules, thresholds) if p.source not in absent]
    if not parts:
        raise ValueError("no rule left to evaluate: every chosen rule's input is absent (no finding to look for)")
    queries: list[str] = []
    stage_parts = [p for p in parts if p.source == "stage"]
    if stage_parts:
        needs = frozenset().union(*(p.needs for p in stage_parts))
        running = thresholds.running.min_finished_tasks if thresholds.running.enabled else None
        shuffle = thresholds.shuffle_blowup
        relation = stage_relation(
            replace(ctx, history_runs=shuffle.history_runs),
            needs - {"aqe"} if "aqe" in absent else needs,
            running,
            shuffle.history_days,
        )
        if "aqe" in needs and "aqe" in absent:
            relation = f"SELECT *, {_NO_AQE} FROM\n(\n{relation}\n)"
        if ctx.staging is not None:  # a table of it: its columns by name (18.16)
            relation = f"SELECT {stage_relation_columns(needs)} FROM\n(\n{relation}\n)"
        queries.append(_findings(ctx, "stage", stage_parts, relation))
    others: dict[Source, str] = {
        "aqe_read": aqe_read_relation(ctx),
        "plan": f"SELECT {PLAN_COLUMNS} FROM\n(\n{plan_relation(ctx)}\n)" if ctx.staging else plan_relation(ctx),
        "streaming": streaming_relation(ctx, thresholds.streaming.batches),
    }
    if any(p.source == "app" for p in parts):
        history = thresholds.run_regression
        runs = max(history.runs, thresholds.memory_overprovisioned.runs)  # the most earlier runs an app rule reads
        others["app"] = app_rule_relation(
            replace(ctx, history_runs=runs, job_parts=history.job_key),
            history.history_days,
            history.runs,
            history.ratio,
            history.stage_min_growth_ms,
        )
    if any(p.source == "table" for p in parts):
        growth = thresholds.table_file_growth
        relation = table_relation(ctx, growth.window_days, thresholds.run_regression.job_key)
        others["table"] = f"SELECT {TABLE_COLUMNS} FROM\n(\n{relation}\n)" if ctx.staging else relation
    for source, relation in others.items():
        source_parts = [p for p in parts if p.source == source]
        if source_parts:
            queries.append(_findings(ctx, source, source_parts, relation))
    levels = SEVERITIES[SEVERITIES.index(min_severity) :]
    rank = f"indexOf({strings(SEVERITIES)}, severity)"
    found = (
        "SELECT * FROM\n(\n" + "\nUNION ALL\n".join(queries) + "\n)\n"
        f"WHERE severity IN ({', '.join(lit(s) for s in levels)})"
    )
    # one sort key, a tuple (descending parts negated): ClickHouse 26.x's planner costs ~0.1 s per ORDER BY
    # element over this query (8 elements: ~0.4 s of its CPU, issue 22); the order is the same
    lost = f"arrayElement(evidence_values, indexOf(evidence_names, {lit(TIME_LOST)}))"
    key = f"tuple(-{lost}, -toInt64({rank}), -detected_at_ms, rule, cluster, app_id, stage_id, node_id)"
    columns = ", ".join(quote_ident(c) for c in FINDING_COLUMNS)
    if ctx.staging is not None:
        ctx.staging.found = ctx.staging.table("found", found)
    rows = attributed(ctx.staged("found", found), _RULE_COLUMNS, ctx)
    return f"SELECT {columns} FROM\n(\nSELECT *, {key} AS sort_key FROM\n(\n{rows}\n)\n)\nORDER BY sort_key"

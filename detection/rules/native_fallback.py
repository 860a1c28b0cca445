"""Native fallback: in a plan run mostly by a native engine (Photon, Comet, Gluten, RAPIDS), a Spark operator fed by a
native-to-row transition: that operator fell back to the JVM, and the rows cross from the engine's columnar batches
to Spark's rows (and back, when a row-to-columnar transition sits above it).

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry. Over the ``plan``
relation (``detection/relations.py``): one finding per fallen-back operator (``sql_execution_id``, ``node_id``), the
operator directly above the transition (the JVM operators above it ran in the JVM only because their input was
rows). Engines and roles come from ``detection/native.py`` (one table of operator names); plan structure
(``WholeStageCodegen``, ``InputAdapter``, ``AQEShuffleRead`` …) is looked through to find a node's neighbours. Time
around the fallback: the operator's own time plus that of the transition below it and of a row-to-columnar transition
right above it (``time_ms`` of ``sql_plan_stats``; a transition without a timing metric of its own counts the
whole-stage codegen stage it runs in). Findings rank by that time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.native import engine_sql, role_sql
from sparktap.detection.rule import Impact, Millis, Rule, RuleSql, Share, concat, floors, integer, pct, secs
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds

HOPS = 4
"""Plan structure looked through between an operator and its neighbour: Comet's shuffle read is
AQEShuffleRead → InputAdapter → WholeStageCodegen above the transition, under CometSinkPlaceHolder."""


class NativeFallback(Impact):
    """A JVM operator fed by a native engine's transition to rows, in a plan whose operators are ≥ 30 % native."""

    min_native_share: Share = 0.3
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 60_000
    critical_time_ms: Annotated[int, Field(ge=0)] = 60_000


def _at(array: str, index: str) -> str:
    return f"arrayElement({array}, toUInt32({index}))"


def _through(position: str) -> str:
    """The nearest ancestor of the node at ``position`` that is not plan structure (0: none)."""
    parents = [position]
    for _ in range(HOPS + 1):
        parents.append(_at("p_all_parent", parents[-1]))
    expr = parents[HOPS + 1]
    for p in reversed(parents[1 : HOPS + 1]):
        expr = f"if({_at('nf_role', p)} = 'neutral', {expr}, {p})"
    return expr


def _time(position: str) -> str:
    """A transition's own time, else (no timing metric) that of the WholeStageCodegen stage it runs in; 0 if none."""
    parent = _at("p_all_parent", position)
    return (
        f"if({_at('p_all_time', position)} >= 0, {_at('p_all_time', position)}, "
        f"if(like({_at('p_all_operator', parent)}, 'WholeStageCodegen%'), greatest({_at('p_all_time', parent)}, 0.), "
        "0.))"
    )


def sql(t: Thresholds) -> list[RuleSql]:
    c: NativeFallback = t.native_fallback
    positions = "arrayEnumerate(p_all_operator)"
    return [
        RuleSql(
            rule="native_fallback",
            source="plan",
            time_lost="nf_around_ms",
            floors=floors(c),
            derived=(
                ("nf_role", f"arrayMap(op -> {role_sql('op')}, p_all_operator)"),
                ("nf_engines", f"arrayMap(op -> {engine_sql('op')}, p_all_operator)"),
                ("nf_native", "toFloat64(countEqual(nf_role, 'native'))"),
                ("nf_jvm", "toFloat64(countEqual(nf_role, 'jvm'))"),
                ("nf_share", "nf_native / greatest(nf_native + nf_jvm, 1.)"),
                ("nf_up", f"arrayMap(j -> {_through('j')}, {positions})"),
                # the native-to-row transitions whose output this node reads
                ("nf_below", f"arrayFilter(j -> nf_up[j] = p_idx AND nf_role[j] = 'to_row', {positions})"),
                ("nf_above", _at("nf_up", "p_idx")),
                ("nf_above_col", f"{_at('nf_role', 'nf_above')} = 'to_columnar'"),
                ("nf_own_ms", f"greatest({_at('p_all_time', 'p_idx')}, 0.)"),
                (
                    "nf_transition_ms",
                    f"arraySum(arrayMap(j -> {_time('j')}, nf_below)) + if(nf_above_col, {_time('nf_above')}, 0.)",
                ),
                ("nf_around_ms", "nf_own_ms + nf_transition_ms"),
                ("nf_engine", "arrayElement(arrayFilter((e, r) -> r = 'native', nf_engines, nf_role), 1)"),
                (
                    "nf_native_ms",
                    "arraySum(arrayMap((x, r) -> if(r = 'native', greatest(x, 0.), 0.), p_all_time, nf_role))",
                ),
                ("nf_jvm_ms", "arraySum(arrayMap((x, r) -> if(r = 'jvm', greatest(x, 0.), 0.), p_all_time, nf_role))"),
                (
                    "nf_native_rows",
                    "arraySum(arrayMap((x, r) -> if(r = 'native', greatest(x, 0.), 0.), p_all_actual, nf_role))",
                ),
                (
                    "nf_jvm_rows",
                    "arraySum(arrayMap((x, r) -> if(r = 'jvm', greatest(x, 0.), 0.), p_all_actual, nf_role))",
                ),
                ("nf_transitions", "toFloat64(countEqual(nf_role, 'to_row') + countEqual(nf_role, 'to_columnar'))"),
            ),
            condition=(
                f"{_at('nf_role', 'p_idx')} = 'jvm' AND length(nf_below) > 0 AND nf_native > 0 "
                f"AND nf_share >= {lit(c.min_native_share)}"
            ),
            severity=f"if(nf_around_ms >= {lit(c.critical_time_ms)}, 'critical', 'warning')",
            value="nf_around_ms",
            threshold=lit(float(c.min_time_lost_ms)),
            evidence=(
                ("time_around_ms", "nf_around_ms"),
                ("operator_ms", "nf_own_ms"),
                ("transition_ms", "nf_transition_ms"),
                ("back_to_columnar", "nf_above_col"),
                ("native_share", "nf_share"),
                ("native_operators", "nf_native"),
                ("jvm_operators", "nf_jvm"),
                ("transitions", "nf_transitions"),
                ("native_ms", "nf_native_ms"),
                ("jvm_ms", "nf_jvm_ms"),
                ("native_rows", "nf_native_rows"),
                ("jvm_rows", "nf_jvm_rows"),
            ),
            explanation=concat(
                "p_operator, ' fell back to the JVM in a plan run by ', nf_engine, ' (', ",
                pct("nf_share"),
                ", ' of its operators native): its input crosses from ', nf_engine, ' columnar batches to rows', ",
                "if(nf_above_col, ' and back', ''), ', ', ",
                secs("nf_around_ms"),
                ", ' around the fallback (the operator ', ",
                secs("nf_own_ms"),
                ", ', the transitions ', ",
                secs("nf_transition_ms"),
                ", '); the plan has ', ",
                integer("nf_transitions"),
                ", ' transition(s)'",
            ),
            fix=concat(
                "'Replace what ', nf_engine, ' cannot run natively in ', p_operator, ': a Python or Scala UDF by ', ",
                "'built-in functions, an unsupported expression or data type by a supported one (see the engine''s ', ",
                "'compatibility guide; Comet: spark.comet.explainFallback.enabled=true logs why each operator fell ', ",
                "'back). If it cannot move, keep it at the top or bottom of the plan, so the rows cross once'",
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.native_fallback
    return (
        f"a Spark (JVM) operator reads a native engine's output through a transition to rows, in a plan whose "
        f"operators are >= {c.min_native_share:.0%} native, with >= {c.min_time_lost_ms / 1000:g} s around the "
        f"fallback (critical >= {c.critical_time_ms / 1000:g} s)"
    )


RUNBOOK = """\
**Fires when**, in a finished SQL execution (`sql_plan_stats`) whose operators are at least 30 % native (Photon,
DataFusion Comet, Gluten/Velox, RAPIDS; names in `detection/native.py`, see `docs/native.md`), a Spark operator reads
a native operator's output through a transition to rows (`ColumnarToRow`, `CometColumnarToRow`,
`VeloxColumnarToRow`, `GpuColumnarToRow` …), and the time around that fallback is at least 1 s (critical from
60 s): the operator's own time plus the transition's below it and a row-to-columnar transition's right above it,
from the nodes' SQL timing metrics (`time_ms`; a transition without one counts its whole-stage codegen stage). One
finding per fallen-back operator, the one directly above the transition; findings rank by the time around them. A
plan without native operators, or a fully native one (its only transition hands the result to the driver), gives
none.

**Check**: the finding's evidence: the engine's share of the plan, native vs JVM time (`native_ms`, `jvm_ms`) and
rows, the number of transitions; *Native engine per query* (application dashboard) gives the same split for every
query of the application. Comet logs why each operator fell back with
`spark.comet.explainFallback.enabled=true`; Gluten with `spark.gluten.sql.debug=true`; RAPIDS with
`spark.rapids.sql.explain=NOT_ON_GPU`.

**Fix**: replace what the engine cannot run natively: a Python or Scala UDF by built-in functions, an unsupported
expression, data type or operator by a supported one (the engine's compatibility guide). If it cannot move, keep it
at the top or the bottom of the plan so the rows cross only once.
"""

RULE = Rule(
    id="native_fallback",
    order=125,
    title="Native engine fallback",
    summary="a JVM operator in a plan run by a native engine (Photon, Comet, Gluten, RAPIDS)",
    config=NativeFallback,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost="the fallen-back operator's own time plus its transitions' (from the plan's SQL timing metrics)",
)

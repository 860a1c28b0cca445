"""Codegen off / huge method: operators of a plan ran outside whole-stage codegen, on an execution with significant
CPU time.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry. Over the ``plan``
relation (``detection/relations.py``): one finding per SQL execution, at its first plan node (pre-order, so the
highest in the tree) that runs without whole-stage codegen; the evidence counts the others. The listener gives the
reason (``codegen_fallback``): ``spark.sql.codegen.wholeStage=false``, too many fields for
``spark.sql.codegen.maxFields``, not fused, or ``huge method: N bytes > spark.sql.codegen.hugeMethodLimit=L`` on the
operators of a stage Spark compiled and then ran interpreted because its largest generated method was over the limit
(the plan still shows the stage; the listener measures each stage's method, ``codegen_method_bytes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import (
    Impact,
    Millis,
    Rule,
    RuleSql,
    concat,
    floors,
    integer,
    secs,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class CodegenOff(Impact):
    """Operators outside whole-stage codegen in a SQL execution whose stages used ≥ 60 s of executor CPU."""

    min_cpu_ms: Millis = 60_000
    min_time_lost_ms: Millis = 5_000
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: CodegenOff = t.codegen_off
    return [
        RuleSql(
            rule="codegen_off",
            source="plan",
            time_lost="cg_cpu_ms / 2",
            floors=floors(c),
            derived=(
                ("cg_cpu_ms", "ifNull(exec_cpu_ms, 0.)"),
                (
                    "cg_reason",
                    "multiIf(like(p_fallback, 'too many fields%'), 'fields', "
                    "like(p_fallback, '%wholeStage=false%'), 'off', like(p_fallback, '%huge%'), 'huge', "
                    "'other')",
                ),
            ),
            condition=f"p_fallback != '' AND node_id = p_first_fallback AND cg_cpu_ms >= {lit(c.min_cpu_ms)}",
            severity="'warning'",
            value="p_fallback_nodes",
            threshold="1.",
            evidence=(
                ("operators_outside_codegen", "p_fallback_nodes"),
                ("plan_nodes", "p_nodes"),
                ("codegen_max_fields", "p_max_fields"),
                ("execution_cpu_ms", "cg_cpu_ms"),
                ("whole_stage_codegen", "p_whole_stage"),
            ),
            explanation=concat(
                "p_operator, ' runs without whole-stage codegen (', p_fallback, ')', ",
                "if(p_fallback_nodes > 1, concat(' with ', toString(toUInt64(p_fallback_nodes - 1)), "
                "' other operator(s)'), ''), ', in a SQL execution that used ', ",
                secs("cg_cpu_ms"),
                ", ' of executor CPU: interpreted row by row, several times slower'",
            ),
            fix=(
                "multiIf(cg_reason = 'off', 'Set spark.sql.codegen.wholeStage=true', "
                "cg_reason = 'fields', "
                + concat(
                    "'Split the projection or aggregation into several narrower ones (e.g. aggregate column groups "
                    "separately and join on the key), drop unused columns before it, or raise "
                    "spark.sql.codegen.maxFields (now ', ",
                    integer("p_max_fields"),
                    ", ') with care: huge generated methods past "
                    "spark.sql.codegen.hugeMethodLimit are not JIT-compiled'",
                )
                + ", cg_reason = 'huge', 'Split the projection or aggregation, drop unused columns: a generated method "
                "over the JIT limit (8,000 bytecode bytes) runs interpreted; do not raise "
                "spark.sql.codegen.hugeMethodLimit', 'Split the projection or aggregation, drop unused columns, or "
                "replace the expression without code generation (a Python or Scala UDF, a generator) by built-in "
                "functions')"
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    return (
        f"operators ran outside whole-stage codegen (codegen off, too many fields, or a method past the JIT "
        f"limit) in a SQL execution that used >= {t.codegen_off.min_cpu_ms / 1000:g} s of executor CPU"
    )


RUNBOOK = """\
**Fires when** a finished SQL execution (`sql_plan_stats`) has operators that can take part in whole-stage codegen
but run without it, and its stages used ≥ 60 s of executor CPU. The reason is in the explanation:
`spark.sql.codegen.wholeStage=false`; too many fields (an aggregate or projection over more than
`spark.sql.codegen.maxFields`, 100 by default, columns); huge method (the stage's largest generated method,
`codegen_method_bytes` on its WholeStageCodegen node, is over `spark.sql.codegen.hugeMethodLimit`: Spark compiled it
and ran the stage's operators interpreted, though the plan still shows the stage); or not fused (an expression
without code generation). One finding per SQL execution, at the highest such operator; the evidence counts the
others.

**Check**: *Codegen coverage* (application dashboard): the operators outside codegen per SQL execution, with why.

**Fix**: split the projection or aggregation into several narrower ones (aggregate column groups separately and join
on the key), drop unused columns before it, or raise `spark.sql.codegen.maxFields` with care — past the JIT's
8,000-byte method limit the generated code runs interpreted anyway. `spark.sql.codegen.wholeStage=true` if it was
switched off. Replace UDFs and generators by built-in functions where the reason is "not fused".
"""

RULE = Rule(
    id="codegen_off",
    order=120,
    title="Codegen off or huge method",
    summary="operators run outside whole-stage codegen",
    config=CodegenOff,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=("half the SQL execution's executor CPU (interpreted operators run at least about 2× slower)"),
)

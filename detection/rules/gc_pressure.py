"""GC pressure: tasks spend their time in garbage collection.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import (
    Ladder,
    Millis,
    Rule,
    RuleSql,
    Share,
    concat,
    crossed,
    floors,
    ladder,
    pct,
    secs,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class GcPressure(Ladder):
    """GC time / task run time 0.08 / 0.1 / 0.2, over at least 60 s of task run time."""

    ratio_info: Share = 0.08
    ratio_warning: Share = 0.1
    ratio_critical: Share = 0.2
    min_run_time_ms: Millis = 60_000
    min_time_lost_ms: Millis = 5_000
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: GcPressure = t.gc_pressure
    return [
        RuleSql(
            rule="gc_pressure",
            source="stage",
            time_lost="gc_sum / greatest(least(slots, tasks), 1.)",
            floors=floors(c),
            derived=(("gc_ratio", "gc_sum / greatest(run_sum, 1.)"),),
            condition=f"run_sum >= {lit(c.min_run_time_ms)} AND gc_ratio >= {lit(c.ratio_info)}",
            severity=ladder(
                "gc_ratio", [("info", c.ratio_info), ("warning", c.ratio_warning), ("critical", c.ratio_critical)]
            ),
            value="gc_ratio",
            threshold=crossed("gc_ratio", c.ratio_info, c.ratio_warning, c.ratio_critical),
            evidence=(("gc_ms", "gc_sum"), ("run_ms", "run_sum"), ("ratio", "gc_ratio")),
            explanation=concat(
                "'Tasks spent ', ",
                pct("gc_ratio"),
                ", ' of their run time in GC (', ",
                secs("gc_sum"),
                ", ' of ', ",
                secs("run_sum"),
                ", ')'",
            ),
            fix=(
                "'Give each task more heap: raise spark.executor.memory or lower spark.executor.cores; use more "
                "partitions, cache serialized (MEMORY_AND_DISK_SER) or less; try G1GC "
                "(spark.executor.extraJavaOptions=-XX:+UseG1GC)'"
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    i = t.gc_pressure
    return (
        f"GC took >= {i.ratio_warning:.0%} of task run time (info >= {i.ratio_info:.0%}, critical >= "
        f"{i.ratio_critical:.0%})"
    )


RUNBOOK = """\
**Fires when** tasks spent ≥ 10 % of their run time in garbage collection (info from 8 %, critical from 20 %), over at
least 60 s of task run time.

**Fix**: more heap per task — raise `spark.executor.memory` or lower `spark.executor.cores`; more partitions; cache
serialized (`MEMORY_AND_DISK_SER`) or less; avoid large objects in UDFs; try G1GC
(`spark.executor.extraJavaOptions=-XX:+UseG1GC`).
"""

RULE = Rule(
    id="gc_pressure",
    order=100,
    title="GC pressure",
    summary="tasks spend their time in garbage collection",
    config=GcPressure,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=("the stage's GC time over its slots (one slot when unknown)"),
)

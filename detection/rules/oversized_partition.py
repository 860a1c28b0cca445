"""Oversized partition: one task reads more than a partition should.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import (
    GiB,
    Impact,
    Millis,
    Rule,
    RuleSql,
    Size,
    concat,
    floors,
    integer,
    join,
    size,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class OversizedPartition(Impact):
    """A task reading > 5 GiB (input or shuffle)."""

    max_task_bytes: Size = 5 * GiB
    min_time_lost_ms: Millis = 5_000
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: OversizedPartition = t.oversized_partition
    return [
        RuleSql(
            rule="oversized_partition",
            source="stage",
            time_lost=f"dur_max * (1 - least({lit(512 * 1024 * 1024)} / greatest(op_max, 1.), 1.))",
            floors=floors(c),
            derived=(
                ("op_max", "greatest(in_max, sr_max)"),
                ("op_suggested", f"greatest(tasks, ceil(greatest(sr_sum, in_sum) / {lit(512 * 1024 * 1024)}))"),
            ),
            condition=f"op_max > {lit(c.max_task_bytes)}",
            severity="'warning'",
            value="op_max",
            threshold=lit(c.max_task_bytes),
            evidence=(
                ("max_task_bytes", "op_max"),
                ("max_task_input_bytes", "in_max"),
                ("max_task_shuffle_bytes", "sr_max"),
                ("tasks", "tasks"),
            ),
            explanation=concat(
                "'One task reads ', ",
                size("op_max"),
                ", if(sr_max >= in_max, ' of shuffle data', ' of input'), ' (limit ', ",
                size(lit(c.max_task_bytes)),
                ", ')'",
            ),
            fix=join(
                "if(sr_max >= in_max, concat('Split the work: spark.sql.shuffle.partitions=', ",
                integer("op_suggested"),
                ", ' or lower spark.sql.adaptive.advisoryPartitionSizeInBytes; salt the "
                "key if one key is that big'), 'Lower spark.sql.files.maxPartitionBytes (e.g. 128m) or split the "
                "big unsplittable input files (gzip)')",
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    return f"a task read > {t.oversized_partition.max_task_bytes / GiB:g} GiB"


RUNBOOK = """\
**Fires when** one task read more than 5 GiB (input or shuffle): slow, spill-prone and a single point of failure.

**Fix**: shuffle → more partitions (`spark.sql.shuffle.partitions`, the message suggests a number) or a lower
`spark.sql.adaptive.advisoryPartitionSizeInBytes`; salt a single huge key. Input → lower
`spark.sql.files.maxPartitionBytes`, or split unsplittable (gzip) files.
"""

RULE = Rule(
    id="oversized_partition",
    order=60,
    title="Oversized partition",
    summary="one task reads more than a partition should",
    config=OversizedPartition,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=(
        "the largest task's time beyond what a 512 MiB split of it would take: `max task time × (1 − 512 MiB "
        "/ its bytes)` — the part other cores could have run"
    ),
)

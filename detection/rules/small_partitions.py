"""Small partitions: many tiny tasks or partitions.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.rule import Impact, MiB, Millis, Rule, RuleSql, Share, concat, floors, integer, join, size
from sparktap.detection.sql import lit, size_bytes

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class SmallPartitions(Impact):
    """> 5,000 tasks with median < 500 ms, or AQE-coalesced partitions far below the advisory size."""

    min_tasks: Annotated[int, Field(ge=1)] = 5_000
    max_median_task_ms: Millis = 500
    aqe_min_partitions: Annotated[int, Field(ge=1)] = 100
    aqe_max_fraction_of_advisory: Share = 0.1
    advisory_partition_bytes: Annotated[int, Field(gt=0)] = 64 * MiB
    task_overhead_ms: Millis = 10
    """Estimated fixed cost of one task (scheduling, deserialisation, result), capped by the median task time."""
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 30_000
    """spark.sql.adaptive.advisoryPartitionSizeInBytes when the application does not report it."""


def sql(t: Thresholds) -> list[RuleSql]:
    c: SmallPartitions = t.small_partitions
    advisory = f"if(sp_prop_advisory > 0, sp_prop_advisory, {lit(c.advisory_partition_bytes)})"
    stage = RuleSql(
        rule="small_partitions",
        source="stage",
        time_lost=(
            f"greatest(tasks - sp_suggested, 0.) * least(dur_p50, {lit(c.task_overhead_ms)}) "
            "/ greatest(least(slots, tasks), 1.)"
        ),
        floors=floors(c),
        needs=frozenset({"properties"}),
        derived=(
            ("sp_prop_advisory", size_bytes("prop_advisory")),
            ("sp_advisory", advisory),
            ("sp_suggested", "greatest(1., ceil(greatest(sr_sum, in_sum) / sp_advisory))"),
        ),
        condition=f"tasks > {lit(c.min_tasks)} AND dur_p50 < {lit(c.max_median_task_ms)}",
        severity="'warning'",
        value="tasks",
        threshold=lit(c.min_tasks),
        evidence=(
            ("tasks", "tasks"),
            ("median_task_ms", "dur_p50"),
            ("bytes_read", "greatest(sr_sum, in_sum)"),
            ("suggested_partitions", "sp_suggested"),
            ("shuffle_from_sql_metrics", "shuffle_from_sql"),
        ),
        explanation=concat(
            integer("tasks"),
            ", ' tasks with a median of ', ",
            integer("dur_p50"),
            ", ' ms each: scheduling overhead dominates (', ",
            size("greatest(sr_sum, in_sum)"),
            ", ' read in all)'",
        ),
        fix=join(
            "if(sr_sum >= in_sum, concat('Use fewer shuffle partitions: spark.sql.shuffle.partitions=', ",
            integer("sp_suggested"),
            ", ' (about ', ",
            size("sp_advisory"),
            ", ' each) or let AQE coalesce "
            "(spark.sql.adaptive.coalescePartitions.enabled=true) and raise "
            "spark.sql.adaptive.advisoryPartitionSizeInBytes'), 'Read fewer, larger splits: raise "
            "spark.sql.files.maxPartitionBytes (e.g. 256m) or compact the small input files')",
        ),
    )
    aqe = RuleSql(
        rule="small_partitions",
        source="aqe_read",
        time_lost=f"greatest(partitions - sp_suggested, 0.) * {lit(c.task_overhead_ms)}",
        floors=floors(c),
        derived=(
            ("sp_prop_advisory", size_bytes("prop_advisory")),
            ("sp_advisory", advisory),
            ("sp_avg", "data_bytes / greatest(partitions, 1.)"),
            ("sp_suggested", "greatest(1., ceil(data_bytes / sp_advisory))"),
        ),
        condition=(
            f"read_coalesced = 1 AND partitions >= {lit(c.aqe_min_partitions)} "
            f"AND sp_avg < {lit(c.aqe_max_fraction_of_advisory)} * sp_advisory"
        ),
        severity="'warning'",
        value="sp_avg",
        threshold=f"{lit(c.aqe_max_fraction_of_advisory)} * sp_advisory",
        evidence=(
            ("partitions", "partitions"),
            ("avg_partition_bytes", "sp_avg"),
            ("advisory_bytes", "sp_advisory"),
            ("suggested_partitions", "sp_suggested"),
        ),
        explanation=concat(
            "'AQE coalesced this shuffle read into ', ",
            integer("partitions"),
            ", ' partitions of ', ",
            size("sp_avg"),
            ", ' on average, far below the advisory ', ",
            size("sp_advisory"),
        ),
        fix=concat(
            "'Set spark.sql.adaptive.coalescePartitions.parallelismFirst=false so AQE targets the advisory "
            "size (about ', ",
            integer("sp_suggested"),
            ", ' partitions), or raise "
            "spark.sql.adaptive.advisoryPartitionSizeInBytes / lower spark.sql.shuffle.partitions'",
        ),
    )
    return [stage, aqe]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    d = t.small_partitions
    return (
        f"> {d.min_tasks} tasks with a median under {d.max_median_task_ms} ms, or AQE coalesced >= "
        f"{d.aqe_min_partitions} partitions to below {d.aqe_max_fraction_of_advisory:.0%} of the advisory size"
    )


RUNBOOK = """\
**Fires when** a stage ran > 5,000 tasks with a median under 500 ms (scheduling and task overhead dominate), or AQE
coalesced a shuffle read into ≥ 100 partitions averaging under 10 % of the advisory size (64 MiB unless the
application sets `spark.sql.adaptive.advisoryPartitionSizeInBytes`).

**Fix**: fewer shuffle partitions (`spark.sql.shuffle.partitions`, the message suggests a number for ~64 MiB each), let
AQE coalesce (`spark.sql.adaptive.coalescePartitions.enabled=true`) and raise
`spark.sql.adaptive.advisoryPartitionSizeInBytes`; for AQE-coalesced reads set
`spark.sql.adaptive.coalescePartitions.parallelismFirst=false`. For file scans raise `spark.sql.files.maxPartitionBytes`
or compact the small input files.
"""

RULE = Rule(
    id="small_partitions",
    order=40,
    title="Small partitions",
    summary="many tiny tasks or partitions",
    config=SmallPartitions,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=(
        "the reduce tasks beyond the suggested count × the fixed cost of a task (`task_overhead_ms`, 10 ms, "
        "capped by the median task) over the stage's slots; for an AQE read, the partitions beyond the "
        "suggested count × that cost"
    ),
)

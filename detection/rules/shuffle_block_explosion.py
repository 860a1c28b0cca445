"""Shuffle block explosion: a stage fetches a million or more tiny shuffle blocks.

The M × R problem in its modern form: every reduce task fetches one block per map output that holds rows for it,
so a shuffle of M map tasks into R reduce partitions fetches up to M × R blocks. Each fetch has a fixed cost (a
request, an index lookup and a seek on the serving disk, a buffer), and below tens of KiB that cost, not the bytes,
is the shuffle's time. The evidence is the stage's own count: local + remote blocks fetched (``stage_completed``,
or the finished tasks of a running stage).

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.rule import (
    Impact,
    KiB,
    MiB,
    Millis,
    Rule,
    RuleSql,
    Size,
    concat,
    floors,
    integer,
    size,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class ShuffleBlockExplosion(Impact):
    """>= 1,000,000 shuffle blocks fetched (local + remote) by one stage, averaging < 64 KiB."""

    min_blocks: Annotated[int, Field(ge=1)] = 1_000_000
    max_avg_block_bytes: Size = 64 * KiB
    critical_blocks: Annotated[int, Field(ge=1)] = 10_000_000
    partition_bytes: Annotated[int, Field(gt=0)] = 64 * MiB
    """The reduce partition size the suggested partition count aims at (AQE's default advisory size)."""
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: ShuffleBlockExplosion = t.shuffle_block_explosion
    return [
        RuleSql(
            rule="shuffle_block_explosion",
            source="stage",
            time_lost="stage_duration_ms * greatest(1 - sbe_suggested / greatest(tasks, 1.), 0.)",
            floors=floors(c),
            derived=(
                ("sbe_avg", "sr_sum / greatest(blocks, 1.)"),
                ("sbe_maps", "ceil(blocks / greatest(tasks, 1.))"),
                ("sbe_suggested", f"greatest(1., ceil(sr_sum / {lit(c.partition_bytes)}))"),
            ),
            condition=f"blocks >= {lit(c.min_blocks)} AND sbe_avg < {lit(c.max_avg_block_bytes)}",
            severity=f"if(blocks >= {lit(c.critical_blocks)}, 'critical', 'warning')",
            value="blocks",
            threshold=f"if(blocks >= {lit(c.critical_blocks)}, {lit(c.critical_blocks)}, {lit(c.min_blocks)})",
            evidence=(
                ("blocks", "blocks"),
                ("avg_block_bytes", "sbe_avg"),
                ("shuffle_read_bytes", "sr_sum"),
                ("reduce_tasks", "tasks"),
                ("blocks_per_task", "sbe_maps"),
                ("suggested_partitions", "sbe_suggested"),
            ),
            explanation=concat(
                "'Fetched ', ",
                integer("blocks"),
                ", ' shuffle blocks averaging ', ",
                size("sbe_avg"),
                ", ' (', ",
                integer("tasks"),
                ", ' reduce tasks × about ', ",
                integer("sbe_maps"),
                ", ' map outputs each, ', ",
                size("sr_sum"),
                ", ' in all)'",
            ),
            fix=concat(
                "'Fewer, larger blocks: about ', ",
                integer("sbe_suggested"),
                ", ' reduce partitions (spark.sql.shuffle.partitions, ', ",
                size(lit(c.partition_bytes)),
                ", ' each), or let AQE coalesce them (spark.sql.adaptive.enabled=true, "
                "spark.sql.adaptive.coalescePartitions.enabled=true); and fewer map tasks (coalesce() the input, "
                "a larger spark.sql.files.maxPartitionBytes)'",
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.shuffle_block_explosion
    return (
        f"a stage fetched >= {c.min_blocks:,} shuffle blocks (local + remote; critical >= {c.critical_blocks:,})"
        f" averaging < {c.max_avg_block_bytes / KiB:g} KiB"
    )


RUNBOOK = """\
**Fires when** one stage fetched ≥ 1,000,000 shuffle blocks (local + remote), averaging under 64 KiB each. Critical
from 10,000,000 blocks.

Why: a reduce task fetches one block from every map output that holds rows for it, so M map tasks × R reduce
partitions make up to M × R blocks — a 1,000 × 1,000 shuffle is a million fetches. Each has a fixed cost (a request,
an index lookup and a disk seek on the serving side, a buffer), which dominates once blocks are a few KiB: the stage
spends its time on fetch round-trips and small random reads, and the external shuffle service or the executors
serving blocks become the bottleneck.

**Check**: *Shuffle read locality* and *Skew per stage* for the stage (its reduce tasks, shuffle bytes); the map
stage before it (how many tasks wrote the shuffle).

**Fix**: fewer reduce partitions — `spark.sql.shuffle.partitions`, or let AQE coalesce them
(`spark.sql.adaptive.enabled=true`, `spark.sql.adaptive.coalescePartitions.enabled=true`, with
`spark.sql.adaptive.advisoryPartitionSizeInBytes` of 64m–256m); fewer map tasks — `coalesce()` the input or raise
`spark.sql.files.maxPartitionBytes`. A `repartition(n)` with a large n on a small dataset is the usual culprit.
"""

RULE = Rule(
    id="shuffle_block_explosion",
    order=75,
    title="Shuffle block explosion",
    summary="a stage fetches a million or more tiny shuffle blocks",
    config=ShuffleBlockExplosion,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=(
        "the stage's wall time × the share of its reduce tasks beyond the suggested partition count (each of "
        "them fetching one tiny block per map output)"
    ),
)

"""Skew AQE did not fix: a skewed shuffle partition survived AQE.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import (
    MEDIAN_MIN_TASKS,
    STRAGGLER_LOST,
    TYPICAL_TASK,
    ZERO_MEDIAN_MIN_SHARE,
    Impact,
    MiB,
    Millis,
    Ratio,
    Rule,
    RuleSql,
    Share,
    Size,
    concat,
    floors,
    none_beside,
    size,
    times,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class SkewNotFixed(Impact):
    """After AQE a partition is still > 5 x the median and > 256 MiB (Spark's own skew-join defaults)."""

    factor: Ratio = 5.0
    min_partition_bytes: Size = 256 * MiB
    zero_median_min_share: Share = ZERO_MEDIAN_MIN_SHARE
    """Beside a median task of nothing, the share of the stage's shuffle bytes the largest task must hold."""
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: SkewNotFixed = t.skew_not_fixed
    return [
        RuleSql(
            rule="skew_not_fixed",
            source="stage",
            time_lost="straggler_lost_ms",
            floors=floors(c),
            needs=frozenset({"properties", "aqe"}),
            derived=(
                TYPICAL_TASK,
                STRAGGLER_LOST,
                # a median task of nothing has no ratio: the largest task's share of the stage's shuffle decides
                ("snf_zero", "sr_p50 < 1"),
                ("snf_ratio", "if(snf_zero, 0., sr_max / sr_p50)"),
                ("snf_total", "greatest(sr_sum, sr_max)"),
                (
                    "snf_reason",
                    "multiIf(lower(prop_aqe) = 'false', 'aqe_off', lower(prop_skew_join) = 'false', "
                    "'skew_join_off', aqe_skew_splits > 0, 'split_not_enough', 'not_applicable')",
                ),
            ),
            # below 5 tasks a median is no baseline (and AQE's skew split compares with the median partition too)
            condition=(
                f"sql_exec >= 0 AND tasks >= {MEDIAN_MIN_TASKS} AND sr_max > {lit(c.min_partition_bytes)} "
                f"AND if(snf_zero, sr_max >= {lit(c.zero_median_min_share)} * snf_total, snf_ratio > {lit(c.factor)})"
            ),
            severity="'warning'",
            value="if(snf_zero, sr_max, snf_ratio)",
            threshold=f"if(snf_zero, {lit(c.min_partition_bytes)}, {lit(c.factor)})",
            evidence=(
                ("max_task_shuffle_bytes", "sr_max"),
                ("median_task_shuffle_bytes", "sr_p50"),
                ("ratio", "snf_ratio"),
                ("aqe_plan_updates", "aqe_updates"),
                ("aqe_skewed_partitions", "aqe_skewed_partitions"),
                ("aqe_skew_splits", "aqe_skew_splits"),
                ("median_is_zero", "snf_zero"),
                ("max_task_share", "sr_max / greatest(snf_total, 1.)"),
            ),
            explanation=concat(
                f"if(snf_zero, {zero_median()}, {with_ratio()})",
                "': '",
                "multiIf(snf_reason = 'aqe_off', 'AQE is off (spark.sql.adaptive.enabled=false)', "
                "snf_reason = 'skew_join_off', 'skew join is disabled (spark.sql.adaptive.skewJoin.enabled=false)', "
                "snf_reason = 'split_not_enough', concat('AQE split ', toString(aqe_skewed_partitions), "
                "' skewed partition(s) into ', toString(aqe_skew_splits), ' but that was not enough'), "
                "'AQE did not treat it as a skewed join (not a sort-merge join, or one key too big to split)')",
            ),
            fix=(
                "multiIf(snf_reason = 'aqe_off', 'Set spark.sql.adaptive.enabled=true and "
                "spark.sql.adaptive.skewJoin.enabled=true', snf_reason = 'skew_join_off', "
                "'Set spark.sql.adaptive.skewJoin.enabled=true', snf_reason = 'split_not_enough', "
                "'Lower spark.sql.adaptive.advisoryPartitionSizeInBytes so skewed partitions split finer, or salt the "
                "hot key', 'Salt the hot key (key, floor(rand() * 16)) and aggregate in two steps, or broadcast the "
                "small side with a /*+ BROADCAST(t) */ hint')"
            ),
        )
    ]


def with_ratio() -> str:
    """'After AQE a task still reads 1.00 GiB of shuffle data, 10.2× the median (100.00 MiB)'."""
    return concat(
        "'After AQE a task still reads '",
        size("sr_max"),
        "' of shuffle data, '",
        times("snf_ratio"),
        "' the median ('",
        size("sr_p50"),
        "')'",
    )


def zero_median() -> str:
    """'After AQE one task still reads all 1.20 GiB of shuffle data; the median task reads none' (``none_beside``)."""
    lead = ("After AQE one task still reads all ", "After AQE the largest task still reads ")
    return none_beside("sr_max", "snf_total", size, "' of shuffle data'", lead)


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.skew_not_fixed
    return (
        f"after AQE a shuffle partition is still > {c.factor:g}x the median and > {c.min_partition_bytes / MiB:g} MiB"
    )


RUNBOOK = """\
**Fires when**, in a SQL stage after AQE, a task still read > 5× the median shuffle bytes and > 256 MiB (Spark's own
`skewedPartitionFactor` / `skewedPartitionThresholdInBytes` defaults). The explanation says why: AQE off, skew join
disabled, AQE split partitions but not enough, or the join was not one AQE can split (not a sort-merge join, or one
key too big). Only with ≥ 5 tasks: below that there is no median partition to compare with, for AQE's split as for
this rule (a 2-task stage one Parquet row group filled is no hot key). Beside a median task of nothing (most
partitions empty) the message says so instead of a ratio ("After AQE one task still reads all 1.20 GiB of shuffle
data; the median task reads none: …") and the largest task must hold ≥ 20 % of the stage's shuffle bytes; `value` is
then its bytes and `threshold` the 256 MiB floor.

**Fix**: as the message says — `spark.sql.adaptive.enabled=true`, `spark.sql.adaptive.skewJoin.enabled=true`, lower
`spark.sql.adaptive.advisoryPartitionSizeInBytes` so skewed partitions split finer, or salt the key / broadcast the
small side.
"""

RULE = Rule(
    id="skew_not_fixed",
    order=30,
    title="Skew AQE did not fix",
    summary="a skewed shuffle partition survived AQE",
    config=SkewNotFixed,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=("the slowest task's time beyond the typical task (median with ≥ 5 tasks, else the mean)"),
)

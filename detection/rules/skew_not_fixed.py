"""Skew AQE did not fix: a skewed shuffle partition survived AQE.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import (
    Impact,
    MiB,
    Millis,
    Ratio,
    Rule,
    RuleSql,
    Size,
    concat,
    floors,
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
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: SkewNotFixed = t.skew_not_fixed
    return [
        RuleSql(
            rule="skew_not_fixed",
            source="stage",
            time_lost="greatest(dur_max - if(tasks >= 5, dur_p50, dur_sum / greatest(tasks, 1.)), 0.)",
            floors=floors(c),
            needs=frozenset({"properties", "aqe"}),
            derived=(
                ("snf_ratio", "sr_max / greatest(sr_p50, 1.)"),
                (
                    "snf_reason",
                    "multiIf(lower(prop_aqe) = 'false', 'aqe_off', lower(prop_skew_join) = 'false', "
                    "'skew_join_off', aqe_skew_splits > 0, 'split_not_enough', 'not_applicable')",
                ),
            ),
            condition=f"sql_exec >= 0 AND snf_ratio > {lit(c.factor)} AND sr_max > {lit(c.min_partition_bytes)}",
            severity="'warning'",
            value="snf_ratio",
            threshold=lit(c.factor),
            evidence=(
                ("max_task_shuffle_bytes", "sr_max"),
                ("median_task_shuffle_bytes", "sr_p50"),
                ("ratio", "snf_ratio"),
                ("aqe_plan_updates", "aqe_updates"),
                ("aqe_skewed_partitions", "aqe_skewed_partitions"),
                ("aqe_skew_splits", "aqe_skew_splits"),
            ),
            explanation=concat(
                "'After AQE a task still reads ', ",
                size("sr_max"),
                ", ' of shuffle data, ', ",
                times("snf_ratio"),
                ", ' the median (', ",
                size("sr_p50"),
                ", '): ', ",
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
key too big).

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

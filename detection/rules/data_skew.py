"""Data skew: one task reads far more data than the median task.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import Ladder, MiB, Ratio, Rule, RuleSql, Size, concat, crossed, ladder, size, times
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class DataSkew(Ladder):
    """Max / median bytes per task (shuffle read, or input) 1.78 / 3.16 / 10, max >= 100 MiB."""

    ratio_info: Ratio = 1.78
    ratio_warning: Ratio = 3.16
    ratio_critical: Ratio = 10.0
    min_max_bytes: Size = 100 * MiB


def sql(t: Thresholds) -> list[RuleSql]:
    c: DataSkew = t.data_skew
    return [RuleSql(
        rule="data_skew", source="stage",
        derived=(("ds_shuffle", "sr_max >= in_max"),
                 ("ds_max", "if(ds_shuffle, sr_max, in_max)"),
                 ("ds_median", "if(ds_shuffle, sr_p50, in_p50)"),
                 ("ds_ratio", "ds_max / greatest(ds_median, 1.)")),
        condition=f"ds_max >= {lit(c.min_max_bytes)} AND ds_ratio >= {lit(c.ratio_info)}",
        severity=ladder("ds_ratio", [("info", c.ratio_info), ("warning", c.ratio_warning),
                                     ("critical", c.ratio_critical)]),
        value="ds_ratio",
        threshold=crossed("ds_ratio", c.ratio_info, c.ratio_warning, c.ratio_critical),
        evidence=(("max_task_bytes", "ds_max"), ("median_task_bytes", "ds_median"), ("ratio", "ds_ratio"),
                  ("from_shuffle", "ds_shuffle")),
        explanation=concat("'Largest task reads ', ", size("ds_max"),
                           ", if(ds_shuffle, ' of shuffle data, ', ' of input, '), ", times("ds_ratio"),
                           ", ' the median task (', ", size("ds_median"), ", ')'"),
        fix=("if(ds_shuffle, 'A few keys hold most rows: enable spark.sql.adaptive.skewJoin.enabled=true for joins, "
             "salt the hot key (key, floor(rand() * 16)) and aggregate in two steps, or broadcast the small side "
             "with a /*+ BROADCAST(t) */ hint', 'Input splits are uneven: compact the source files or "
             "repartition() right after reading')"),
    )]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    b = t.data_skew
    return (f"the largest task read >= {b.ratio_warning:g}x the median task's bytes (info >= {b.ratio_info:g}x, "
            f"critical >= {b.ratio_critical:g}x) and >= {b.min_max_bytes / MiB:g} MiB")


RUNBOOK = """\
**Fires when** the largest task read ≥ 3.16× the median task's bytes (shuffle read, or input when the stage reads no
shuffle), and at least 100 MiB. Info from 1.78×, critical from 10×.

**Check**: *Skew per stage* (bytes max/median), *AQE shuffle reads* (did AQE split skewed partitions?).

**Fix**: shuffle skew → enable the skew join, salt the hot key, or broadcast the small side with
`/*+ BROADCAST(t) */` when it fits in memory. Input skew → compact the source files or `repartition()` after reading.
"""

RULE = Rule(
    id="data_skew",
    order=20,
    title="Data skew",
    summary="one task reads far more data than the median task",
    config=DataSkew,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
)

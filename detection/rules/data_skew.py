"""Data skew: one task reads far more data than the median task, in bytes or in rows.

Bytes alone miss skew that column pruning and shuffle compression hide: a hot key's task may read 19× the median
task's rows but only 2.3× its bytes, and rows are per-task work as much as bytes. So the same ladder applies to
both measures (shuffle records read, or input records), each over its own floor; the finding carries the measure
that crossed higher (``by_rows`` in the evidence).

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import (
    MEDIAN_MIN_TASKS,
    STRAGGLER_LOST,
    TYPICAL_TASK,
    ZERO_MEDIAN_MIN_SHARE,
    Ladder,
    MiB,
    Millis,
    Ratio,
    Rule,
    RuleSql,
    Share,
    Size,
    concat,
    crossed,
    floors,
    integer,
    ladder,
    none_beside,
    rows,
    size,
    times,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class DataSkew(Ladder):
    """Max / median bytes or rows per task (shuffle read, or input) 1.78 / 3.16 / 10; max >= 100 MiB or >= 1 M
    rows."""

    ratio_info: Ratio = 1.78
    ratio_warning: Ratio = 3.16
    ratio_critical: Ratio = 10.0
    min_max_bytes: Size = 100 * MiB
    min_max_rows: Size = 1_000_000
    zero_median_min_share: Share = ZERO_MEDIAN_MIN_SHARE
    """Beside a median task of nothing, the share of the stage's bytes or rows the largest task must hold."""
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: DataSkew = t.data_skew
    share = lit(c.zero_median_min_share)
    return [
        RuleSql(
            rule="data_skew",
            source="stage",
            derived=(
                ("ds_shuffle", "sr_max >= in_max AND (sr_max > 0 OR srr_max >= inr_max)"),
                ("ds_max", "if(ds_shuffle, sr_max, in_max)"),
                ("ds_total", "greatest(if(ds_shuffle, sr_sum, in_sum), ds_max)"),
                TYPICAL_TASK,
                STRAGGLER_LOST,
                ("ds_enough", f"tasks >= {MEDIAN_MIN_TASKS}"),
                ("ds_median", "if(ds_enough, if(ds_shuffle, sr_p50, in_p50), if(ds_shuffle, sr_sum, in_sum) / tasks)"),
                # a median task of nothing has no ratio: the largest task's share of the stage's data decides
                ("ds_zero", "ds_median < 1"),
                ("ds_ratio", "if(ds_zero, 0., ds_max / ds_median)"),
                ("ds_rmax", "if(ds_shuffle, srr_max, inr_max)"),
                ("ds_rmedian", "if(ds_shuffle, srr_p50, inr_p50)"),
                ("ds_rtotal", "greatest(if(ds_shuffle, sr_records, in_records), ds_rmax)"),
                ("ds_rzero", "ds_rmedian < 1"),
                ("ds_rratio", "if(ds_rzero, 0., ds_rmax / ds_rmedian)"),
                (
                    "ds_bytes_hit",
                    f"(ds_shuffle OR (in_bytes_trusted AND (in_from_scan = 0 OR ds_enough))) "
                    f"AND ds_max >= {lit(c.min_max_bytes)} "
                    f"AND if(ds_zero, ds_max >= {share} * ds_total, ds_ratio >= {lit(c.ratio_info)})",
                ),
                (
                    "ds_rows_hit",
                    f"ds_enough AND ds_rmax >= {lit(c.min_max_rows)} "
                    f"AND if(ds_rzero, ds_rmax >= {share} * ds_rtotal, ds_rratio >= {lit(c.ratio_info)})",
                ),
                (
                    "ds_by_rows",
                    "ds_rows_hit AND (NOT ds_bytes_hit OR (ds_rzero AND NOT ds_zero) "
                    "OR (ds_rzero = ds_zero AND ds_rratio > ds_ratio))",
                ),
                ("ds_none", "if(ds_by_rows, ds_rzero, ds_zero)"),
                ("ds_value", "if(ds_none, if(ds_by_rows, ds_rmax, ds_max), if(ds_by_rows, ds_rratio, ds_ratio))"),
            ),
            condition="ds_bytes_hit OR ds_rows_hit",
            # beside a median of nothing the time lost grades it (the floors make it critical from 30 s lost)
            severity=f"if(ds_none, 'critical', {severity_ladder(c)})",
            value="ds_value",
            threshold=(
                f"if(ds_none, if(ds_by_rows, {lit(c.min_max_rows)}, {lit(c.min_max_bytes)}), "
                f"{crossed('ds_value', c.ratio_info, c.ratio_warning, c.ratio_critical)})"
            ),
            evidence=(
                ("max_task_bytes", "ds_max"),
                ("median_task_bytes", "ds_median"),
                ("ratio", "if(ds_by_rows, ds_rratio, ds_ratio)"),
                ("from_shuffle", "ds_shuffle"),
                ("max_task_rows", "ds_rmax"),
                ("median_task_rows", "ds_rmedian"),
                ("by_rows", "ds_by_rows"),
                ("input_from_scan_files", "toUInt8(NOT ds_shuffle AND in_from_scan)"),
                ("median_is_zero", "ds_none"),
                (
                    "max_task_share",
                    "if(ds_by_rows, ds_rmax / greatest(ds_rtotal, 1.), ds_max / greatest(ds_total, 1.))",
                ),
            ),
            explanation=explanation(),
            time_lost="straggler_lost_ms",
            floors=floors(c),
            fix=(
                "if(ds_shuffle, 'A few keys hold most rows: enable spark.sql.adaptive.skewJoin.enabled=true for joins, "
                "salt the hot key (key, floor(rand() * 16)) and aggregate in two steps, or broadcast the small side "
                "with a /*+ BROADCAST(t) */ hint', 'Input splits are uneven: compact the source files or "
                "repartition() right after reading')"
            ),
        )
    ]


def severity_ladder(c: DataSkew) -> str:
    return ladder("ds_value", [("info", c.ratio_info), ("warning", c.ratio_warning), ("critical", c.ratio_critical)])


def explanation() -> str:
    """'Largest task reads 2.00 GiB of shuffle data, 102.4× the median task (20.00 MiB)', or by rows 'Largest task
    reads 1520000 rows of shuffle data, 19× the median task (80000 rows, 23.00 MiB vs 10.00 MiB)'; beside a median task
    of nothing 'One task reads all 1.20 GiB of shuffle data; the median task reads none' (``none_beside``)."""
    largest = f"if(ds_by_rows, {concat(integer('ds_rmax'), repr(' rows'))}, {size('ds_max')})"
    median_rows = concat(integer("ds_rmedian"), repr(" rows, "), size("ds_max"), repr(" vs "), size("ds_median"))
    median = f"if(ds_by_rows, {median_rows}, {size('ds_median')})"
    what = "if(ds_shuffle, ' of shuffle data', ' of input')"
    ratio = concat(
        repr("Largest task reads "),
        largest,
        what,
        "', '",
        times("ds_value"),
        "if(ds_enough, ' the median task (', ' the mean task (')",
        median,
        repr(")"),
    )
    by_rows = none_beside("ds_rmax", "ds_rtotal", rows, what)
    by_bytes = none_beside("ds_max", "ds_total", size, what)
    return f"if(ds_none, if(ds_by_rows, {by_rows}, {by_bytes}), {ratio})"


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    b = t.data_skew
    return (
        f"the largest task read >= {b.ratio_warning:g}x the median task's bytes or rows (info >= "
        f"{b.ratio_info:g}x, critical >= {b.ratio_critical:g}x), and >= {b.min_max_bytes / MiB:g} MiB or "
        f">= {b.min_max_rows:,} rows"
    )


RUNBOOK = """\
**Fires when** the largest task read ≥ 3.16× the median task's bytes and at least 100 MiB — or ≥ 3.16× the median
task's **rows** and at least 1,000,000 rows (shuffle read, or input when the stage reads no shuffle). Info from
1.78×, critical from 10×. The finding names the measure that crossed higher (`by_rows`).

Input bytes: where the tasks report under a byte per row read (Spark 4 Parquet vectored IO), a finished stage's
input is the size of the files its scans read, shared out by rows (`input_from_scan_files` = 1): the row measure in
other units, so like rows it needs 5 tasks for a median; without it, input skew is by rows only.

Why rows too: a task's work is per row as much as per byte. Column pruning and shuffle compression can leave a hot
key's task with 19× the median task's rows but only 2.3× its bytes — it still runs 8× longer. Only completed
stages carry the row quantiles' exact figures; running stages use their finished tasks.

A median task of nothing (AQE, or a few keys, left most partitions empty) gives no ratio: the finding then says so
in words ("One task reads all 1.20 GiB of shuffle data; the median task reads none", or "Largest task reads 150.00 MiB
of shuffle data (60 % of the stage's 250.00 MiB); …"), fires only when the largest task holds ≥ 20 % of the stage's
bytes or rows (ten equal non-empty partitions run side by side: no hot one), and the time it cost grades it: critical
from 30 s lost, else warning. Its `value` is then the amount (bytes or rows) and `threshold` the floor, `ratio` is 0
and `median_is_zero` 1; `max_task_share` is the largest task's share of the stage's data.

The median is over the successful task attempts: where a stage had failed or killed attempts, whose partial input
would pull the median down, it is taken from the stage's `task_end` rows (the listener's aggregates count every
attempt); a 2-4 task stage compares with the mean task.

**Check**: *Skew per stage* (bytes and rows max/median), *AQE shuffle reads* (did AQE split skewed partitions? AQE
splits by bytes only, so row skew with few bytes often survives it).

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
    time_lost=(
        "the slowest task's time beyond the typical task (median with ≥ 5 tasks, else the mean), as for "
        "task-time skew: the time the skewed partition held the stage. Below 5 tasks the byte median is the "
        "mean and the row rule stays silent (no row totals to balance)"
    ),
)

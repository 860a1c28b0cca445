"""Shuffle blow-up: shuffle or spill far larger than the input or than usual.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field, model_validator

from sparktap.detection.rule import (
    GiB,
    Impact,
    MiB,
    Millis,
    Ratio,
    Rule,
    RuleSql,
    Size,
    concat,
    floors,
    integer,
    pct,
    size,
    times,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class ShuffleBlowup(Impact):
    """Shuffle write >= 10 x stage input (>= 1 GiB); disk spill / bytes processed >= 0.25; >= 5 x own history."""

    write_ratio_warning: Ratio = 10.0
    write_ratio_critical: Ratio = 100.0
    min_write_bytes: Size = 1 * GiB
    spill_ratio_warning: Ratio = 0.25
    spill_ratio_critical: Ratio = 1.0
    min_spill_bytes: Size = 100 * MiB
    history_ratio_warning: Ratio = 5.0
    history_ratio_critical: Ratio = 20.0
    history_min_bytes: Size = 100 * MiB
    history_min_runs: Annotated[int, Field(ge=1)] = 3
    history_runs: Annotated[int, Field(ge=1)] = 10
    history_days: Annotated[int, Field(ge=1)] = 30

    min_time_lost_ms: Millis = 5_000
    critical_min_time_lost_ms: Millis = 30_000

    @model_validator(mode="after")
    def _ordered(self) -> ShuffleBlowup:
        for low, high in (
            ("write_ratio_warning", "write_ratio_critical"),
            ("spill_ratio_warning", "spill_ratio_critical"),
            ("history_ratio_warning", "history_ratio_critical"),
        ):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"{low} must not exceed {high}")
        if self.history_min_runs > self.history_runs:
            raise ValueError("history_min_runs must not exceed history_runs")
        return self


def sql(t: Thresholds) -> list[RuleSql]:
    c: ShuffleBlowup = t.shuffle_blowup
    recent = f"arraySlice(arrayReverseSort((b, ts) -> ts, sb_prev_bytes, sb_prev_times), 1, {lit(c.history_runs)})"
    # A stage that reads nothing measurable (spark.range, parallelised collections) has no input to compare with.
    write = (
        f"if(in_bytes_trusted, sb_in, sb_in_rows) > 0 AND sw_sum >= {lit(c.min_write_bytes)} "
        f"AND sb_write_ratio >= {lit(c.write_ratio_warning)}"
    )
    spill = f"disk_spill_sum >= {lit(c.min_spill_bytes)} AND sb_spill_ratio >= {lit(c.spill_ratio_warning)}"
    hist = (
        f"sb_runs >= {lit(c.history_min_runs)} AND sb_bytes >= {lit(c.history_min_bytes)} "
        f"AND (sb_hist_none OR sb_hist_ratio >= {lit(c.history_ratio_warning)})"
    )
    return [
        RuleSql(
            rule="shuffle_blowup",
            source="stage",
            # earlier runs that shuffled nothing: every byte is new, the whole stage the cost
            time_lost=(
                "if(NOT sb_write AND sb_hist AND sb_hist_none, stage_duration_ms, stage_duration_ms * (1 - 1 / "
                "greatest(multiIf(sb_write, sb_write_ratio, sb_hist, sb_hist_ratio, 1 + sb_spill_ratio), 1.)))"
            ),
            floors=floors(c),
            needs=frozenset({"history"}),
            derived=(
                ("sb_in", "in_sum + sr_sum"),
                ("sb_in_rows", "in_records + sr_records"),
                (
                    "sb_write_ratio",
                    "if(in_bytes_trusted, sw_sum / greatest(sb_in, 1.), sw_records / greatest(sb_in_rows, 1.))",
                ),
                (
                    "sb_spill_ratio",
                    "disk_spill_sum / greatest(if(in_bytes_trusted, sb_in, greatest(sr_sum, sw_sum)), 1.)",
                ),
                ("sb_bytes", "greatest(sw_sum, sr_sum)"),
                (
                    "sb_prev_bytes",
                    "arrayFilter((b, a, ts) -> a != app_id AND ts < detected_at_ms, hist_bytes, hist_apps, hist_times)",
                ),
                ("sb_prev_times", "arrayFilter((ts, a) -> a != app_id AND ts < detected_at_ms, hist_times, hist_apps)"),
                ("sb_recent", f"arraySort({recent})"),
                ("sb_runs", "length(sb_recent)"),
                ("sb_median", "if(sb_runs > 0, arrayElement(sb_recent, toUInt32(intDiv(sb_runs + 1, 2))), 0.)"),
                # a median of nothing (the earlier runs shuffled none) has no ratio: the message says so
                ("sb_hist_none", "sb_runs > 0 AND sb_median < 1"),
                ("sb_hist_ratio", "if(sb_runs > 0 AND NOT sb_hist_none, sb_bytes / sb_median, 0.)"),
                ("sb_write", write),
                ("sb_spill", spill),
                ("sb_hist", hist),
            ),
            condition="sb_write OR sb_spill OR sb_hist",
            severity=(
                f"if((sb_write AND sb_write_ratio >= {lit(c.write_ratio_critical)}) "
                f"OR (sb_spill AND sb_spill_ratio >= {lit(c.spill_ratio_critical)}) "
                f"OR (sb_hist AND (sb_hist_none OR sb_hist_ratio >= {lit(c.history_ratio_critical)})), "
                "'critical', 'warning')"
            ),
            value=(
                "multiIf(sb_write, sb_write_ratio, sb_hist, if(sb_hist_none, sb_bytes, sb_hist_ratio), sb_spill_ratio)"
            ),
            threshold=(
                f"multiIf(sb_write, {lit(c.write_ratio_warning)}, sb_hist, if(sb_hist_none, "
                f"{lit(c.history_min_bytes)}, {lit(c.history_ratio_warning)}), {lit(c.spill_ratio_warning)})"
            ),
            evidence=(
                ("shuffle_write_bytes", "sw_sum"),
                ("stage_input_bytes", "sb_in"),
                ("write_ratio", "sb_write_ratio"),
                ("disk_spill_bytes", "disk_spill_sum"),
                ("spill_ratio", "sb_spill_ratio"),
                ("history_median_bytes", "sb_median"),
                ("history_runs", "sb_runs"),
                ("history_ratio", "sb_hist_ratio"),
                ("input_measured_in_bytes", "in_bytes_trusted"),
                ("input_from_scan_files", "in_from_scan"),
                ("shuffle_from_sql_metrics", "shuffle_from_sql"),
            ),
            explanation=(
                "arrayStringConcat(arrayFilter(x -> x != '', ["
                + "if(sb_write, "
                + concat(
                    "'Shuffle write ', ",
                    size("sw_sum"),
                    ", ' is ', ",
                    times("sb_write_ratio"),
                    ", ' the stage input (', ",
                    f"if(in_bytes_trusted, concat({size('sb_in')}, if(in_from_scan > 0, ', the files its scans read', "
                    f"'')), concat({integer('sw_records')}, ' rows written of ', "
                    f"{integer('sb_in_rows')}, ' read: its input bytes are implausible, under a byte a row')), ",
                    "')'",
                )
                + ", ''), "
                + "if(sb_hist, if(sb_hist_none, "
                + concat(
                    "'shuffle ', ", size("sb_bytes"), ", ' where its last ', toString(sb_runs), ' runs shuffled none'"
                )
                + ", "
                + concat(
                    "'shuffle ', ",
                    size("sb_bytes"),
                    ", ' is ', ",
                    times("sb_hist_ratio"),
                    ", ' the median of its last ', ",
                    "toString(sb_runs), ' runs (', ",
                    size("sb_median"),
                    ", ')'",
                )
                + "), ''), "
                + "if(sb_spill, "
                + concat(
                    "'disk spill ', ",
                    size("disk_spill_sum"),
                    ", ' is ', ",
                    pct("sb_spill_ratio"),
                    ", ' of the bytes processed'",
                )
                + ", '')"
                + ", if(shuffle_from_sql, "
                "'read from the SQL metrics of its operators: its tasks report no shuffle or spill', '')" + "]), '; ')"
            ),
            fix=(
                "arrayStringConcat(arrayFilter(x -> x != '', ["
                "if(sb_write, 'Rows multiply before the shuffle (explode/flatMap/join fan-out): filter and select only "
                "needed columns before it, aggregate right after it, or broadcast the small join side', ''), "
                "if(sb_hist, 'Compare with the previous runs: input growth or a changed join/explode', ''), "
                "if(sb_spill, 'Give tasks more memory: raise "
                "spark.sql.shuffle.partitions or spark.executor.memory', '')"
                "]), '; ')"
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    f = t.shuffle_blowup
    return (
        f"shuffle write >= {f.write_ratio_warning:g}x the stage input (and >= "
        f"{f.min_write_bytes / GiB:g} GiB), "
        f"disk spill >= {f.spill_ratio_warning:.0%} of the bytes processed, or shuffle >= "
        f"{f.history_ratio_warning:g}x the median of the job's last {f.history_runs} runs"
    )


RUNBOOK = """\
**Fires when** a stage's shuffle write is ≥ 10× its input (and ≥ 1 GiB; critical ≥ 100×), its disk spill is ≥ 25 % of
the bytes it processed (and ≥ 100 MiB; critical ≥ 100 %), or its shuffle bytes are ≥ 5× the median of the same
application name's same stage over its last 10 runs (within 30 days, at least 3 runs; critical ≥ 20×). Where those
runs shuffled nothing (a median of 0 B: no ratio) it says "shuffle 2.00 GiB where its last 3 runs shuffled none",
the whole stage is the time it cost and that time grades it (critical from 30 s).

Input bytes are used only where they are believable: at least a byte per input row (`in_bytes_trusted` of the stage
relation, `detection/sql.py`). Spark 4 with Parquet vectored IO reports about 2,400× too few task input bytes (they
follow the file count, not the data size); there a finished stage's input is the size of the files its scans read
(their own `size of files read` SQL metric, or for a DSv2 `BatchScan` the file splits of its input partitions,
`stage_completed.scan_bytes_read`; evidence `input_from_scan_files` = 1; an upper bound where the scan reads only
some columns; per line, format and read path: docs/architecture.md, *Input bytes by line, format and read path*).
Without that figure (a running stage, a non-file source, an event log replayed without its plan) the write ratio is
the rows written over the rows read, the spill ratio is over the shuffle bytes, and the evidence says so
(`input_measured_in_bytes` = 0).

Shuffle and spill are the tasks' own metrics. Where a stage's tasks report none and its operators' SQL metrics some
(an engine that keeps its shuffle out of Spark's task metrics: `stage_completed.sql_shuffle_write_bytes`,
`sql_shuffle_read_bytes`, `sql_spill_bytes`), the rule reads those, says so at the end of its message ("read from the
SQL metrics of its operators …") and in its evidence (`shuffle_from_sql_metrics` = 1).

**Check**: *Shuffle written by application* (cluster view), *Spills per stage*; for the history case compare the
input of the previous runs.

**Fix**: rows multiply before the shuffle (explode/flatMap/join fan-out): filter and select only the needed columns
before it, aggregate right after it, broadcast the small join side. Spills: more partitions or more executor memory.
"""

RULE = Rule(
    id="shuffle_blowup",
    order=70,
    title="Shuffle blow-up",
    summary="shuffle or spill far larger than the input or than usual",
    config=ShuffleBlowup,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=(
        "the share of the stage's wall time beyond what the expected bytes would take, time taken as "
        "proportional to bytes: `stage wall time × (1 − 1/ratio)` with the ratio that fired (write/input, "
        "bytes/history median, or 1 + spill/input)"
    ),
)

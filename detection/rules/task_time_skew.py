"""Task-time skew: a straggler task dominates the stage.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import Ladder, Millis, Ratio, Rule, RuleSql, Share, concat, ladder, pct, secs, times
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class TaskTimeSkew(Ladder):
    """Stage max task duration / median >= 4 (warning) / 10 (critical), max >= 5 s and >= 75 % of the stage."""

    ratio_warning: Ratio = 4.0
    ratio_critical: Ratio = 10.0
    min_max_task_ms: Millis = 5_000
    min_share_of_stage: Share = 0.75


def sql(t: Thresholds) -> list[RuleSql]:
    c: TaskTimeSkew = t.task_time_skew
    return [RuleSql(
        rule="task_time_skew", source="stage",
        derived=(("tts_ratio", "dur_max / greatest(dur_p50, 1.)"),
                 ("tts_share", "dur_max / greatest(stage_duration_ms, 1.)")),
        condition=(f"tts_ratio >= {lit(c.ratio_warning)} AND dur_max >= {lit(c.min_max_task_ms)} "
                   f"AND tts_share >= {lit(c.min_share_of_stage)}"),
        severity=ladder("tts_ratio", [("warning", c.ratio_warning), ("critical", c.ratio_critical)]),
        value="tts_ratio",
        threshold=f"if(tts_ratio >= {lit(c.ratio_critical)}, {lit(c.ratio_critical)}, {lit(c.ratio_warning)})",
        evidence=(("max_task_ms", "dur_max"), ("median_task_ms", "dur_p50"), ("ratio", "tts_ratio"),
                  ("stage_duration_ms", "stage_duration_ms"), ("share_of_stage", "tts_share")),
        explanation=concat("'Slowest task ran ', ", secs("dur_max"), ", ', ', ", times("tts_ratio"),
                           ", ' the median task (', ", secs("dur_p50"), ", '), and was ', ", pct("tts_share"),
                           ", ' of the stage''s ', ", secs("stage_duration_ms"), ", ' wall time'"),
        fix=(f"if(sr_max / greatest(sr_p50, 1.) >= {lit(t.data_skew.ratio_warning)} "
             f"OR in_max / greatest(in_p50, 1.) >= {lit(t.data_skew.ratio_warning)}, "
             "'The slow task also reads far more data: enable spark.sql.adaptive.skewJoin.enabled=true (with "
             "spark.sql.adaptive.enabled=true) for joins, or salt the hot key and aggregate in two steps', "
             "'Not explained by data size: check the straggler''s executor/host (GC, disk, noisy neighbour) and "
             "enable speculation (spark.speculation=true)')"),
    )]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    a = t.task_time_skew
    return (f"the slowest task ran >= {a.ratio_warning:g}x the median task (critical >= {a.ratio_critical:g}x), "
            f">= {a.min_max_task_ms / 1000:g} s and >= {a.min_share_of_stage:.0%} of the stage's wall time")


RUNBOOK = """\
**Fires when** a stage's slowest task ran ≥ 4× the median task (critical ≥ 10×), for ≥ 5 s, and for ≥ 75 % of the
stage's wall time — one straggler holds the whole stage (and the job) back.

**Check**: *Task duration distribution per stage* (max far above p95) and *Skew per stage*. If the byte skew is high
too, it is data skew (next entry); if not, look at the straggler's executor/host (GC, disk, a noisy neighbour).

**Fix**: data-driven → `spark.sql.adaptive.skewJoin.enabled=true` (with `spark.sql.adaptive.enabled=true`) for joins,
or salt the hot key (`key, floor(rand() * 16)`) and aggregate in two steps. Not data-driven → `spark.speculation=true`,
fix or exclude the slow node.
"""

RULE = Rule(
    id="task_time_skew",
    order=10,
    title="Task-time skew",
    summary="a straggler task dominates the stage",
    config=TaskTimeSkew,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
)

"""Task-time skew: a straggler task dominates the stage.

A stage's wall time bounds what one task can be "most of" only when all its tasks run at once. A stage of 16 tasks
on 2 slots runs in 8 waves: an 8× straggler there is about half of the stage's wall time at most, yet it is most of
what its slot did. So the share-of-stage gate is qualified: in a multi-wave stage (tasks > the slots it had, i.e.
the executor cores registered while it ran over ``spark.task.cpus``) the straggler is measured against the stage's
*balanced* wall time — all task time spread over the slots (``task time sum / slots``). A late short tail of a long
many-wave stage is a small part of that and does not fire.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import (
    MEDIAN_MIN_TASKS,
    STRAGGLER_LOST,
    TYPICAL_TASK,
    Ladder,
    Millis,
    Ratio,
    Rule,
    RuleSql,
    Severity,
    Share,
    concat,
    floors,
    integer,
    ladder,
    pct,
    secs,
    times,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class TaskTimeSkew(Ladder):
    """Stage max task duration / median >= 4 (warning) / 10 (critical), max >= 5 s, and >= 75 % of the stage's
    wall time — or, in a multi-wave stage, >= 50 % of its balanced wall time (task time / slots)."""

    ratio_warning: Ratio = 4.0
    ratio_critical: Ratio = 10.0
    min_max_task_ms: Millis = 5_000
    min_share_of_stage: Share = 0.75
    min_share_of_balanced: Share = 0.5
    min_time_lost_ms: Millis = 1_000
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: TaskTimeSkew = t.task_time_skew
    rungs: list[tuple[Severity, float]] = [("warning", c.ratio_warning), ("critical", c.ratio_critical)]
    return [
        RuleSql(
            rule="task_time_skew",
            source="stage",
            derived=(
                TYPICAL_TASK,
                STRAGGLER_LOST,
                # a median task of no measurable time has no ratio: the time lost grades it
                ("tts_zero", "typical_task_ms < 1"),
                ("tts_ratio", "if(tts_zero, 0., dur_max / typical_task_ms)"),
                ("tts_share", "dur_max / greatest(stage_duration_ms, 1.)"),
                ("tts_waves", "if(slots > 0, tasks / slots, 0.)"),
                ("tts_balanced", "if(slots > 0, dur_sum / slots, 0.)"),
                ("tts_share_balanced", "if(tts_balanced > 0, dur_max / tts_balanced, 0.)"),
            ),
            condition=(
                f"(tts_zero OR tts_ratio >= {lit(c.ratio_warning)}) AND dur_max >= {lit(c.min_max_task_ms)} "
                f"AND (tts_share >= {lit(c.min_share_of_stage)} "
                f"OR (tts_waves > 1 AND tts_share_balanced >= {lit(c.min_share_of_balanced)}))"
            ),
            severity=f"if(tts_zero, 'critical', {ladder('tts_ratio', rungs)})",
            value="if(tts_zero, dur_max, tts_ratio)",
            threshold=(
                f"multiIf(tts_zero, {lit(c.min_max_task_ms)}, tts_ratio >= {lit(c.ratio_critical)}, "
                f"{lit(c.ratio_critical)}, {lit(c.ratio_warning)})"
            ),
            evidence=(
                ("max_task_ms", "dur_max"),
                ("median_task_ms", "typical_task_ms"),
                ("ratio", "tts_ratio"),
                ("stage_duration_ms", "stage_duration_ms"),
                ("share_of_stage", "tts_share"),
                ("slots", "slots"),
                ("waves", "tts_waves"),
                ("share_of_balanced", "tts_share_balanced"),
            ),
            explanation=concat(
                "'Slowest task ran ', ",
                secs("dur_max"),
                f", if(tts_zero, '; the median task took no measurable time (0 ms),', {with_ratio()}), ",
                "' and was ', ",
                share_text(c),
            ),
            time_lost="straggler_lost_ms",
            floors=floors(c),
            fix=(
                f"if(sr_max / greatest(sr_p50, 1.) >= {lit(t.data_skew.ratio_warning)} "
                f"OR in_max / greatest(in_p50, 1.) >= {lit(t.data_skew.ratio_warning)} "
                f"OR srr_max / greatest(srr_p50, 1.) >= {lit(t.data_skew.ratio_warning)} "
                f"OR inr_max / greatest(inr_p50, 1.) >= {lit(t.data_skew.ratio_warning)}, "
                "'The slow task also reads far more data (bytes or rows): enable "
                "spark.sql.adaptive.skewJoin.enabled=true (with "
                "spark.sql.adaptive.enabled=true) for joins, or salt the "
                "hot key and aggregate in two steps', "
                "'Not explained by data size: check the straggler''s executor/host (GC, disk, noisy neighbour) and "
                "enable speculation (spark.speculation=true)')"
            ),
        )
    ]


def with_ratio() -> str:
    """', 20× the median task (3 s),' or below 5 tasks ', 2× the mean task (only 3 tasks: 4 s),'."""
    return concat(
        "', '",
        times("tts_ratio"),
        f"if(tasks >= {MEDIAN_MIN_TASKS}, ' the median task (', ' the mean task (only ')",
        f"if(tasks >= {MEDIAN_MIN_TASKS}, '', concat({integer('tasks')}, ' tasks: '))",
        secs("typical_task_ms"),
        "'),'",
    )


def share_text(c: TaskTimeSkew) -> str:
    """'86 % of the stage's 70 s wall time', or in a multi-wave stage below the share-of-stage gate '70 % of its
    balanced wall time (16 tasks in 8 waves on 2 slots: 11.5 s)'."""
    of_stage = concat(pct("tts_share"), "' of the stage''s '", secs("stage_duration_ms"), "' wall time'")
    of_balanced = concat(
        pct("tts_share_balanced"),
        "' of its balanced wall time ('",
        integer("tasks"),
        "' tasks in '",
        "toString(round(tts_waves, 1))",
        "' waves on '",
        integer("slots"),
        "' slots: '",
        secs("tts_balanced"),
        "')'",
    )
    return f"if(tts_share >= {lit(c.min_share_of_stage)}, {of_stage}, {of_balanced})"


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    a = t.task_time_skew
    return (
        f"the slowest task ran >= {a.ratio_warning:g}x the median task (critical >= {a.ratio_critical:g}x), "
        f">= {a.min_max_task_ms / 1000:g} s and >= {a.min_share_of_stage:.0%} of the stage's wall time (in a "
        f"multi-wave stage: >= {a.min_share_of_balanced:.0%} of task time / slots)"
    )


RUNBOOK = """\
**Fires when** a stage's slowest task ran ≥ 4× the median task (critical ≥ 10×), for ≥ 5 s, and for ≥ 75 % of the
stage's wall time — one straggler holds the whole stage (and the job) back. In a **multi-wave** stage (more tasks
than the slots it had: the executor cores registered while it ran, over `spark.task.cpus`), the straggler is measured
instead against the stage's *balanced* wall time, its task time spread over its slots (`sum of task time / slots`),
and fires from 50 % of it. A median task of no measurable time (0 ms) gives no ratio: the message says so, `ratio`
is 0, `value` the slowest task's time and the time it cost grades it (critical from 30 s lost).

Why: with 16 tasks on 2 cores, a task 8× the median is at most about half of the stage's wall time (the other slot
runs the rest meanwhile), so the 75 % gate alone never fires there — yet it is 70 % of the balanced time, and the
stage would have ended far sooner without it. A late, short tail of a long many-wave stage (200 tasks on 2 cores,
one 5× task) is 5 % of the balanced time and stays silent. A running stage uses the slots registered when it was
submitted (events from an older listener carry none: the 75 % gate only).

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
    time_lost=(
        "the slowest task's time beyond the typical task — the median task with ≥ 5 tasks, else the mean (the "
        "balanced task time): what the stage would have finished sooner without the straggler"
    ),
)

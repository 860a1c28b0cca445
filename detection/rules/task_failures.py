"""Task failures: many task attempts failed.

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.rule import (
    Ladder,
    Millis,
    Rule,
    RuleSql,
    Share,
    concat,
    crossed,
    floors,
    integer,
    ladder,
    pct,
)
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class TaskFailures(Ladder):
    """Failed / attempted tasks 0.05 / 0.1 / 0.2."""

    ratio_info: Share = 0.05
    ratio_warning: Share = 0.1
    ratio_critical: Share = 0.2
    min_time_lost_ms: Millis = 0
    """A failure is reported whatever its cost: a failing stage risks the job."""
    critical_min_time_lost_ms: Millis = 30_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: TaskFailures = t.task_failures
    return [
        RuleSql(
            rule="task_failures",
            source="stage",
            time_lost=(
                "failed * if(tasks >= 5, dur_p50, dur_sum / greatest(tasks, 1.)) / greatest(least(slots, tasks), 1.)"
            ),
            floors=floors(c),
            derived=(("tf_ratio", "failed / greatest(attempted, 1.)"),),
            condition=f"failed > 0 AND tf_ratio >= {lit(c.ratio_info)}",
            severity=ladder(
                "tf_ratio", [("info", c.ratio_info), ("warning", c.ratio_warning), ("critical", c.ratio_critical)]
            ),
            value="tf_ratio",
            threshold=crossed("tf_ratio", c.ratio_info, c.ratio_warning, c.ratio_critical),
            evidence=(("failed_tasks", "failed"), ("attempted_tasks", "attempted"), ("ratio", "tf_ratio")),
            explanation=concat(
                integer("failed"),
                ", ' of ', ",
                integer("attempted"),
                ", ' task attempts failed (', ",
                pct("tf_ratio"),
                ", ')', if(stage_status = 'failed', ' and the stage failed', '')",
            ),
            fix=(
                "'Read the failure reasons (task_end.failure_class / Spark UI): OOM -> more partitions or "
                "spark.executor.memoryOverhead; FetchFailed -> lost executors (memory, preemption); fix the cause "
                "before raising spark.task.maxFailures'"
            ),
        )
    ]


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    h = t.task_failures
    return (
        f">= {h.ratio_warning:.0%} of task attempts failed (info >= {h.ratio_info:.0%}, critical >= "
        f"{h.ratio_critical:.0%})"
    )


RUNBOOK = """\
**Fires when** ≥ 10 % of a stage's task attempts failed (info from 5 %, critical from 20 %), including stages still
running (from their finished tasks).

What is not a failure, as Spark counts them: `Resubmitted` (a task that had succeeded, re-queued after its executor
was lost: the marker repeats that successful attempt, so it is no attempt either), `TaskKilled` and
`TaskCommitDenied` (a speculative copy that lost the race: killed). The stage's aggregates count a `Resubmitted`
marker as failed; its `task_end` rows tell them apart (with task rows sampled, only the sampled markers; with task
rows off, the aggregates stand).

**Check**: the failure classes in `task_end` (`failure_class`, `failure_message`) or the Spark UI.

**Fix**: the cause first — OOM: more partitions or `spark.executor.memoryOverhead`; `FetchFailed`: executors lost
(memory, pre-emption, node loss); a bad record: fix or filter it. Raise `spark.task.maxFailures` only after that.
"""

RULE = Rule(
    id="task_failures",
    order=90,
    title="Task failures",
    summary="many task attempts failed",
    config=TaskFailures,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost=(
        "the failed attempts × the typical task time (median with ≥ 5 tasks, else the mean), over the stage's slots"
    ),
)

"""Run-over-run regression: a recurring job ran at least twice as long, or held twice the core-time, as usual
(issue 25).

One self-describing rule over the ``app`` relation (``detection/fleet.py``): the recurring job is its key on its cluster
(``detection/history.py``, ``job_key``: ``spark.sparktap.job``, else ``job_key``'s parts: name and schedule id by
default), never a name unrelated applications share by default (``SHARED_NAMES``: a shell's or notebook's) unless
keyed; a finished run is compared with the median of its job's
last ``runs`` earlier finished runs (``h_*`` arrays, ``history_days`` back). Cost is compared as allocated core-time:
the prices are a constant factor per cluster. The stages that grew (``gs_*``): by name, ≥ ``ratio`` × their median over
the same earlier runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field, model_validator

from sparktap.detection.app_rules import app_rule, job_runs
from sparktap.detection.fleet import median
from sparktap.detection.history import DEFAULT_JOB_KEY, JobPart
from sparktap.detection.rule import Impact, Millis, Ratio, Rule, RuleSql, concat, secs, times
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class RunRegression(Impact):
    """Duration or allocated core-time >= 2× the median of the job's last 10 earlier runs (at least 3), for runs of
    at least 60 s; stages named when >= 2× their median and >= 10 s longer."""

    ratio: Ratio = 2.0
    runs: Annotated[int, Field(ge=1, le=100)] = 10
    min_runs: Annotated[int, Field(ge=1)] = 3
    min_duration_ms: Millis = 60_000
    history_days: Annotated[int, Field(ge=1, le=400)] = 30
    stage_min_growth_ms: Millis = 10_000
    job_key: tuple[JobPart, ...] = Field(default=DEFAULT_JOB_KEY, min_length=1)
    """What keys a recurring job that does not set spark.sparktap.job, on its cluster (issue 39; run regression,
    memory over-provisioned and memory pressure alike): app_name, user, schedule (a scheduler's job id)."""
    min_time_lost_ms: Millis = 0
    critical_min_time_lost_ms: Millis = 0

    @model_validator(mode="after")
    def _runs(self) -> RunRegression:
        if self.min_runs > self.runs:
            raise ValueError("min_runs must not exceed runs")
        return self


def sql(t: Thresholds) -> list[RuleSql]:
    c: RunRegression = t.run_regression
    order = "(x, d) -> d"
    top = f"arraySlice(arrayReverseSort({order}, %s, gs_deltas), 1, 3)"
    stage_list = (
        f"arrayStringConcat(arrayMap((n, d, m) -> concat('\"', n, '\" ', toString(round(d / 1000)), ' s vs ', "
        f"toString(round(m / 1000)), ' s'), {top % 'gs_names'}, {top % 'gs_durs'}, {top % 'gs_medians'}), '; ')"
    )
    return app_rule(
        "run_regression",
        c,
        derived=(
            ("rr_durs", job_runs("h_durs", c.runs, this_run=False)),
            ("rr_cores", job_runs("h_core_ms", c.runs, this_run=False)),
            ("rr_runs", "toFloat64(length(rr_durs))"),
            ("rr_med_dur", median("rr_durs")),
            ("rr_med_core", median("rr_cores")),
            ("rr_dur_ratio", "app_duration_ms / greatest(rr_med_dur, 1.)"),
            # earlier runs that say nothing of their executors (an old log) give no core-time to compare with
            ("rr_core_ratio", "if(rr_med_core > 0, allocated_core_ms / rr_med_core, 0.)"),
            ("rr_ratio", "greatest(rr_dur_ratio, rr_core_ratio)"),
        ),
        time_lost="greatest(app_duration_ms - rr_med_dur, 0.)",
        condition=(
            f"end_ms > 0 AND rr_runs >= {lit(c.min_runs)} AND app_duration_ms >= {lit(c.min_duration_ms)} "
            f"AND rr_ratio >= {lit(c.ratio)}"
        ),
        severity="'warning'",
        value="rr_ratio",
        threshold=lit(c.ratio),
        evidence=(
            ("duration_ms", "app_duration_ms"),
            ("median_duration_ms", "rr_med_dur"),
            ("duration_ratio", "rr_dur_ratio"),
            ("core_ms", "allocated_core_ms"),
            ("median_core_ms", "rr_med_core"),
            ("core_ratio", "rr_core_ratio"),
            ("runs", "rr_runs"),
            ("grown_stages", "toFloat64(length(gs_names))"),
            ("top_stage_growth_ms", "arrayReduce('max', arrayPushBack(gs_deltas, 0.))"),
        ),
        explanation=concat(
            "'This run took ', ",
            secs("app_duration_ms"),
            ", ', ', ",
            times("rr_dur_ratio"),
            ", ' the median of its last ', toString(toUInt64(rr_runs)), ' runs (', ",
            secs("rr_med_dur"),
            ", '), and held ', ",
            times("rr_core_ratio"),
            ", ' their median core-time', ",
            f"if(length(gs_names) > 0, concat('; stages that grew: ', {stage_list}), '; no stage grew alone')",
        ),
        fix=(
            "'Compare with the previous run on the application dashboard: more input (a backfill, a skewed "
            "day) shows in the grown stages'' input and shuffle bytes; a changed plan in their SQL executions; "
            "fewer executors or lost executors in the core-time. Fix the cause the grown stages show (the other "
            "findings of this run name it), or size the job for the new volume'"
        ),
    )


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.run_regression
    return (
        f"a recurring job's run took or held >= {c.ratio:g}× the median duration or core-time of its last {c.runs} "
        f"runs (at least {c.min_runs})"
    )


RUNBOOK = """\
**Fires when** a finished run of a recurring job took ≥ 2× the median
duration of the job's last 10 earlier finished runs, or held ≥ 2× their median allocated core-time (its cost: the price
is a constant factor per cluster), with at least 3 earlier runs in the last 30 days and a run of at least 60 s. The
evidence gives both ratios and medians, and the explanation names the stages that grew most (by stage name: ≥ 2× their
median over the same runs and ≥ 10 s longer). Time lost: the run's duration beyond the median.

**The recurring job** (the same for memory over-provisioned and memory pressure, and the *per recurring job* panels):
on one cluster, the applications with the same `spark.sparktap.job` (set it: `--conf spark.sparktap.job=nightly-orders`;
the listener carries it as the `job` tag with `spark.sparktap.tags=job=spark.sparktap.job,…`); else the same
combination of `SPARKTAP_ALERTS__THRESHOLDS__RUN_REGRESSION__JOB_KEY` parts: `app_name`, `user`, `schedule` (the
scheduler's job id: `spark.databricks.job.id`, Airflow's `dag_id.task_id` in `spark.openlineage.parentJobName`);
default `["app_name","schedule"]`. A shell's or notebook's default name (`Spark shell`, `PySparkShell`,
`Databricks Shell`, …), which unrelated applications share, is no job unless keyed by one of those two. The main
class or script is in the name already where nobody chose one: `spark-submit` names an application after its main
class (`--class`) or its script's file name. A Spark Connect server is one application for all its users, so its
runs are no recurring job of a user; its users' operations are compared on the Spark Connect dashboard instead.

**Check**: the **sparktap / Fleet and cost** dashboard (cost per application over time), then the application
dashboard of this run and of a previous one: input and shuffle bytes of the grown stages, their SQL plans, the
executors held.

**Fix**: the grown stages say where: more input (a backfill, a late partition, a skewed key) → the other findings of
the run (data skew, shuffle blow-up, spill); a plan change → statistics (`ANALYZE TABLE`), AQE settings; fewer
executors or lost ones → the cluster's capacity. Size the job for a lasting volume change.
"""

RULE = Rule(
    id="run_regression",
    order=240,
    title="Run-over-run regression",
    summary="a recurring job ran twice as long, or held twice the core-time, as usual",
    config=RunRegression,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost="the run's duration beyond the median of its job's earlier runs",
)

"""Memory over-provisioned: a recurring job's executors never used much of the heap they asked for (issue 25).

One self-describing rule over the ``app`` relation (``detection/fleet.py``): the recurring job is its job key on its
cluster (``history.job_key``); a finished application is judged with its ``runs`` - 1 earlier runs (``h_*`` arrays),
each run's figure being its executors' largest peak of JVM heap + off-heap (``executor_metrics``) over the executor heap
requested (``executor_added.memory_mb``, else ``spark.executor.memory``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field, model_validator

from sparktap.detection.app_rules import app_rule, job_runs, rounded_up, spark_mib, with_headroom
from sparktap.detection.rule import GiB, Impact, MiB, Rule, RuleSql, Share, Size, concat, pct, size
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class MemoryOverprovisioned(Impact):
    """Peak heap + off-heap < 40 % of the heap requested (warning < 20 %) in each of the job's last 3 runs, on
    executors of at least 1 GiB; the recommended size is the largest peak plus 50 % headroom."""

    used_share: Share = 0.4
    used_share_warning: Share = 0.2
    runs: Annotated[int, Field(ge=1, le=50)] = 3
    headroom: Annotated[float, Field(ge=0, le=10)] = 0.5
    min_heap_bytes: Size = 1 * GiB

    @model_validator(mode="after")
    def _ordered(self) -> MemoryOverprovisioned:
        if self.used_share_warning > self.used_share:
            raise ValueError("used_share_warning must not exceed used_share")
        return self


def sql(t: Thresholds) -> list[RuleSql]:
    c: MemoryOverprovisioned = t.memory_overprovisioned
    return app_rule(
        "memory_overprovisioned",
        derived=(
            ("mo_shares", job_runs("h_share", c.runs, this_run=True)),
            ("mo_used", job_runs("h_used", c.runs, this_run=True)),
            ("mo_runs", "toFloat64(length(mo_shares))"),
            ("mo_max_share", "arrayReduce('max', mo_shares)"),
            ("mo_max_used", "arrayReduce('max', mo_used)"),
            ("mo_recommended", rounded_up(with_headroom("mo_max_used", c.headroom), 512 * MiB)),
        ),
        condition=(
            f"end_ms > 0 AND heap_bytes >= {lit(c.min_heap_bytes)} AND mo_runs >= {lit(c.runs)} "
            f"AND arrayAll(x -> x > 0, mo_shares) AND mo_max_share < {lit(c.used_share)} "
            "AND mo_recommended < heap_bytes"
        ),
        severity=f"if(mo_max_share < {lit(c.used_share_warning)}, 'warning', 'info')",
        value="mo_max_share",
        threshold=lit(c.used_share),
        evidence=(
            ("runs", "mo_runs"),
            ("max_used_bytes", "mo_max_used"),
            ("heap_bytes", "heap_bytes"),
            ("max_used_share", "mo_max_share"),
            ("recommended_bytes", "mo_recommended"),
            ("headroom", lit(c.headroom)),
            ("allocated_gib_ms", "allocated_gib_ms"),
            ("saved_share", "1 - mo_recommended / heap_bytes"),
        ),
        explanation=concat(
            "'Over its last ', toString(toUInt64(mo_runs)), ' runs the executors peaked at ', ",
            size("mo_max_used"),
            ", ' of heap + off-heap at most: ', ",
            pct("mo_max_share"),
            ", ' of the ', ",
            size("heap_bytes"),
            ", ' requested (spark.executor.memory)'",
        ),
        fix=concat(
            f"'Set spark.executor.memory=', {spark_mib('mo_recommended')}, 'm: the largest peak (', ",
            size("mo_max_used"),
            f", ') plus {c.headroom:.0%} headroom, rounded up to 256 MiB (', ",
            pct("1 - mo_recommended / heap_bytes"),
            ", ' less memory per executor); or keep the size and give each executor more cores "
            "(spark.executor.cores) so fewer executors do the work'",
        ),
    )


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.memory_overprovisioned
    return (
        f"in each of a recurring job's last {c.runs} runs its executors' peak heap + off-heap stayed under "
        f"{c.used_share:.0%} of spark.executor.memory (warning under {c.used_share_warning:.0%})"
    )


RUNBOOK = """\
**Fires when**, in each of a recurring job's last 3 runs (its job key on its cluster, as run-over-run regression keys
it; this run included), the executors' largest peak of JVM heap + off-heap memory (Spark's `JVMHeapMemory` +
`JVMOffHeapMemory` executor metrics) stayed under 40 % of the executor heap requested (`spark.executor.memory`, from the
executors' resource profile), on executors of at least 1 GiB; info, warning under 20 %. The evidence gives the largest
peak, the request and the recommended size: the largest peak plus 50 % headroom, rounded up to 256 MiB (never under 512
MiB). No time is lost (time lost 0): the cost is the memory held, shown on the **Fleet and cost** dashboard.

**Check**: the **sparktap / Fleet and cost** dashboard: *Memory headroom per recurring job*.

**Fix**: set `spark.executor.memory` to the recommended size
(`SPARKTAP_ALERTS__THRESHOLDS__MEMORY_OVERPROVISIONED__HEADROOM` sets the headroom); or keep the size and run more
cores per executor (`spark.executor.cores`) so fewer executors share the work. Re-check after a data-volume change: a
job that grows needs its headroom back.
"""

RULE = Rule(
    id="memory_overprovisioned",
    order=210,
    title="Memory over-provisioned",
    summary="a recurring job's executors never used much of the memory they asked for",
    config=MemoryOverprovisioned,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost="none (0): the waste is memory held, priced on the Fleet and cost dashboard",
)

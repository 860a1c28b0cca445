"""Memory pressure / OOM risk: executors near their memory limit, killed for memory, or busy collecting garbage
(issue 25).

One self-describing rule over the ``app`` relation (``detection/fleet.py``): the executors' largest peak of JVM heap +
off-heap (``executor_metrics``) against the heap requested, the executors removed for memory
(``executor_removed.removal_class = 'oom'``), and the executors' GC time against the tasks' run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.app_rules import app_rule, rounded_up, spark_mib, with_headroom
from sparktap.detection.rule import Impact, Millis, Rule, RuleSql, Share, concat, pct, size
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class MemoryPressure(Impact):
    """Peak heap + off-heap >= 90 % of the heap requested while GC took >= 5 % of the task run time (a heap that fills
    between cheap collections is the JVM at work, not pressure), or an executor removed for memory (critical), or
    executor GC >= 20 % of task run time (over at least 60 s of run time); recommended size: the peak plus 30 %, or
    1.5× the request after an OOM."""

    used_share: Annotated[float, Field(gt=0)] = 0.9
    near_gc_share: Share = 0.05
    gc_share: Share = 0.2
    min_run_time_ms: Millis = 60_000
    headroom: Annotated[float, Field(ge=0, le=10)] = 0.3
    oom_growth: Annotated[float, Field(ge=1, le=10)] = 1.5


def sql(t: Thresholds) -> list[RuleSql]:
    c: MemoryPressure = t.memory_pressure
    near = (
        f"heap_bytes > 0 AND m_used >= {lit(c.used_share)} * heap_bytes "
        f"AND m_gc_ms >= {lit(c.near_gc_share)} * busy_core_ms"
    )
    gc = f"busy_core_ms >= {lit(c.min_run_time_ms)} AND mp_gc_share >= {lit(c.gc_share)}"
    needed = (
        f"greatest({with_headroom('m_used', c.headroom)}, if(oom_removals > 0, heap_bytes * {lit(c.oom_growth)}, 0.))"
    )
    return app_rule(
        "memory_pressure",
        c,
        derived=(
            ("mp_gc_share", "m_gc_ms / greatest(busy_core_ms, 1.)"),
            ("mp_near", near),
            ("mp_gc", gc),
            ("mp_recommended", rounded_up(needed)),
        ),
        time_lost="m_gc_ms / greatest(cores, 1.)",
        condition="mp_near OR oom_removals > 0 OR mp_gc",
        severity="if(oom_removals > 0, 'critical', 'warning')",
        value="used_share",
        threshold=lit(c.used_share),
        evidence=(
            ("max_used_bytes", "m_used"),
            ("heap_bytes", "heap_bytes"),
            ("used_share", "used_share"),
            ("oom_removals", "oom_removals"),
            ("gc_ms", "m_gc_ms"),
            ("gc_share", "mp_gc_share"),
            ("python_rss_bytes", "m_python_rss"),
            ("recommended_bytes", "mp_recommended"),
        ),
        explanation=(
            "arrayStringConcat(arrayFilter(x -> x != '', ["
            "if(oom_removals > 0, concat(toString(toUInt64(oom_removals)), "
            "' executor(s) removed for memory'), ''), "
            f"if(mp_near, concat('executors peaked at ', {size('m_used')}, ' of heap + off-heap, ', "
            f"{pct('used_share')}, ' of the ', {size('heap_bytes')}, ' requested'), ''), "
            f"if(mp_gc, concat('executors spent ', {pct('mp_gc_share')}, ' of the task run time in GC'), '')]), "
            "'; ')"
        ),
        fix=concat(
            f"'Raise spark.executor.memory to ', {spark_mib('mp_recommended')}, 'm (', ",
            f"if(oom_removals > 0, '{c.oom_growth:g}× the request after an OOM', "
            f"'the peak plus {c.headroom:.0%} headroom'), "
            "'); when containers were killed (exit 137) raise spark.executor.memoryOverhead, for Python workers "
            "spark.executor.pyspark.memory; or give each task less data: more partitions "
            "(spark.sql.shuffle.partitions, spark.sql.files.maxPartitionBytes) or fewer cores per executor "
            "(spark.executor.cores)'",
        ),
    )


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.memory_pressure
    return (
        f"executors peaked at >= {c.used_share:.0%} of their heap request with >= {c.near_gc_share:.0%} of the task "
        f"run time in GC, or spent >= {c.gc_share:.0%} of it in GC; critical when an executor was removed for memory "
        "(OOM)"
    )


RUNBOOK = """\
**Fires when** an application's executors peaked at ≥ 90 % of the executor heap requested in JVM heap + off-heap
memory (Spark's `JVMHeapMemory` + `JVMOffHeapMemory` executor metrics against `spark.executor.memory`) while GC took
≥ 5 % of the task run time (a heap that fills up between cheap collections is the JVM at work), or spent ≥ 20 %
of the task run time in GC (executor lifetime `TotalGCTime`, over at least 60 s of run time) — warning — or an
executor was removed for memory (`removal_class` `oom`: exit code 137, "exceeding memory limits", `OOMKilled`,
`OutOfMemoryError`) — critical. The evidence gives the peak, the request, the OOM removals, the GC share, the Python
workers' RSS (with `spark.executor.processTreeMetrics.enabled`) and a recommended size: the peak plus 30 %, or 1.5× the
request after an OOM, rounded up to 256 MiB. Time lost: the executors' GC time over the cores held.

**Check**: the **sparktap / Fleet and cost** dashboard: *Memory headroom per recurring job*; the stages' spill on the
application dashboard.

**Fix**: raise `spark.executor.memory` to the recommended size; a container killed by the cluster manager (exit 137,
"exceeding memory limits") needs `spark.executor.memoryOverhead`, Python workers `spark.executor.pyspark.memory`; or
make each task hold less: more partitions (`spark.sql.shuffle.partitions`, `spark.sql.files.maxPartitionBytes`),
fewer cores per executor (`spark.executor.cores`), no large `collect_list` / broadcast values.
"""

RULE = Rule(
    id="memory_pressure",
    order=220,
    title="Memory pressure",
    summary="executors near their memory limit, killed for memory, or busy collecting garbage",
    config=MemoryPressure,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost="the executors' GC time over the cores held",
)

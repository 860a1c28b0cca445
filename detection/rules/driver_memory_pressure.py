"""Driver memory pressure: the driver's heap near its limit (issue 25).

One self-describing rule over the ``app`` relation (``detection/fleet.py``): the driver's peak JVM heap
(``executor_metrics`` of executor ``driver``) against ``spark.driver.memory`` (Spark's 1 GiB when unset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from sparktap.detection.app_rules import app_rule, rounded_up, spark_mib, with_headroom
from sparktap.detection.rule import Impact, Millis, Rule, RuleSql, Share, concat, pct, size
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


class DriverMemoryPressure(Impact):
    """The driver's peak heap >= 90 % of spark.driver.memory (critical >= 98 %) while its GC took >= 10 % of the
    application's time and >= 5 s (critical from 60 s): a full heap that cost no GC time is the JVM collecting
    lazily, not pressure. Recommended: the peak plus 50 %."""

    used_share: Annotated[float, Field(gt=0)] = 0.9
    critical_share: Annotated[float, Field(gt=0)] = 0.98
    gc_share: Share = 0.1
    headroom: Annotated[float, Field(ge=0, le=10)] = 0.5
    min_time_lost_ms: Millis = 5_000
    critical_min_time_lost_ms: Millis = 60_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: DriverMemoryPressure = t.driver_memory_pressure
    return app_rule(
        "driver_memory_pressure",
        c,
        derived=(
            ("dm_share", "m_driver_heap / greatest(driver_bytes, 1.)"),
            ("dm_recommended", rounded_up(with_headroom("m_driver_heap", c.headroom))),
        ),
        time_lost="m_driver_gc_ms",
        condition=(
            f"m_driver_heap > 0 AND dm_share >= {lit(c.used_share)} "
            f"AND m_driver_gc_ms >= {lit(c.gc_share)} * app_duration_ms"
        ),
        severity=f"if(dm_share >= {lit(c.critical_share)}, 'critical', 'warning')",
        value="dm_share",
        threshold=lit(c.used_share),
        evidence=(
            ("driver_heap_bytes", "m_driver_heap"),
            ("driver_used_bytes", "m_driver_used"),
            ("driver_memory_bytes", "driver_bytes"),
            ("used_share", "dm_share"),
            ("driver_gc_ms", "m_driver_gc_ms"),
            ("recommended_bytes", "dm_recommended"),
        ),
        explanation=concat(
            "'The driver heap peaked at ', ",
            size("m_driver_heap"),
            ", ', ', ",
            pct("dm_share"),
            ", ' of spark.driver.memory (', ",
            size("driver_bytes"),
            ", '); its GC took ', toString(round(m_driver_gc_ms / 1000, 1)), ' s'",
        ),
        fix=concat(
            f"'Raise spark.driver.memory to ', {spark_mib('dm_recommended')}, ",
            f"'m (the peak plus {c.headroom:.0%}); or keep less on the driver: no collect() / toPandas() of large "
            "results (write them out, or cap spark.driver.maxResultSize), smaller broadcasts "
            "(spark.sql.autoBroadcastJoinThreshold), fewer cached plans and accumulators'",
        ),
    )


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.driver_memory_pressure
    return (
        f"the driver's heap peaked at >= {c.used_share:.0%} of spark.driver.memory "
        f"(critical >= {c.critical_share:.0%}) while its GC took >= {c.gc_share:.0%} of the application's time"
    )


RUNBOOK = """\
**Fires when** the driver's JVM heap (Spark's `JVMHeapMemory` metric of executor `driver`) peaked at ≥ 90 % of
`spark.driver.memory` (1 GiB when unset; critical from 98 %) while the driver's GC took at least 10 % of the
application's time and at least 5 s (critical from 60 s): a heap that fills up between cheap collections is the JVM
at work, not pressure (in `local` mode the driver runs the tasks too). The evidence gives the peak, the request, the
driver's GC time (its time lost) and a recommended size: the peak plus 50 %, rounded up to 256 MiB.

**Check**: the application's jobs for a `collect()`, `toPandas()` or a large broadcast just before the peak.

**Fix**: raise `spark.driver.memory`; or keep less on the driver — write results out instead of `collect()` /
`toPandas()` (or cap `spark.driver.maxResultSize`), smaller broadcasts (`spark.sql.autoBroadcastJoinThreshold`), fewer
cached DataFrames and accumulators held by the driver.
"""

RULE = Rule(
    id="driver_memory_pressure",
    order=230,
    title="Driver memory pressure",
    summary="the driver's heap is near its limit",
    config=DriverMemoryPressure,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost="the driver's GC time",
)

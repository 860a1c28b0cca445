"""Idle executors: an application held far more executor cores than its tasks used (issue 25).

One self-describing rule: thresholds with defaults, SQL, condition in words and runbook entry. Over the ``app``
relation (``detection/fleet.py``): allocated core-time is each executor's cores × its lifetime (closed at
``app_end`` when Spark never removed it), busy core-time the tasks' run time (``utilisation.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktap.detection.app_rules import app_rule
from sparktap.detection.rule import Impact, Millis, Rule, RuleSql, Share, concat, integer, pct, secs
from sparktap.detection.sql import lit

if TYPE_CHECKING:
    from sparktap.detection.thresholds import Thresholds


LOCAL_MODE = "(p_master = 'local' OR startsWith(p_master, 'local['))"
"""Whether the application ran in local mode (``spark.master`` ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``;
not ``local-cluster``, which starts real executors)."""


class IdleExecutors(Impact):
    """Busy core-time < 40 % of allocated core-time, over at least 60 core-minutes held, on a finished
    application not in local mode."""

    busy_share: Share = 0.4
    min_allocated_core_ms: Millis = 3_600_000
    critical_busy_share: Share = 0.1
    min_time_lost_ms: Millis = 0
    critical_min_time_lost_ms: Millis = 600_000


def sql(t: Thresholds) -> list[RuleSql]:
    c: IdleExecutors = t.idle_executors
    dynamic = "lower(p_dynamic) = 'true'"
    advice = concat(
        "'Tasks kept ', toString(round(ie_avg_cores, 1)), ' cores busy on average out of ', ",
        integer("cores"),
        ", ' held (', ",
        integer("executors"),
        ", ' executors × ', toString(round(ie_per_exec, 1)), ' cores). '",
    )
    return app_rule(
        "idle_executors",
        c,
        derived=(
            ("ie_busy_share", "busy_core_ms / greatest(allocated_core_ms, 1.)"),
            ("ie_per_exec", "cores / greatest(executors, 1.)"),
            ("ie_avg_cores", "busy_core_ms / greatest(app_duration_ms, 1.)"),
            ("ie_needed", "greatest(ceil(ie_avg_cores / greatest(ie_per_exec, 1.)), 1.)"),
            ("ie_lost", "idle_core_ms / greatest(cores, 1.)"),
        ),
        time_lost="ie_lost",
        # local mode: the one executor is the driver, its cores are the machine's: none to release or resize
        condition=(
            f"end_ms > 0 AND NOT {LOCAL_MODE} AND allocated_core_ms >= {lit(c.min_allocated_core_ms)} "
            f"AND ie_busy_share < {lit(c.busy_share)}"
        ),
        severity=f"if(ie_busy_share < {lit(c.critical_busy_share)}, 'critical', 'warning')",
        value="ie_busy_share",
        threshold=lit(c.busy_share),
        evidence=(
            ("allocated_core_ms", "allocated_core_ms"),
            ("busy_core_ms", "busy_core_ms"),
            ("idle_core_ms", "idle_core_ms"),
            ("busy_share", "ie_busy_share"),
            ("executors", "executors"),
            ("cores", "cores"),
            ("avg_busy_cores", "ie_avg_cores"),
            ("recommended_executors", "ie_needed"),
            ("dynamic_allocation", f"toUInt8({dynamic})"),
            ("app_duration_ms", "app_duration_ms"),
        ),
        explanation=concat(
            "'Executors held ', toString(round(allocated_core_ms / 1000)), ' core-s but tasks ran ', "
            "toString(round(busy_core_ms / 1000)), ' core-s (', ",
            pct("ie_busy_share"),
            ", ' busy): ', toString(round(idle_core_ms / 1000)), ' core-s idle over ', ",
            secs("app_duration_ms"),
            ", ' on ', ",
            integer("executors"),
            ", ' executors'",
        ),
        fix=concat(
            advice,
            f", if({dynamic}, concat('Dynamic allocation is on: lower spark.dynamicAllocation.executorIdleTimeout "
            "(now ', if(p_idle_timeout = '', '60s', p_idle_timeout), ') to 30s so idle executors leave sooner, and "
            "cap spark.dynamicAllocation.maxExecutors at ', toString(toUInt64(ie_needed)), '.'), concat('Enable "
            "dynamic allocation (spark.dynamicAllocation.enabled=true, spark.dynamicAllocation.shuffleTracking."
            "enabled=true, spark.dynamicAllocation.executorIdleTimeout=60s) so idle executors are released, or "
            "run fewer or smaller executors: spark.executor.instances=', toString(toUInt64(ie_needed)), '.'))",
        ),
    )


def condition(t: Thresholds) -> str:
    """The condition in words, with the configured thresholds (Grafana alert descriptions)."""
    c = t.idle_executors
    return (
        f"an application's tasks used < {c.busy_share:.0%} of the executor core-time it held, over "
        f">= {c.min_allocated_core_ms / 60_000:g} core-minutes (critical < {c.critical_busy_share:.0%})"
    )


RUNBOOK = """\
**Fires when** a finished application's tasks ran for less than 40 % of the executor core-time it held (critical
under 10 %), over at least 60 core-minutes held. Never in local mode (`spark.master` `local`, `local[N]`,
`local[*]`): there the one executor is the driver and its cores are the machine's, so there is nothing to release
(dynamic allocation does not apply) and no executor to resize. Held core-time is each executor's cores × its
lifetime, from `executor_added` to `executor_removed`, or to `app_end` when Spark never removed it (a standalone
cluster kills its executors after the application); busy core-time is the tasks' run time × `spark.task.cpus`. The
evidence gives both, the idle core-time, the average number of cores the tasks kept busy (busy core-time ÷ wall time)
and the executor count that would have carried it. Time lost: the idle core-time over the cores held (the wall time
the cores sat idle).

**Check**: the **sparktap / Fleet and cost** dashboard: *Idle core-hours by application*, *Top wasters*; `sparktap
cost --by app`.

**Fix**: release idle executors with dynamic allocation (`spark.dynamicAllocation.enabled=true`,
`spark.dynamicAllocation.shuffleTracking.enabled=true`, `spark.dynamicAllocation.executorIdleTimeout=60s`, or lower
the timeout when it is already on and cap `spark.dynamicAllocation.maxExecutors`); or request fewer or smaller
executors (`spark.executor.instances`, `spark.executor.cores`) — the finding's fix gives the count the tasks needed.
A driver that sleeps or works alone between jobs (polling, `collect()` then local Python) holds every executor idle.
"""

RULE = Rule(
    id="idle_executors",
    order=200,
    title="Idle executors",
    summary="an application held far more executor cores than its tasks used",
    config=IdleExecutors,
    sql=sql,
    condition=condition,
    runbook=RUNBOOK,
    time_lost="the idle core-time (held minus busy) over the cores held",
)

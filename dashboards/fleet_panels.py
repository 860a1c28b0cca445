"""The panels of the "Fleet and cost" dashboard (issue 25): cost and idle core-hours by team, user and application
over time, the top wasters, and memory headroom per recurring job. One function per panel, each setting its title,
description and unit.

The SQL is ``detection/utilisation.py`` (cost and utilisation per application, prices of ``GrafanaConfig.cost``
rendered in) and ``detection/fleet.py`` (memory peaks against requests), so the panels, ``sparktap cost`` and the
rules agree. Applications count on the interval they started in.
"""

# ruff: noqa: S608 - panel SQL is assembled from our own identifiers and view names, never from user text.

from __future__ import annotations

from sparktap.dashboards.builders import (
    Json,
    panel,
    table_options,
    timeseries_custom,
    timeseries_options,
)
from sparktap.dashboards.panels import APP_LINK, time_bucket
from sparktap.detection.fleet import RUNS_OF, app_facts
from sparktap.detection.prices import CostSettings
from sparktap.detection.sql import SqlContext
from sparktap.detection.utilisation import usage_query

GRAFANA_CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "INR", "CNY", "SEK", "NOK", "DKK", "PLN", "BRL")


def currency_unit(cost: CostSettings) -> str:
    """Grafana's unit for the configured currency (``currencyEUR``), else plain numbers."""
    return f"currency{cost.currency}" if cost.currency in GRAFANA_CURRENCIES else "short"


def _apps(ctx: SqlContext, cost: CostSettings) -> str:
    return usage_query(ctx, "app", cost)


def _over_time(ctx: SqlContext, cost: CostSettings, key: str, value: str) -> str:
    bucket = time_bucket("toDateTime(intDiv(start_ms, 1000))")
    return f"""SELECT {bucket} AS time, if({key} = '', '(none)', {key}) AS series, {value}
FROM ({_apps(ctx, cost)})
GROUP BY time, series
ORDER BY time"""


def cost_over_time(ctx: SqlContext, cost: CostSettings, by: str, title: str) -> Json:
    sql = _over_time(ctx, cost, by, "sum(cost) AS cost")
    return panel(
        "timeseries",
        title,
        f"Cost of the applications started per interval, by {by.replace('_', ' ')}: executor core-hours × the "
        "cluster's core-hour price + GiB-hours of executor memory × its GiB-hour price (SPARKTAP_COST__*).",
        currency_unit(cost),
        sql,
        fmt="time_series",
        width=12,
        height=8,
        options=timeseries_options(),
        custom=timeseries_custom("bars", stack=True, fill=60),
    )


def idle_over_time(ctx: SqlContext, cost: CostSettings, by: str, title: str) -> Json:
    sql = _over_time(ctx, cost, by, "sum(idle_core_ms) / 3600000 AS idle_core_hours")
    return panel(
        "timeseries",
        title,
        f"Executor core-hours held but not used by tasks (held − task run time), by {by.replace('_', ' ')}, of the "
        "applications started per interval.",
        "short",
        sql,
        fmt="time_series",
        width=12,
        height=8,
        options=timeseries_options(),
        custom=timeseries_custom("bars", stack=True, fill=60),
    )


def top_wasters(ctx: SqlContext, cost: CostSettings) -> Json:
    sql = f"""SELECT app_name, any(team) AS team, any(user) AS user, toFloat64(count()) AS runs,
    sum(idle_core_ms) / 3600000 AS idle_core_hours,
    if(sum(allocated_core_ms) > 0, sum(idle_core_ms) / sum(allocated_core_ms), 0.) AS idle_share,
    sum(cost) AS total_cost, sum(cost * idle_core_ms / greatest(allocated_core_ms, 1.)) AS idle_cost,
    any(cluster) AS cluster, argMax(app_id, start_ms) AS app_id
FROM ({_apps(ctx, cost)})
GROUP BY app_name
ORDER BY idle_core_hours DESC, app_name
LIMIT 20"""
    return panel(
        "table",
        "Top wasters",
        "Recurring jobs (application names) by idle executor core-hours in the time range: runs, idle share, cost "
        "and the cost of the idle share. The idle executors rule's fix says how many executors the tasks needed.",
        "short",
        sql,
        width=24,
        height=9,
        options=table_options("idle_core_hours"),
        links=[APP_LINK],
    )


def cost_by_application(ctx: SqlContext, cost: CostSettings) -> Json:
    sql = f"""SELECT app_name, any(team) AS team, any(cost_centre) AS cost_centre, any(user) AS user,
    toFloat64(count()) AS runs, sum(allocated_core_ms) / 3600000 AS core_hours,
    sum(allocated_gib_ms) / 3600000 AS gib_hours, sum(cost) AS cost
FROM ({_apps(ctx, cost)})
GROUP BY app_name
ORDER BY cost DESC, app_name
LIMIT 50"""
    return panel(
        "table",
        "Cost by application",
        "Applications by name (the recurring job) in the time range: runs, executor core-hours and GiB-hours held, "
        f"cost in {cost.currency} (what `sparktap cost --by app` prints).",
        "short",
        sql,
        width=24,
        height=9,
        options=table_options("cost"),
    )


def memory_headroom(ctx: SqlContext) -> Json:
    # the recurring job as the rules key it (issue 39: detection/history.py job_key); an application of no job alone
    sql = f"""SELECT cluster, any(app_name) AS app_name, {RUNS_OF} AS job, toFloat64(count()) AS runs,
    max(heap_bytes) AS heap_requested, max(m_used) AS peak_used, max(used_share) AS peak_share,
    1 - max(used_share) AS headroom, max(oom_removals) AS oom_removals, max(m_driver_heap) AS driver_peak,
    max(driver_bytes) AS driver_memory
FROM ({app_facts(ctx)})
WHERE m_rows > 0
GROUP BY cluster, job
ORDER BY peak_share, app_name
LIMIT 50"""
    return panel(
        "table",
        "Memory headroom per recurring job",
        "Per recurring job (spark.sparktap.job, else the application name and schedule id; a shell's default name "
        "is no job: each such application alone): the executor heap requested, the largest peak of JVM heap + "
        "off-heap over its runs in the range, the share used and the headroom left (memory over-provisioned under "
        "40 %, memory pressure over 90 %), executors removed for memory, and the driver's peak heap against "
        "spark.driver.memory.",
        "bytes",
        sql,
        width=24,
        height=9,
        options=table_options("peak_share", descending=False),
    )

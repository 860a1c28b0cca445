"""The sparktap dashboards: overview, application drill-down, cluster view, Structured Streaming, Spark Connect, fleet
and cost, and tables."""

# ruff: noqa: S608 - variable SQL is assembled from our own identifiers, never from user text: variable values reach
# SQL only through detection.sql.in_variable (Grafana's percentencode format, decoded by ClickHouse), and a variable
# offers only values matching the identifier pattern (schemas/types.py).

from __future__ import annotations

from collections.abc import Iterator

from sparktap.dashboards import application_panels as a
from sparktap.dashboards import connect_panels as c
from sparktap.dashboards import fleet_panels as f
from sparktap.dashboards import health_panels as hp
from sparktap.dashboards import panels as p
from sparktap.dashboards import streaming_panels as s
from sparktap.dashboards import table_panels as tp
from sparktap.dashboards.builders import Grid, Json, dashboard, dashboard_link, query_variable
from sparktap.dashboards.config import DEFAULT_CONFIG, GrafanaConfig
from sparktap.dashboards.defaults import (
    APPLICATION_UID,
    CLUSTER_UID,
    CONNECT_UID,
    DASHBOARD_SLUGS,
    FLEET_UID,
    OVERVIEW_UID,
    STREAMING_UID,
    TABLES_UID,
)
from sparktap.detection.sql import Scope, SqlContext, identifier_match, in_variable


def _ctx(cfg: GrafanaConfig, app: bool) -> SqlContext:
    return SqlContext(cfg.database, cfg.clickhouse_version, Scope.grafana(app=app))


def cluster_variable(cfg: GrafanaConfig, multi: bool = True) -> Json:
    ctx = _ctx(cfg, False)
    return query_variable(
        "cluster",
        "Cluster",
        "Spark clusters (spark.sparktap.cluster) with applications in the time range",
        f"SELECT DISTINCT cluster FROM {ctx.view('app_start')} WHERE event_time <= $__toTime "
        f"AND {identifier_match('cluster')} ORDER BY cluster",
        multi=multi,
        include_all=multi,
        datasource_uid=cfg.datasource_uid,
    )


def app_variable(cfg: GrafanaConfig) -> Json:
    ctx = _ctx(cfg, False)
    sql = (
        f"SELECT app_id FROM {ctx.view('app_start')} WHERE {in_variable('cluster', 'cluster')} "
        f"AND {identifier_match('app_id')} "
        f"AND event_time <= $__toTime AND app_id NOT IN (SELECT app_id FROM {ctx.view('app_end')} "
        "WHERE event_time < $__fromTime) GROUP BY app_id ORDER BY max(event_time) DESC LIMIT 1000"
    )
    return query_variable(
        "app",
        "Application",
        "Spark application id (alive during the time range, newest first)",
        sql,
        multi=False,
        include_all=False,
        datasource_uid=cfg.datasource_uid,
    )


def _links(current: str) -> list[Json]:
    titles = {
        OVERVIEW_UID: "sparktap overview",
        APPLICATION_UID: "Application",
        CLUSTER_UID: "Cluster",
        STREAMING_UID: "Streaming",
        FLEET_UID: "Fleet and cost",
        CONNECT_UID: "Spark Connect",
        TABLES_UID: "Tables",
    }
    return [dashboard_link(t, uid, DASHBOARD_SLUGS[uid]) for uid, t in titles.items() if uid != current]


def _own_datasource(items: list[Json], cfg: GrafanaConfig) -> list[Json]:
    """Point every panel and query at the configured datasource uid."""
    for item in items:
        if "datasource" in item:
            item["datasource"]["uid"] = cfg.datasource_uid
        for t in item.get("targets", []):
            t["datasource"]["uid"] = cfg.datasource_uid
    return items


def overview(cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    ctx, t = _ctx(cfg, False), cfg.thresholds
    grid = Grid().row("Findings")
    grid.add(*(p.findings_count(ctx, t, severity) for severity in ("critical", "warning", "info")))
    grid.add(p.applications_stat(ctx, width=4), p.findings_over_time(ctx, t, width=8))
    grid.add(p.findings_table(ctx, t, "Open findings"))
    grid.add(p.active_silences(ctx))
    grid.row("Applications").add(p.applications_table(ctx))
    grid.row("Listener and collector health")
    grid.add(hp.listener_losses(ctx), hp.sequence_gaps(ctx), hp.listener_queue(ctx))
    grid.add(hp.events_stored(ctx), hp.last_event(ctx))
    _own_datasource(grid.panels, cfg)
    return dashboard(
        OVERVIEW_UID,
        "sparktap / Overview",
        "Spark applications, detection findings by severity, and the health of the listeners and the collector.",
        grid,
        [cluster_variable(cfg)],
        _links(OVERVIEW_UID),
    )


def application(cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    ctx, t = _ctx(cfg, True), cfg.thresholds
    grid = Grid().row("Summary")
    grid.add(a.app_duration(ctx), a.app_summary(ctx), a.app_bytes(ctx))
    grid.add(p.findings_table(ctx, t, live=True))
    grid.row("Stages").add(a.stage_timeline(ctx))
    grid.add(a.task_duration_quantiles(ctx), a.task_duration_histogram(ctx))
    grid.add(a.skew_per_stage(ctx), a.gc_and_failures(ctx))
    grid.add(a.shuffle_locality(ctx), a.spills(ctx))
    grid.row("Adaptive query execution and SQL")
    grid.add(a.aqe_plan_changes(ctx), a.aqe_shuffle_reads(ctx))
    grid.add(a.sql_executions(ctx))
    grid.row("Plans: estimates and codegen").add(s.plan_estimates(ctx), s.codegen_coverage(ctx))
    grid.add(s.native_per_query(ctx))
    _own_datasource(grid.panels, cfg)
    return dashboard(
        APPLICATION_UID,
        "sparktap / Application",
        "One Spark application: its findings, stage timeline, task-time distribution and skew per stage, shuffle "
        "locality, spills, AQE decisions, SQL executions, the optimizer's estimates vs actual rows, codegen "
        "coverage and native-engine operators per query.",
        grid,
        [cluster_variable(cfg, multi=False), app_variable(cfg)],
        _links(APPLICATION_UID),
    )


def cluster(cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    ctx, t = _ctx(cfg, False), cfg.thresholds
    grid = Grid().row("Load")
    grid.add(p.applications_started(ctx), p.task_time_by_app(ctx), p.shuffle_by_app(ctx))
    grid.add(p.executors(ctx), p.failed_tasks(ctx))
    grid.row("Applications").add(p.top_applications(ctx))
    grid.row("Findings").add(p.findings_by_rule(ctx, t, width=8), p.findings_over_time(ctx, t))
    grid.add(p.findings_table(ctx, t))
    grid.row("Listeners").add(hp.listener_by_app(ctx))
    _own_datasource(grid.panels, cfg)
    return dashboard(
        CLUSTER_UID,
        "sparktap / Cluster",
        "One or more clusters: applications started, task time and shuffle by application, executor churn, "
        "failures, the heaviest applications, findings per rule and listener health.",
        grid,
        [cluster_variable(cfg)],
        _links(CLUSTER_UID),
    )


def streaming(cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    ctx, t = _ctx(cfg, False), cfg.thresholds
    grid = Grid().row("Queries").add(s.streaming_findings(ctx, t))
    grid.add(s.streaming_queries(ctx))
    grid.row("Throughput").add(s.streaming_rates(ctx), s.batch_duration(ctx))
    grid.add(s.source_backlog(ctx))
    grid.row("State").add(s.state_rows(ctx), s.state_memory(ctx))
    _own_datasource(grid.panels, cfg)
    return dashboard(
        STREAMING_UID,
        "sparktap / Streaming",
        "Structured Streaming queries: their findings, runs, input vs processed rows per second, batch duration "
        "vs the interval between batches, source backlog, and state rows and memory.",
        grid,
        [cluster_variable(cfg)],
        _links(STREAMING_UID),
    )


def fleet(cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    ctx, cost = _ctx(cfg, False), cfg.cost
    grid = Grid().row("Cost")
    grid.add(f.cost_over_time(ctx, cost, "team", "Cost by team"), f.cost_over_time(ctx, cost, "user", "Cost by user"))
    grid.add(f.cost_by_application(ctx, cost))
    grid.row("Idle executors")
    grid.add(
        f.idle_over_time(ctx, cost, "team", "Idle core-hours by team"),
        f.idle_over_time(ctx, cost, "app_name", "Idle core-hours by application"),
    )
    grid.add(f.top_wasters(ctx, cost))
    grid.row("Memory").add(f.memory_headroom(ctx))
    _own_datasource(grid.panels, cfg)
    return dashboard(
        FLEET_UID,
        "sparktap / Fleet and cost",
        "What each team's Spark spend costs and how much of it is wasted: cost and idle executor core-hours by team, "
        "user and application over time, the top wasters, and memory headroom per recurring job.",
        grid,
        [cluster_variable(cfg)],
        _links(FLEET_UID),
    )


def spark_connect(cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    ctx, t = _ctx(cfg, False), cfg.thresholds
    grid = Grid().row("Who ran what").add(c.operations_by_user(ctx, t))
    grid.add(c.operations_table(ctx))
    grid.row("Findings").add(c.findings_by_who(ctx, t))
    _own_datasource(grid.panels, cfg)
    return dashboard(
        CONNECT_UID,
        "sparktap / Spark Connect",
        "Who ran what on shared Spark Connect servers: operations by user (duration, rows, findings), each "
        "operation, and the findings with their user, team, job tags, session and operation.",
        grid,
        [cluster_variable(cfg), c.user_variable(cfg), c.team_variable(cfg)],
        _links(CONNECT_UID),
    )


def tables(cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    ctx = _ctx(cfg, False)
    grid = Grid().row("Tables of the fleet").add(tp.top_by_files(ctx))
    grid.add(tp.top_by_small_share(ctx), tp.top_by_bytes_read(ctx))
    grid.row("One table").add(tp.table_trend(ctx), tp.table_writers(ctx))
    _own_datasource(grid.panels, cfg)
    return dashboard(
        TABLES_UID,
        "sparktap / Tables",
        "The tables Spark reads and writes across the fleet (issue 42): the top tables by files written, by "
        "small-file share and by bytes read, and one table's files per day and writers (the per-table rollup).",
        grid,
        [cluster_variable(cfg), tp.table_variable(ctx, cfg.datasource_uid)],
        _links(TABLES_UID),
    )


def all_dashboards(cfg: GrafanaConfig = DEFAULT_CONFIG) -> list[Json]:
    return [overview(cfg), application(cfg), cluster(cfg), streaming(cfg), spark_connect(cfg), fleet(cfg), tables(cfg)]


def panels_of(board: Json) -> Iterator[Json]:
    """Every panel (rows' children too)."""
    for item in board.get("panels", []):
        yield item
        yield from item.get("panels", [])


def panel_queries(board: Json) -> Iterator[tuple[str, str]]:
    """(title, SQL) of every panel query and query variable of a dashboard, macros and variables unexpanded."""
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable ${variable['name']}", variable["query"]
    for item in panels_of(board):
        for t in item.get("targets", []):
            yield item["title"], t["rawSql"]

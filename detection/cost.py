"""``sparktap cost``: cost and utilisation of the applications of the last N hours or days, by team, user,
application name (the recurring job) or UTC day (``--per-day``: each group day by day), as a table or JSON
(``--format json``; issue 25).
By day, an application that runs over midnight is split across the days by the core-time and memory its executors
held on each (``utilisation.usage_by_day``). The SQL is ``cost_sql.cost_sql`` (``utilisation.cost_query``, with a
Connect server's cost split between its users and teams from the team mapping); the prices are ``SPARKTAP_COST__*``
(``prices.py``).

Prices are the platform's: a cluster with usage whose core-hour price is 0, or that has no price of its own while
others do, is flagged (``price_warnings``: a line on stderr, ``price_warnings`` in JSON); ``--strict`` then exits 3."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import click

from sparktap.detection.cli_options import format_option
from sparktap.detection.cost_sql import cost_sql
from sparktap.detection.findings import QueryFn, parse_since, terminal_text, text_table
from sparktap.detection.macros import expand
from sparktap.detection.prices import CostSettings
from sparktap.detection.sql import DEFAULT_DATABASE, Scope, SqlContext
from sparktap.detection.teams import TRUSTED_TAGS_WARNING, TeamRules
from sparktap.detection.utilisation import cost_query
from sparktap.errors import SparktapError
from sparktap.schemas.ddl import LATEST_VERSION

BY = ("team", "user", "app", "day")


@dataclass(frozen=True)
class CostRow:
    """One group's applications, core-hours held and used, memory held, and cost."""

    key: str
    applications: int
    core_hours: float
    busy_core_hours: float
    idle_core_hours: float
    idle_share: float
    gib_hours: float
    core_cost: float
    memory_cost: float
    cost: float
    day: str = ""
    """With ``--per-day``: the UTC day (``YYYY-MM-DD``) of these figures."""


def cost_rows(
    query: QueryFn,
    by: str,
    from_ms: int,
    to_ms: int,
    *,
    prices: CostSettings,
    database: str = DEFAULT_DATABASE,
    version: tuple[int, ...] = LATEST_VERSION,
    clusters: tuple[str, ...] = (),
    per_day: bool = False,
    teams: TeamRules | None = None,
) -> list[CostRow]:
    """The cost of the applications started in [from_ms, to_ms], grouped ``by`` team, user, app or day (and day,
    with ``per_day``); most costly first (by day: day by day). By user, a Connect server's cost goes to its Connect
    users; by team, with ``teams``, to the teams of the mapping (``cost_sql``)."""
    ctx = SqlContext(database, version, Scope.of(clusters))
    rows = query(expand(cost_sql(ctx, by, prices, per_day and by != "day", teams), from_ms, to_ms))
    return [
        CostRow(
            key=str(r["key"]),
            applications=int(r["applications"]),
            day=str(r.get("day", "")),
            **{f: float(r[f]) for f in CostRow.__dataclass_fields__ if f not in ("key", "applications", "day")},
        )
        for r in rows
    ]


@dataclass(frozen=True)
class PriceWarning:
    """A cluster with usage whose cost is not what the platform priced: ``zero`` (its core-hour price is 0) or
    ``missing`` (it has no price of its own while other clusters do: the default was used)."""

    cluster: str
    problem: str
    core_hours: float
    core_hour_price: float

    def line(self, currency: str) -> str:
        why = (
            "its core-hour price is 0, so its cost shows as 0"
            if self.problem == "zero"
            else f"it has no price of its own in SPARKTAP_COST__CLUSTERS: the default {self.core_hour_price:g} "
            f"{currency} per core-hour was used"
        )
        return (
            f'warning: cluster="{terminal_text(self.cluster)}" used {self.core_hours:.2f} core-h but {why}; set its '
            'price in SPARKTAP_COST__CLUSTERS (\'{"<cluster>": {"core_hour": …}}\')'
        )


def price_warnings(
    query: QueryFn, from_ms: int, to_ms: int, *, prices: CostSettings, database: str, version: tuple[int, ...],
    clusters: tuple[str, ...] = (),
) -> list[PriceWarning]:  # fmt: skip
    """The clusters with usage in [from_ms, to_ms] priced at 0 or not priced while others are."""
    ctx = SqlContext(database, version, Scope.of(clusters))
    out = []
    for row in query(expand(cost_query(ctx, "cluster", prices), from_ms, to_ms)):
        cluster, core_hours = str(row["key"]), float(row["core_hours"])
        if core_hours <= 0 and float(row["gib_hours"]) <= 0:
            continue
        price, own = prices.core_hour_of(cluster)
        if price == 0 or (prices.clusters and not own):
            out.append(PriceWarning(cluster, "zero" if price == 0 else "missing", core_hours, price))
    return sorted(out, key=lambda w: w.cluster)


def money(value: float) -> str:
    """To the cent, half away from zero (what an invoice shows)."""
    cents = int(abs(value) * 100 + 0.5 + 1e-9)
    return f"{'-' if value < 0 else ''}{cents // 100}.{cents % 100:02d}"


def render_table(rows: list[CostRow], by: str, currency: str, per_day: bool = False) -> str:
    day: tuple[str, ...] = ("day",) if per_day else ()
    headers = (*day, by, "apps", "core-h", "busy core-h", "idle", "GiB-h", f"cost ({currency})")
    body = [
        (
            *((r.day,) if per_day else ()),
            r.key or "(none)",
            str(r.applications),
            f"{r.core_hours:.2f}",
            f"{r.busy_core_hours:.2f}",
            f"{r.idle_share:.0%}",
            f"{r.gib_hours:.2f}",
            money(r.cost),
        )
        for r in rows
    ]
    total = sum(r.cost for r in rows)
    body.append((*("" for _ in day), "total", str(sum(r.applications for r in rows)), "", "", "", "", money(total)))
    return text_table(body, headers)


def render_json(
    rows: list[CostRow],
    by: str,
    since: str,
    prices: CostSettings,
    per_day: bool = False,
    warnings: list[PriceWarning] | None = None,
) -> str:
    return json.dumps(
        {
            "by": by,
            "per_day": per_day,
            "since": since,
            "currency": prices.currency,
            "rows": [{**asdict(r), "cost_rounded": money(r.cost)} for r in rows],
            "total_cost": money(sum(r.cost for r in rows)),
            "price_warnings": [asdict(w) for w in warnings or []],
        },
        sort_keys=True,
    )


@click.command("cost")
@click.option("--since", default="7d", show_default=True, help="Applications started this recently: 2h, 7d, 1w.")
@click.option("--by", "by", type=click.Choice(BY), default="team", show_default=True, help="Group by (day: UTC).")
@click.option("--per-day", is_flag=True, help="Each group day by day (UTC), applications split across midnight.")
@click.option("--cluster", "clusters", multiple=True, help="Only this cluster (repeatable).")
@format_option("table: one line per group and a total; json: one JSON document.")
@click.option("--json", "as_json", is_flag=True, hidden=True, help="Deprecated: --format json.")
@click.option("--storage-url", default=None, help="clickhouse://… or chdb:///dir [SPARKTAP_CLICKHOUSE__URL].")
@click.option("--strict", is_flag=True, help="Exit with status 3 when a cluster with usage is priced 0 or not priced.")
@click.pass_context
def cost_command(
    ctx: click.Context,
    since: str,
    by: str,
    per_day: bool,
    clusters: tuple[str, ...],
    fmt: str,
    as_json: bool,
    storage_url: str | None,
    strict: bool,
) -> None:
    """Cost and idle core-hours of the applications started in the last --since, by team, user, application name or
    day. By day, an application running over midnight counts on each day with what its executors held on it.

    Prices: SPARKTAP_COST__CORE_HOUR, SPARKTAP_COST__GIB_HOUR, per cluster SPARKTAP_COST__CLUSTERS (JSON). Teams:
    the team mapping SPARKTAP_COST__TEAMS (JSON), else the routing file's teams:, else the team tags as set. A
    Spark Connect server's cost goes to its Connect users by their task time."""
    from sparktap.detection.settings import load_detection_settings
    from sparktap.store import open_storage

    if as_json:  # every command's machine-readable output is --format json (as `sparktap findings`)
        click.echo("warning: --json is deprecated and will be removed; use --format json", err=True)
        fmt = "json"
    try:
        seconds = parse_since(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    settings = load_detection_settings(**({"clickhouse": {"url": storage_url}} if storage_url else {}))
    prices: CostSettings = settings.cost
    teams = _team_mapping(settings) if by == "team" else None
    if by == "team" and teams is None:
        click.echo(TRUSTED_TAGS_WARNING, err=True)
    target = settings.clickhouse.target()
    try:
        storage = open_storage(target)
    except SparktapError as exc:
        if target.capabilities.embedded:
            raise SparktapError(
                f"{exc}; a running collector holds this chDB store: stop it to read costs, or point "
                "SPARKTAP_CLICKHOUSE__URL at a ClickHouse server"
            ) from exc
        raise
    now = int(time.time() * 1000)
    window = (now - int(seconds * 1000), now + 60_000)
    with storage:
        version = storage.version()
        rows = cost_rows(
            storage.query, by, *window, prices=prices, database=storage.database, version=version,
            clusters=clusters, per_day=per_day, teams=teams,
        )  # fmt: skip
        warnings = price_warnings(
            storage.query, *window, prices=prices, database=storage.database, version=version, clusters=clusters
        )
    if not prices.priced:
        click.echo(
            "note: no prices set, so every cost is 0; set SPARKTAP_COST__CORE_HOUR and SPARKTAP_COST__GIB_HOUR "
            '(per cluster: SPARKTAP_COST__CLUSTERS=\'{"prod": {"core_hour": 0.05}}\')',
            err=True,
        )
    for warning in warnings:
        click.echo(warning.line(prices.currency), err=True)
    if fmt == "json":
        click.echo(render_json(rows, by, since, prices, per_day and by != "day", warnings))
    elif rows:
        click.echo(render_table(rows, by, prices.currency, per_day and by != "day"))
    else:
        click.echo(f"no applications started in the last {since}", err=True)
    if strict and warnings:
        ctx.exit(3)


def _team_mapping(settings: Any) -> TeamRules | None:
    """The team mapping of ``--by team``: the cost settings', else the routing file's (the alerter's), else none."""
    if settings.cost.teams is not None:
        return tuple(settings.cost.teams)
    if settings.alerts.routing_path is not None:
        from sparktap.detection.routing_file import load_routing

        return load_routing(settings.alerts.routing_path).teams
    return None


COMMANDS: list[Any] = [cost_command]

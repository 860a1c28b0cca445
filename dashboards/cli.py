"""Commands: ``sparktap grafana export DIR``, ``sparktap grafana deploy --url … --token …``, ``sparktap report``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click
from pydantic import SecretStr

from sparktap.errors import ConfigError

if TYPE_CHECKING:
    from sparktap.dashboards.config import GrafanaConfig
    from sparktap.dashboards.datasource import ClickHouseEndpoint
    from sparktap.dashboards.export import Layout
    from sparktap.detection.routing import Routing
    from sparktap.detection.settings import DetectionSettings


def _config(
    database: str | None, min_severity: str | None, channels: str | None, runbook_base: str | None
) -> tuple[DetectionSettings, GrafanaConfig]:
    from sparktap.dashboards.config import CHANNELS, GrafanaConfig
    from sparktap.detection.settings import load_detection_settings

    settings = load_detection_settings()
    target = settings.clickhouse.target()
    options: dict[str, Any] = {
        "database": database or target.database,
        "thresholds": settings.alerts.thresholds,
        "min_severity": min_severity or settings.alerts.min_severity,
        "cost": settings.cost,
    }
    if channels is not None:
        options["channels"] = tuple(c.strip() for c in channels.split(",") if c.strip())
        unknown = set(options["channels"]) - set(CHANNELS)
        if unknown:
            raise ConfigError(f"unknown channel(s) {sorted(unknown)} in --channels: use {', '.join(CHANNELS)}")
    if runbook_base:
        options["runbook_base"] = runbook_base.rstrip("/")
    return settings, GrafanaConfig(**options)


def _endpoint(clickhouse_url: str | None, settings: DetectionSettings) -> ClickHouseEndpoint:
    from sparktap.dashboards.datasource import ClickHouseEndpoint

    url = clickhouse_url or settings.clickhouse.url.get_secret_value()
    if not url.startswith(("clickhouse://", "clickhouses://")):
        if clickhouse_url:
            raise ConfigError(
                "--clickhouse-url must be clickhouse://user@host:9000/db: Grafana reads a ClickHouse "
                "server, not an embedded chDB directory"
            )
        return ClickHouseEndpoint()
    try:
        return ClickHouseEndpoint.from_url(url)
    except ValueError as exc:
        raise ConfigError(f"invalid ClickHouse URL for the Grafana datasource: {exc}") from exc


def _with_teams(cfg: GrafanaConfig, routing: Routing | None) -> GrafanaConfig:
    """The routing file's team mapping into the alert rules: their ``team`` label is then its owner."""
    if routing is None or routing.teams is None:
        return cfg
    return dataclasses.replace(cfg, teams=routing.teams)


def _routing(path: Path | None) -> Routing | None:
    """The routing file, checked; Grafana needs its ``default:`` (one receiver for what no route takes)."""
    if path is None:
        return None
    from sparktap.detection.routing import load_routing

    routing = load_routing(path)
    if routing.default is None:
        raise ConfigError(
            f'routing file path="{path}" has no default: route; Grafana needs one receiver for what no route '
            "takes: add default: {channels: [...]}"
        )
    return routing


_common = [
    click.option(
        "--clickhouse-url",
        envvar="SPARKTAP_GRAFANA_CLICKHOUSE_URL",
        help="ClickHouse server Grafana reads (default: SPARKTAP_CLICKHOUSE__URL when it is a server URL).",
    ),
    click.option("--database", help="Database of the sparktap tables (default: from SPARKTAP_CLICKHOUSE__URL)."),
    click.option(
        "--min-severity",
        type=click.Choice(["info", "warning", "critical"]),
        help="Lowest finding severity the alert rules fire for (default: SPARKTAP_ALERTS__MIN_SEVERITY).",
    ),
    click.option("--channels", help="Comma-separated chat channels of the contact points: slack,teams,webhook."),
    click.option("--runbook-base", help="URL of docs/runbook.md the alerts' runbook_url point into."),
]


def _with_common(fn: Any) -> Any:
    for option in reversed(_common):
        fn = option(fn)
    return fn


@click.group("grafana")
def grafana() -> None:
    """Grafana dashboards, alert rules, contact points and datasource, as code."""


@grafana.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--dashboards-path",
    default=None,
    help="Where Grafana will find the dashboard JSON files (default: /etc/grafana/provisioning/dashboards/sparktap).",
)
@click.option(
    "--no-policies",
    is_flag=True,
    help="Leave out the notification policy tree (file provisioning replaces the organisation's whole tree).",
)
@click.option(
    "--layout",
    type=click.Choice(["provisioning", "sidecar"]),
    default="provisioning",
    show_default=True,
    help="sidecar: dashboards/*.json flat and no dashboard provider (Grafana Helm chart sidecar).",
)
@click.option(
    "--routing",
    "routing_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The alerter's routing file: contact points and policies route for route "
    "(default: SPARKTAP_ALERTS__ROUTING_PATH when set).",
)
@_with_common
def export_command(
    directory: Path,
    dashboards_path: str | None,
    no_policies: bool,
    layout: str,
    routing_path: Path | None,
    clickhouse_url: str | None,
    database: str | None,
    min_severity: str | None,
    channels: str | None,
    runbook_base: str | None,
) -> None:
    """Write provisioning files (datasource, dashboards, alerting) under DIRECTORY."""
    from sparktap.dashboards.export import DEFAULT_DASHBOARDS_PATH, export, files

    settings, cfg = _config(database, min_severity, channels, runbook_base)
    endpoint = _endpoint(clickhouse_url, settings)
    path = dashboards_path or DEFAULT_DASHBOARDS_PATH
    routing = _routing(routing_path or settings.alerts.routing_path)
    cfg = _with_teams(cfg, routing)
    chosen = cast("Layout", layout)  # click.Choice of the same names
    written = export(directory, cfg, endpoint, path, not no_policies, chosen, routing)
    total = len(files(cfg, endpoint, path, not no_policies, chosen, routing))
    click.echo(
        f"wrote {len(written)} of {total} provisioning files under {directory}"
        f"{' (the others were up to date)' if len(written) < total else ''}"
    )


@grafana.command("deploy")
@click.option("--url", required=True, envvar="SPARKTAP_GRAFANA_URL", help="Grafana base URL, e.g. https://grafana:3000")
@click.option("--token", required=True, envvar="SPARKTAP_GRAFANA_TOKEN", help="Service-account token (Admin role).")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds per HTTP request.")
@click.option(
    "--routing",
    "routing_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The alerter's routing file: one contact point per route (URLs read from its variables / files) and one "
    "policy per route (default: SPARKTAP_ALERTS__ROUTING_PATH when set).",
)
@_with_common
def deploy_command(
    url: str,
    token: str,
    timeout: float,
    routing_path: Path | None,
    clickhouse_url: str | None,
    database: str | None,
    min_severity: str | None,
    channels: str | None,
    runbook_base: str | None,
) -> None:
    """Create or update folder, datasource, dashboards, alert rules, contact points and policy (idempotent)."""
    from sparktap.dashboards.deploy import deploy, redact_url

    settings, cfg = _config(database, min_severity, channels, runbook_base)
    endpoint = _endpoint(clickhouse_url, settings)
    alerts = settings.alerts
    urls = {
        name: value
        for name, value in (
            ("slack", alerts.slack_webhook_url),
            ("teams", alerts.teams_webhook_url),
            ("webhook", alerts.webhook_url),
        )
        if value is not None and name in cfg.channels
    }
    routing = _routing(routing_path or alerts.routing_path)
    cfg = _with_teams(cfg, routing)
    report = deploy(url, SecretStr(token), cfg, endpoint, urls, timeout, routing)
    click.echo(f"deployed to {redact_url(url)}: {report.summary()}")


@grafana.command("silences")
@click.option("--storage-url", default=None, help="clickhouse://… or chdb:///dir [SPARKTAP_CLICKHOUSE__URL].")
def silences_command(storage_url: str | None) -> None:
    """The silences in force as Grafana Alertmanager bodies, one JSON per line, for
    POST /api/alertmanager/grafana/api/v2/silences (Grafana does not provision silences from files)."""
    import json

    from sparktap.dashboards.routing_export import silence_bodies
    from sparktap.detection.silence_cli import open_store
    from sparktap.detection.silences import SilenceStore

    with open_store(storage_url) as storage:
        active = SilenceStore.of(storage).active()
    for body in silence_bodies(active):
        click.echo(json.dumps(body, sort_keys=True, ensure_ascii=False))


COMMANDS: list[click.Command] = [grafana]

"""Commands: ``sparktap silence add/list/expire`` (silences in ClickHouse, ``silences.py``) and
``sparktap alerts check-routes FILE`` (the routing file checked offline, ``routing.py``)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click

from sparktap.errors import SparktapError

_STORAGE_URL = click.option(
    "--storage-url", default=None, help="clickhouse://… or chdb:///dir [SPARKTAP_CLICKHOUSE__URL]."
)


def _when(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def open_store(storage_url: str | None) -> Any:
    from sparktap.detection.settings import load_detection_settings
    from sparktap.store import open_storage

    settings = load_detection_settings(**({"clickhouse": {"url": storage_url}} if storage_url else {}))
    target = settings.clickhouse.target()
    try:
        return open_storage(target)
    except SparktapError as exc:
        if target.capabilities.embedded:
            raise SparktapError(
                f"{exc}. A chDB store is held by its collector: stop it to edit silences, or keep the store on a "
                "ClickHouse server (SPARKTAP_CLICKHOUSE__URL=clickhouse://…)"
            ) from exc
        raise


def _with_table(storage: Any) -> None:
    """Create ``alert_silences`` and its audit ``alert_silenced`` when the store predates them (the collector's
    schema step creates them too)."""
    from sparktap.schemas.ddl import SILENCED_TABLE, SILENCES_TABLE

    db = storage.database.replace("\\", "\\\\").replace("'", "\\'")
    rows = storage.query(
        f"SELECT name FROM system.tables WHERE database = '{db}' AND name IN ('{SILENCES_TABLE}', '{SILENCED_TABLE}')"  # noqa: S608
    )
    have = {str(r["name"]) for r in rows}
    schema = storage.schema()
    if SILENCES_TABLE not in have:
        storage.command(schema.create_silences())
    if SILENCED_TABLE not in have:
        storage.command(schema.create_silenced())


@click.group("silence")
def silence() -> None:
    """Mute findings for a while: every alerter replica reads the silences from ClickHouse."""


@silence.command("add")
@click.option("--rule", default="", help="Only this detection rule (e.g. data_skew).")
@click.option("--app-name", default="", help="Applications whose name matches this glob (e.g. 'nightly-*').")
@click.option("--cluster", default="", help="Only this cluster.")
@click.option("--team", default="", help="Only this team (the finding's team or one of its job tags).")
@click.option("--user", default="", help="Only this user.")
@click.option("--for", "duration", default="24h", show_default=True, help="How long: 30m, 24h, 7d …")
@click.option("--reason", required=True, help="Why (shown in `silence list` and on the dashboards).")
@click.option(
    "--author",
    default="",
    help="Your name, recorded beside the OS account running this (which is always recorded): 'bob (as alice)'.",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Allow a silence that matches every finding (no --rule, and no --app-name or one like '*').",
)
@_STORAGE_URL
def silence_add(
    rule: str,
    app_name: str,
    cluster: str,
    team: str,
    user: str,
    duration: str,
    reason: str,
    author: str,
    everything: bool,
    storage_url: str | None,
) -> None:
    """Silence matching findings (at least --rule or a narrowing --app-name, or --all) from now for --for."""
    from sparktap.detection.findings import terminal_text
    from sparktap.detection.silences import SilenceStore

    with open_store(storage_url) as storage:
        _with_table(storage)
        made = SilenceStore.of(storage).add(
            rule=rule,
            app_name=app_name,
            cluster=cluster,
            team=team,
            user=user,
            duration=duration,
            reason=reason,
            author=author,
            everything=everything,
        )
    what = terminal_text(made.describe()) or "everything"
    click.echo(f"silence {made.id}: {what} until {_when(made.ends_at_ms)} by {terminal_text(made.created_by)}")


@silence.command("list")
@click.option("--all", "everything", is_flag=True, help="Expired silences too.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_STORAGE_URL
def silence_list(everything: bool, fmt: str, storage_url: str | None) -> None:
    """The silences in force (with --all: every silence)."""
    from sparktap.detection.findings import text_table
    from sparktap.detection.silences import SilenceStore

    with open_store(storage_url) as storage:
        _with_table(storage)
        store = SilenceStore.of(storage)
        found = store.all() if everything else store.active()
    if fmt == "json":
        for s in found:
            click.echo(json.dumps(s.to_dict(), sort_keys=True, ensure_ascii=False))
        return
    if not found:
        click.echo("no silences" + ("" if everything else " in force"), err=True)
        return
    rows = [(s.id, s.describe(), _when(s.starts_at_ms), _when(s.ends_at_ms), s.created_by, s.reason) for s in found]
    click.echo(text_table(rows, ("id", "matches", "from", "until", "by", "reason")))


@silence.command("expire")
@click.argument("silence_id")
@_STORAGE_URL
def silence_expire(silence_id: str, storage_url: str | None) -> None:
    """End a silence now: its findings are sent at the alerter's next pass."""
    from sparktap.detection.silences import SilenceStore

    with open_store(storage_url) as storage:
        _with_table(storage)
        ended = SilenceStore.of(storage).expire(silence_id)
    click.echo(f"silence {ended.id} ended at {_when(ended.ends_at_ms)}")


@click.group("alerts")
def alerts() -> None:
    """The built-in alerter's configuration."""


@alerts.command("check-routes")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option(
    "--secrets",
    is_flag=True,
    help="Also read every channel's URL (its environment variable or file), as the alerter does at start.",
)
def check_routes(path: str, secrets: bool) -> None:
    """Check a routing file offline: one line per problem, with its place in the file; exit 2 when bad."""
    from sparktap.detection.routing import Router, load_routing

    routing = load_routing(path)
    if secrets:
        Router.build(routing, [], 3600.0)
    default = (
        f"default → {', '.join(routing.default.channels)}"
        if routing.default
        else "no default: route (the SPARKTAP_ALERTS__*_URL channels take what no route matches)"
    )
    teams = f", {len(routing.teams)} team rule(s)" if routing.teams is not None else ""
    click.echo(
        f"{path}: {len(routing.routes)} route(s), {len(routing.channels)} channel(s), "
        f"{len(routing.handles)} handle(s){teams}; {default}"
    )


@alerts.command("schema")
def routing_schema_command() -> None:
    """Print the routing file's JSON Schema (for editors: `# yaml-language-server: $schema=routing.schema.json`)."""
    from sparktap.detection.routing_file import routing_schema_text

    click.echo(routing_schema_text(), nl=False)


COMMANDS: list[click.Command] = [silence, alerts]

"""Commands: ``sparktap alert``, the built-in alerter (``alerter.py``), and ``sparktap findings``, the findings in a
terminal (or a pipeline: JSON lines, and an exit status to gate on)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

import click

from sparktap.detection import silence_cli
from sparktap.detection.cli_options import format_option
from sparktap.errors import SparktapError

if TYPE_CHECKING:
    from sparktap.detection.rule import Severity


@click.command("alert")
@click.option("--once", is_flag=True, help="Evaluate once, send, and exit.")
@click.option(
    "--interval",
    type=float,
    default=None,
    help="Seconds between evaluations (default: SPARKTAP_ALERTS__INTERVAL_SECONDS).",
)
def alert_command(once: bool, interval: float | None) -> None:
    """The built-in alerter: evaluate the detection SQL and notify Slack / Teams / a webhook.

    On a ClickHouse server (SPARKTAP_CLICKHOUSE__URL) it follows the collectors' inserts and evaluates the
    applications that just got rows at once, plus a full pass every interval (re-notifies, resolves). In embedded
    mode (chDB) the collector holds the store and runs the alerter itself when SPARKTAP_ALERTS__* channels are set:
    this command is then not needed."""
    from sparktap.detection.alerter import Alerter, serve_metrics
    from sparktap.detection.settings import load_detection_settings
    from sparktap.detection.teams import TRUSTED_TAGS_WARNING
    from sparktap.store import open_storage

    settings = load_detection_settings()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    alerts = settings.alerts if interval is None else settings.alerts.model_copy(update={"interval_seconds": interval})
    target = settings.clickhouse.target()
    try:
        storage = open_storage(target)
    except SparktapError as exc:
        if target.capabilities.embedded:
            raise SparktapError(
                f"{exc}. In embedded mode the collector process owns the store and runs the "
                "alerter itself (SPARKTAP_ALERTS__* settings); run `sparktap alert` against a "
                "ClickHouse server instead"
            ) from exc
        raise
    with storage:
        alerter = Alerter.from_storage(storage, alerts)
        if alerter.router.teams is None:
            click.echo(TRUSTED_TAGS_WARNING, err=True)
        if once:
            report = alerter.evaluate()
            click.echo(report.summary())
            if report.error:
                raise SparktapError(f"alert evaluation failed: {report.error}")
            return
        stop = threading.Event()

        def _stop(signum: int, frame: FrameType | None) -> None:
            stop.set()
            alerter.abort()  # a cycle under way sends no further message; each delivered one is in the state already

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        metrics = (
            serve_metrics(alerter, alerts.metrics_port, alerts.metrics_host)
            if alerts.metrics_port is not None
            else None
        )
        follow = alerts.event_driven and storage.target.capabilities.remote
        click.echo(
            f"sparktap alerter: every {alerts.interval_seconds:g} s on {storage.redacted_url}"
            + (
                f", and at once for new rows (new parts looked for every {alerts.follow_interval_seconds:g} s)"
                if follow
                else ""
            )
            + f", {len(alerter.channels)} channel(s)"
            + (
                f", {len(alerter.router.routing.routes)} route(s) from {alerts.routing_path}"
                if alerts.routing_path is not None
                else ""
            )
            + (f", /metrics and /healthz on port {alerts.metrics_port}" if metrics else "")
        )
        follower = alerter.follow(storage, stop) if follow else None
        try:
            alerter.run(stop)
        finally:
            stop.set()
            if follower is not None:  # its query under way ends before the store closes under it
                follower.join(60.0)  # bounded by the storage's own send/receive timeout
            if metrics is not None:
                metrics.shutdown()


_SEVERITY = click.Choice(["info", "warning", "critical"])


@click.command("findings")
@click.option("--app", "apps", multiple=True, metavar="APP_ID", help="Only this application (repeatable).")
@click.option("--cluster", "clusters", multiple=True, help="Only this cluster (repeatable).")
@click.option(
    "--user", "users", multiple=True, help="Only what this user ran: the Spark Connect user, else the Spark user."
)
@click.option(
    "--team", "teams", multiple=True, help="Only this team's: the application's team tag, or a job tag (repeatable)."
)
@click.option("--since", default="24h", show_default=True, help="Events this recent: 90s, 30m, 2h, 7d, 1w.")
@click.option("--min-severity", type=_SEVERITY, default="info", show_default=True)
@format_option("table: the demo's table; json: one JSON object per finding per line.")
@click.option(
    "--fail-on",
    type=_SEVERITY,
    default=None,
    help="Exit with status 3 when a finding at or above this severity exists (a scheduler's gate).",
)
@click.option("--storage-url", default=None, help="clickhouse://… or chdb:///dir [SPARKTAP_CLICKHOUSE__URL].")
@click.option(
    "--collector-url",
    default=None,
    metavar="http://HOST:PORT",
    help="Read a chDB store that a collector holds through that collector's /findings port, with the bearer token "
    "SPARKTAP_COLLECTOR__FINDINGS_TOKEN "
    "[http://127.0.0.1:SPARKTAP_COLLECTOR__METRICS_PORT when the store is held].",
)
@click.option(
    "--store",
    is_flag=True,
    help="Evaluate the --since range one day at a time and store every finding (all severities) in the findings "
    "table the overview and cluster findings panels read: after `sparktap import`, or on a fresh install.",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Also say, once per application, which rules could not look (inputs missing: shuffle or executor metrics, "
    "SQL plans).",
)
@click.pass_context
def findings_command(
    ctx: click.Context,
    apps: tuple[str, ...],
    clusters: tuple[str, ...],
    users: tuple[str, ...],
    teams: tuple[str, ...],
    since: str,
    min_severity: str,
    fmt: str,
    fail_on: str | None,
    storage_url: str | None,
    collector_url: str | None,
    store: bool,
    explain: bool,
) -> None:
    """List the findings of the detection rules, over any store (--store: store them for the dashboards).

    Exit status: 0, or 3 with --fail-on when a finding at or above that severity exists (2: an error)."""
    import json

    from sparktap.detection.findings import FINDING_HEADERS, FindingsRequest, finding_row, text_table
    from sparktap.detection.settings import load_detection_settings
    from sparktap.detection.thresholds import SEVERITIES

    try:
        request = FindingsRequest(apps, clusters, since, cast("Severity", min_severity), users, teams)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    settings = load_detection_settings(**({"clickhouse": {"url": storage_url}} if storage_url else {}))
    if store:
        _store(settings, request)
        return
    found = [f for f in _findings(settings, request, collector_url) if request.matches(f)]
    if fmt == "json":
        for f in found:
            click.echo(json.dumps(f.to_dict(), sort_keys=True, ensure_ascii=False))
    elif found:
        rows = [(f"{f.app_name} ({f.app_id})" if f.app_name else f.app_id, *finding_row(f)) for f in found]
        if users or teams or any(f.session_id or f.team for f in found):  # who ran it: Connect users, teams
            who = [(*r[:1], _who(f), *r[1:]) for r, f in zip(rows, found, strict=True)]
            click.echo(text_table(who, ("application", "who", *FINDING_HEADERS)))
        else:
            click.echo(text_table(rows, ("application", *FINDING_HEADERS)))
    else:
        click.echo(f"no findings at or above {min_severity} in the last {since}", err=True)
    if explain:
        _explain(settings, request)
    if fail_on is not None and any(SEVERITIES.index(f.severity) >= SEVERITIES.index(fail_on) for f in found):
        ctx.exit(3)


def _store(settings: Any, request: Any) -> None:
    """``--store``: the backfill of the findings table (``detection/finding_store.py``), over the store itself."""
    import time

    from sparktap.detection.finding_store import FindingsStore
    from sparktap.detection.findings import Detector, parse_since
    from sparktap.detection.sql import Scope
    from sparktap.store import open_storage

    if request.users or request.teams:
        raise click.BadParameter("--store stores every finding of the range: leave out --user and --team")
    with open_storage(settings.clickhouse.target()) as storage:
        storage.ensure_schema(settings.clickhouse.retention_days)
        detector = Detector(
            storage.query,
            settings.alerts.thresholds,
            storage.database,
            storage.version(),
            Scope.of(request.clusters, request.apps),
            final_reads=storage.target.cluster is None,
        )
        now = int(time.time() * 1000)
        started = time.monotonic()

        def progress(start: int, end: int, n: int) -> None:
            day = time.strftime("%Y-%m-%d %H:%M", time.gmtime(start / 1000))
            click.echo(f"{day} UTC + {(end - start) / 3_600_000:.0f} h: {n} finding(s) stored", err=True)

        since_ms = int(parse_since(request.since) * 1000)
        total = FindingsStore(storage).backfill(detector, now - since_ms, now + 60_000, now, progress)
    click.echo(f"stored {total} finding(s) of the last {request.since} in {time.monotonic() - started:.1f} s")


def _explain(settings: Any, request: Any) -> None:
    """``--explain``: the blind spots of the applications in scope (``detection/blind.py``), one line each."""
    import time

    from sparktap.detection.blind import explained
    from sparktap.detection.findings import parse_since
    from sparktap.detection.sql import Scope, SqlContext
    from sparktap.store import open_storage

    with open_storage(settings.clickhouse.target()) as storage:
        scope = Scope.of(request.clusters, request.apps)
        sql = SqlContext(storage.database, storage.version(), scope, final_reads=storage.target.cluster is None)
        for line in explained(storage.query, sql, parse_since(request.since), int(time.time() * 1000)):
            click.echo(line)


def _who(f: Any) -> str:
    """'bob (team payments)', 'bob', 'team payments' or ''."""
    team = f"team {f.team}" if f.team else ""
    return f"{f.user} ({team})" if f.user and team else f.user or team


def _findings(settings: Any, request: Any, collector_url: str | None) -> list[Any]:
    """Through the store, or — a chDB store held by a collector — through that collector's ``/findings``."""
    from sparktap.detection.findings import find
    from sparktap.store import open_storage

    target = settings.clickhouse.target()
    if collector_url is None:
        try:
            storage = open_storage(target)
        except SparktapError as exc:
            port = settings.collector.findings_port
            if not target.capabilities.embedded or not port:
                raise
            collector_url = f"http://127.0.0.1:{port}"
            held = str(exc)
        else:
            with storage:
                return find(
                    storage.query,
                    request,
                    database=storage.database,
                    version=storage.version(),
                    thresholds=settings.alerts.thresholds,
                    final_reads=storage.target.cluster is None,
                )
    else:
        held = "--collector-url given"
    return _through_collector(collector_url, request, held, settings.collector.findings_token)


def _through_collector(url: str, request: Any, why: str, token: Any) -> list[Any]:
    """``GET /findings`` with the bearer token (``SPARKTAP_COLLECTOR__FINDINGS_TOKEN``); a clamped ``since`` is
    said on stderr."""
    import json
    import urllib.error
    import urllib.request

    from sparktap.detection.findings import from_dict

    secret = "" if token is None else token.get_secret_value()
    if not secret:
        raise SparktapError(
            f"{why}; reading through the collector's /findings needs its bearer token: set "
            "SPARKTAP_COLLECTOR__FINDINGS_TOKEN to the collector's (or stop the collector to read the chDB directory)"
        )
    address = f"{url.rstrip('/')}/findings?{request.query_string()}"
    headers = {"Authorization": f"Bearer {secret}"}
    try:
        call = urllib.request.Request(address, headers=headers)  # noqa: S310 - an http(s) URL we were given
        with urllib.request.urlopen(call, timeout=120) as response:  # noqa: S310 - as above
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        hint = " (check SPARKTAP_COLLECTOR__FINDINGS_TOKEN)" if exc.code == 401 else ""
        raise SparktapError(f"the collector at {url} refused /findings (HTTP {exc.code}){hint}: {detail}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SparktapError(
            f"{why}; and no collector answered /findings at {url} ({exc}). Run `sparktap findings` on the "
            "collector's host with --collector-url http://HOST:PORT (its SPARKTAP_COLLECTOR__FINDINGS_PORT), or "
            "stop the collector to read the chDB directory directly"
        ) from exc
    if not isinstance(answer, dict) or not isinstance(answer.get("findings"), list):
        raise SparktapError(
            f"the collector at {url} answered /findings with an unexpected body; is it a sparktap collector?"
        )
    if answer.get("notice"):
        click.echo(f"note: {answer['notice']}", err=True)
    return [from_dict(r) for r in answer["findings"]]


def _cost_commands() -> list[click.Command]:
    from sparktap.detection.cost import COMMANDS as COST

    return list(COST)


COMMANDS: list[click.Command] = [alert_command, findings_command, *_cost_commands(), *silence_cli.COMMANDS]

"""``sparktap report APP_ID [-o report.html]``: the command."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sparktap.errors import ConfigError, SparktapError
from sparktap.report.collect import collect
from sparktap.report.model import Report

if TYPE_CHECKING:
    from sparktap.detection.settings import DetectionSettings
    from sparktap.store.target import StorageTarget


def _target(settings: DetectionSettings, clickhouse_url: str | None, database: str | None) -> StorageTarget:
    from sparktap.store.target import parse_storage_url

    if clickhouse_url:
        try:
            target = parse_storage_url(clickhouse_url)
        except ValueError as exc:
            raise ConfigError(f"invalid --clickhouse-url: {exc}") from exc
    else:
        target = settings.clickhouse.target()
    return target.model_copy(update={"database": database}) if database else target


def default_output(app_id: str) -> Path:
    return Path(f"sparktap-report-{re.sub(r'[^A-Za-z0-9._-]+', '_', app_id)}.html")


def write_report(report: Report, output: Path) -> int:
    """Render ``report`` to ``output``; returns the bytes written."""
    from sparktap.report.render import render

    data = render(report).encode("utf-8")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(data)
    except OSError as exc:
        raise SparktapError(f'cannot write the report path="{output}": {exc.strerror}; choose another -o') from exc
    return len(data)


@click.command("report")
@click.argument("app_id")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="HTML file to write (default: sparktap-report-<APP_ID>.html).",
)
@click.option(
    "--clickhouse-url",
    default=None,
    help="clickhouse://user:pw@host:9000/db or chdb:///dir (default: SPARKTAP_CLICKHOUSE__URL).",
)
@click.option("--database", default=None, help="Database of the sparktap tables (default: from the URL).")
def report_command(app_id: str, output: Path | None, clickhouse_url: str | None, database: str | None) -> None:
    """Write a self-contained HTML report of application APP_ID: stage timeline, task durations and skew, shuffle
    locality, spills, AQE decisions, SQL executions and the findings with their fixes."""
    from sparktap.detection.settings import load_detection_settings
    from sparktap.store import StorageError, open_storage

    settings = load_detection_settings()
    target = _target(settings, clickhouse_url, database)
    if target.capabilities.embedded and target.path is not None and not target.path.is_dir():
        raise ConfigError(
            f'no chDB store at path="{target.path}": point --clickhouse-url or '
            "SPARKTAP_CLICKHOUSE__URL at the collector's chdb:///dir"
        )
    try:
        storage = open_storage(target, quiet=True)
    except StorageError as exc:
        hint = (
            (
                "; in embedded mode the collector process owns the store: stop it for the report, or run the "
                "report against a ClickHouse server (--clickhouse-url clickhouse://…)"
            )
            if target.capabilities.embedded
            else ""
        )
        raise SparktapError(f"{exc}{hint}") from exc
    with storage:
        report = collect(
            storage.query,
            app_id,
            database=storage.database,
            version=storage.version(),
            source=storage.redacted_url,
            thresholds=settings.alerts.thresholds,
        )
    path = output or default_output(app_id)
    size = write_report(report, path)
    counts = {s: sum(f.severity == s for f in report.findings) for s in ("critical", "warning", "info")}
    click.echo(
        f"wrote {path} ({size / 1e6:.1f} MB): app_id={app_id}, {len(report.stages)} stage attempt(s), "
        f"{len(report.findings)} finding(s) ({', '.join(f'{n} {s}' for s, n in counts.items())})"
    )


COMMANDS: list[click.Command] = [report_command]

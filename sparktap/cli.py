"""The ``sparktap`` command. Each subcommand is defined next to the code it drives and registered here."""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

import click

from sparktap import __version__
from sparktap.errors import SparktapError

if TYPE_CHECKING:
    from sparktap.collector.consumer import CollectorHooks
    from sparktap.collector.settings import IngestSettings
    from sparktap.settings import Settings


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sparktap")
def cli() -> None:
    """Live telemetry for Apache Spark: listener, collector, detection, dashboards."""


@cli.command()
def version() -> None:
    """Print the sparktap version and the event schema version."""
    from sparktap.schemas import SCHEMA_MINOR, SCHEMA_VERSION

    click.echo(f"sparktap {__version__} (event schema {SCHEMA_VERSION}.{SCHEMA_MINOR})")


# Each part of sparktap defines its commands in its own ``cli`` module (a ``COMMANDS`` list of click commands);
# heavy imports (pyspark, chdb, …) stay inside the command functions so ``sparktap --help`` is fast.
COMMAND_MODULES = (
    "sparktap.listener.cli",
    "sparktap.collector.cli",
    "sparktap.detection.cli",
    "sparktap.dashboards.cli",
    "sparktap.report.cli",
    "sparktap.history.cli",
    "sparktap.demo.cli",
)


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that part has no commands yet
                continue
            raise
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def _full_settings(settings: IngestSettings) -> Settings:
    """The collector's settings (command-line options applied) plus the other groups from the environment."""
    from sparktap.settings import load_settings

    return load_settings(
        kafka=settings.kafka,
        clickhouse=settings.clickhouse,
        collector=settings.collector,
        log_level=settings.log_level,
    )


def _embedded_detection(hooks: CollectorHooks, settings: IngestSettings) -> object:
    from sparktap.detection.embedded import attach

    return attach(hooks, _full_settings(settings))


def _spark_does_not_alert(settings: IngestSettings) -> None:
    alerts = _full_settings(settings).alerts
    if settings.clickhouse.target().capabilities.embedded and any(
        (alerts.slack_webhook_url, alerts.teams_webhook_url, alerts.webhook_url)
    ):
        click.echo(
            "warning: alert channels are set, but --engine spark does not run the alerter: with a chDB store "
            "use the consumer engine (sparktap collect), which alerts after each insert; with a ClickHouse "
            "server run sparktap alert beside it",
            err=True,
        )


def _compose() -> None:
    """Wiring across parts that the parts may not do themselves (``docs/architecture.md``): a collector on chDB
    holds the store, so it runs the alerter and answers ``sparktap findings`` (``detection/embedded.py``)."""
    from sparktap.collector import cli as collector_cli

    collector_cli.EXTENSIONS.append(_embedded_detection)
    collector_cli.SPARK_EXTENSIONS.append(_spark_does_not_alert)


_compose()


def main() -> None:
    """Entry point: an expected failure prints one line and exits 2, never a traceback."""
    try:
        status = cli.main(standalone_mode=False)  # a command's ctx.exit(N) comes back as N here
    except SparktapError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    if isinstance(status, int) and status:
        sys.exit(status)

"""``sparktap import PATH…``: Spark event logs into the pipeline (docs/import.md)."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sparktap import DEFAULT_TOPIC

if TYPE_CHECKING:
    from sparktap.history.importer import Importer


@click.command("import")
@click.argument("paths", nargs=-1, required=True)
@click.option("--bootstrap-servers", envvar="SPARKTAP_KAFKA_BOOTSTRAP_SERVERS", help="Kafka to send the events to.")
@click.option("--topic", default=DEFAULT_TOPIC, show_default=True, help="The events topic the collector reads.")
@click.option(
    "--storage-url",
    help="Insert straight into ClickHouse (a one-off backfill), e.g. clickhouse://host:9000/sparktap or chdb:///dir.",
)
@click.option(
    "--live-check-url",
    help="With Kafka: the collector's storage URL, to skip application attempts the live listener already stored.",
)
@click.option("--cluster", help="The sparktap cluster of the imported applications (default: the log's conf).")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(path_type=Path), help="Checkpoint file.")
@click.option("--retention-days", default=30, show_default=True, help="Schema retention when creating it.")
@click.option("--java-home", help="The Java runtime for the replay (default: $JAVA_HOME, then java on PATH).")
@click.option(
    "--follow",
    is_flag=True,
    help="Keep running: every --interval seconds import the PATHs' new and grown logs (checkpointed); stop with "
    "SIGTERM or Ctrl-C.",
)
@click.option("--interval", default=30.0, show_default=True, help="Seconds between two looks with --follow.")
def import_cmd(
    paths: tuple[str, ...],
    bootstrap_servers: str | None,
    topic: str,
    storage_url: str | None,
    live_check_url: str | None,
    cluster: str | None,
    checkpoint_path: Path | None,
    retention_days: int,
    java_home: str | None,
    follow: bool,
    interval: float,
) -> int:
    """Import Spark event logs (files, rolling eventlog_v2_* directories, directories of logs, globs) into the
    same contract events the live listener sends: to Kafka (--bootstrap-servers) or into ClickHouse (--storage-url).
    """
    from sparktap.errors import ConfigError
    from sparktap.history.checkpoint import Checkpoint, default_path
    from sparktap.history.importer import Importer
    from sparktap.history.sinks import KafkaSink, LiveCheck, Sink, StorageSink

    if (storage_url is None) == (bootstrap_servers is None):
        raise ConfigError("sparktap import needs one destination: --bootstrap-servers=host:9092 or --storage-url=URL")
    sink: Sink
    live: LiveCheck | None
    if storage_url is not None:
        storage_sink = StorageSink(storage_url, retention_days)
        sink, live, destination = storage_sink, storage_sink.live, f"storage {storage_url}"
    else:
        assert bootstrap_servers is not None  # noqa: S101 - checked above
        live = LiveCheck.open(live_check_url, retention_days) if live_check_url else None
        sink = KafkaSink(bootstrap_servers, topic, {}, live)
        destination = f"kafka {bootstrap_servers} {topic}"
    checkpoint = Checkpoint(checkpoint_path or default_path(destination))
    importer = Importer(sink, checkpoint, live, cluster=cluster, java_home=java_home)
    try:
        if follow:
            return _follow(importer, list(paths), interval)
        summary = importer.run(list(paths))
    finally:
        sink.close()
    for line in summary.lines():
        click.echo(line)
    sys.stdout.flush()
    return 1 if summary.problems else 0


def _follow(importer: Importer, paths: list[str], interval: float) -> int:
    """Import, wait, import again (only new and grown logs), until SIGTERM or SIGINT; one summary per cycle that
    found something, each problem reported once."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: stop.set())
    reported: set[str] = set()
    click.echo(f"following {len(paths)} paths every {interval:g} s (checkpoint {importer.checkpoint.path})")
    while not stop.is_set():
        summary = importer.run(paths)
        problems = [line for line in summary.lines() if line.startswith(("skipped", "stopped early", "refused"))]
        new = [line for line in problems if line not in reported]
        reported.update(new)
        if summary.logs:
            click.echo(summary.lines()[0])
        for line in new:
            click.echo(line)
        sys.stdout.flush()
        stop.wait(interval)
    click.echo("stopped following")
    return 0


COMMANDS = [import_cmd]

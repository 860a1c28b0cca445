"""``sparktap import PATH…``: Spark event logs into the pipeline (docs/import.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sparktap import DEFAULT_TOPIC


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
    try:
        summary = Importer(sink, checkpoint, live, cluster=cluster, java_home=java_home).run(list(paths))
    finally:
        sink.close()
    for line in summary.lines():
        click.echo(line)
    sys.stdout.flush()
    return 1 if summary.problems else 0


COMMANDS = [import_cmd]

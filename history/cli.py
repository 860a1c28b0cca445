"""``sparktap import PATH…``: Spark event logs into the pipeline (docs/import.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from sparktap import DEFAULT_TOPIC
from sparktap.schemas.schema import MAX_RETENTION_DAYS

if TYPE_CHECKING:
    from sparktap.history.importer import Summary

F = TypeVar("F", bound=Callable[..., Any])


def _limit(flag: str, kind: click.ParamType, default: float, help: str, envvar: str | None = None) -> Callable[[F], F]:
    """A bounded numeric option shown with its default: the import's limits and the follower's timings, one shape."""
    return click.option(flag, type=kind, default=default, show_default=True, envvar=envvar, help=help)


@click.command("import")
@click.argument("paths", nargs=-1, required=True)
@click.option("--bootstrap-servers", envvar="SPARKTAP_KAFKA_BOOTSTRAP_SERVERS", help="Kafka to send the events to.")
@click.option("--topic", default=DEFAULT_TOPIC, show_default=True, help="The events topic the collector reads.")
@click.option(
    "--kafka-from-settings",
    is_flag=True,
    help="Send to the Kafka of the collector's settings (SPARKTAP_KAFKA__*: brokers, topic, SASL, TLS), as the Helm "
    "chart's follower does.",
)
@click.option(
    "--storage-url",
    help="Insert straight into ClickHouse (a one-off backfill), e.g. clickhouse://host:9000/sparktap or chdb:///dir.",
)
@click.option(
    "--live-check-url",
    help="With Kafka: the collector's storage URL, to skip application attempts the live listener already stored.",
)
@click.option(
    "--live-check-from-settings",
    is_flag=True,
    help="With Kafka: skip attempts the live listener stored, in the collector's ClickHouse (SPARKTAP_CLICKHOUSE__*).",
)
@click.option("--cluster", help="The sparktap cluster of the imported applications (default: the log's conf).")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(path_type=Path), help="Checkpoint file.")
@_limit(
    "--retention-days",
    click.IntRange(1, MAX_RETENTION_DAYS),
    30,
    "Schema retention when creating it (days; rows older than it are refused and never stored).",
)
@click.option(
    "--batch-mb",
    default=32.0,
    show_default=True,
    help="Events held before a delivery (MB of contract events, at most 50,000 events): the events of many small "
    "logs go in one insert per table, or one producer flush (--engine spark: per task, across its logs). 0: deliver "
    "and checkpoint each log on its own.",
)
@click.option("--java-home", help="The Java runtime for the replay (default: $JAVA_HOME, then java on PATH).")
@click.option(
    "--follow-symlinks",
    is_flag=True,
    help="Read symbolic links in the log directory that lead out of it (default: refused, one line each).",
)
@_limit(
    "--max-line-mb",
    click.FloatRange(min=0.0625),
    64.0,
    "A log line longer than this stops that log (read no further): a tiny compressed file can hold a huge line.",
    envvar="SPARKTAP_IMPORT_MAX_LINE_MB",
)
@_limit(
    "--jvm-heap-mb",
    click.IntRange(min=64),
    2048,
    "The replay JVM's heap cap (-Xmx): a log that needs more fails alone, named; the others are imported.",
    envvar="SPARKTAP_IMPORT_JVM_HEAP_MB",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Keep running: every --interval seconds import the PATHs' new and grown logs (checkpointed); stop with "
    "SIGTERM or Ctrl-C.",
)
@click.option("--interval", default=30.0, show_default=True, help="Seconds between two looks with --follow.")
@_limit(
    "--cycle-deadline",
    click.FloatRange(min=0, min_open=True),
    900.0,
    "With --follow: a cycle running longer than this many seconds is stuck: /healthz answers 503.",
)
@_limit(
    "--stop-grace",
    click.FloatRange(min=0),
    10.0,
    "With --follow: on SIGTERM, seconds the log being replayed may take before its replay is killed.",
)
@click.option(
    "--metrics-port",
    type=int,
    envvar="SPARKTAP_IMPORT__METRICS_PORT",
    help="With --follow: serve /metrics and /healthz on this port (0: any free port).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="With --metrics-port: the address (0.0.0.0 or the pod's address to be scraped from elsewhere).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "spark"]),
    default="local",
    show_default=True,
    help="local: one replay JVM here. spark: list through Hadoop's FileSystem (file://, hdfs://, s3a://, gs://, "
    "abfs://) and replay on the executors (see --partitions).",
)
@click.option("--master", default="local[2]", show_default=True, help="With --engine spark: the Spark master.")
@click.option(
    "--packages",
    help="With --engine spark: Maven coordinates of FileSystem connectors (e.g. hadoop-aws), as spark-submit.",
)
@click.option("--jars", "jars", help="With --engine spark: connector jars (comma-separated), as spark-submit.")
@click.option(
    "--partitions",
    type=int,
    help="With --engine spark: this many tasks (default: one per log up to 4 per executor core, then ~64 MB of log "
    "per task).",
)
@click.option(
    "--conf",
    "confs",
    multiple=True,
    metavar="KEY=VALUE",
    help="With --engine spark: a Spark property, as spark-submit (e.g. spark.executor.memory=2g, spark.cores.max=8).",
)
def import_cmd(
    paths: tuple[str, ...],
    bootstrap_servers: str | None,
    topic: str,
    kafka_from_settings: bool,
    storage_url: str | None,
    live_check_url: str | None,
    live_check_from_settings: bool,
    cluster: str | None,
    checkpoint_path: Path | None,
    retention_days: int,
    batch_mb: float,
    java_home: str | None,
    follow_symlinks: bool,
    max_line_mb: float,
    jvm_heap_mb: int,
    follow: bool,
    interval: float,
    cycle_deadline: float,
    stop_grace: float,
    metrics_port: int | None,
    metrics_host: str,
    engine: str,
    master: str,
    packages: str | None,
    jars: str | None,
    partitions: int | None,
    confs: tuple[str, ...],
) -> int:
    """Import Spark event logs (files, rolling eventlog_v2_* directories, directories of logs, globs) into the
    same contract events the live listener sends: to Kafka (--bootstrap-servers) or into ClickHouse (--storage-url).
    """
    from sparktap.errors import ConfigError
    from sparktap.history.checkpoint import Checkpoint, default_path
    from sparktap.history.importer import Importer
    from sparktap.history.jvm import Limits
    from sparktap.history.sinks import BATCH_BYTES, KafkaSink, LiveCheck, Sink, StorageSink

    kafka_extra: dict[str, str] = {}
    if kafka_from_settings:
        from sparktap.config import load_kafka_settings

        kafka = load_kafka_settings().kafka
        kafka_extra = {k: str(v) for k, v in kafka.librdkafka().items()}
        bootstrap_servers, topic = kafka_extra.pop("bootstrap.servers"), kafka.topic
    if (storage_url is None) == (bootstrap_servers is None):
        raise ConfigError("sparktap import needs one destination: --bootstrap-servers=host:9092 or --storage-url=URL")
    if batch_mb < 0:
        raise ConfigError(f'--batch-mb="{batch_mb:g}" is negative: give MB of events per delivery, or 0 for a '
                          "delivery per log")  # fmt: skip
    batch_bytes = int(batch_mb * 1e6) if batch_mb > 0 else BATCH_BYTES
    if engine == "spark":
        if follow:
            raise ConfigError("--follow runs with --engine local (one replay JVM watching the directory)")
        return _on_spark(
            list(paths), storage_url, bootstrap_servers, topic, live_check_url, cluster, checkpoint_path,
            retention_days, java_home, master, packages, jars, partitions, spark_conf(confs), batch_bytes,
            batch_mb <= 0, follow_symlinks,
        )  # fmt: skip
    if packages or jars or confs:
        raise ConfigError("--packages, --jars and --conf go with --engine spark (Hadoop FileSystem connectors, Spark)")
    sink: Sink
    live: LiveCheck | None
    if storage_url is not None:
        storage_sink = StorageSink(storage_url, retention_days, batch_bytes)
        sink, live, destination = storage_sink, storage_sink.live, f"storage {storage_url}"
    else:
        assert bootstrap_servers is not None  # noqa: S101 - checked above
        if live_check_from_settings:
            live = LiveCheck.from_settings(retention_days)
        else:
            live = LiveCheck.open(live_check_url, retention_days) if live_check_url else None
        sink = KafkaSink(bootstrap_servers, topic, kafka_extra, live, batch_bytes)
        destination = f"kafka {bootstrap_servers} {topic}"
    checkpoint = Checkpoint(checkpoint_path or default_path(destination))
    limits = Limits(int(max_line_mb * (1 << 20)), jvm_heap_mb)
    importer = Importer(sink, checkpoint, live, cluster=cluster, java_home=java_home, each_log=batch_mb <= 0,
                        follow_symlinks=follow_symlinks, limits=limits)  # fmt: skip
    try:
        if follow:
            from sparktap.history.follow import follow as follow_loop

            return follow_loop(importer, list(paths), interval, metrics_port, metrics_host, cycle_deadline,
                               stop_grace)  # fmt: skip
        summary = importer.run(list(paths))
    finally:
        sink.close()
    return _reported(summary)


def spark_conf(confs: tuple[str, ...]) -> dict[str, str]:
    """``--conf KEY=VALUE`` options as a dict; ConfigError (one line) for one without ``=``."""
    from sparktap.errors import ConfigError

    out: dict[str, str] = {}
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f'--conf "{item}" is not KEY=VALUE: write it as spark-submit does, e.g. '
                              "--conf spark.executor.memory=2g")  # fmt: skip
        out[key.strip()] = value
    return out


def _on_spark(
    paths: list[str],
    storage_url: str | None,
    bootstrap_servers: str | None,
    topic: str,
    live_check_url: str | None,
    cluster: str | None,
    checkpoint_path: Path | None,
    retention_days: int,
    java_home: str | None,
    master: str,
    packages: str | None,
    jars: str | None,
    partitions: int | None,
    conf: dict[str, str],
    batch_bytes: int,
    each_log: bool,
    follow_symlinks: bool,
) -> int:
    from pyspark.sql import SparkSession

    from sparktap.history import engine_spark
    from sparktap.history.checkpoint import Checkpoint, default_path

    destination = engine_spark.Destination(
        storage_url, bootstrap_servers, topic, live_check_url, retention_days, batch_bytes, each_log
    )
    where = f"storage {storage_url}" if storage_url else f"kafka {bootstrap_servers} {topic}"
    checkpoint = Checkpoint(checkpoint_path or default_path(f"spark {where}"))
    engine_spark.check_destination(destination)
    builder = (
        SparkSession.builder.master(master)
        .appName("sparktap-import")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # the import's own progress line says more
    )
    if packages:
        builder = builder.config("spark.jars.packages", packages)
    if jars:
        builder = builder.config("spark.jars", jars)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        summary = engine_spark.run(
            spark, paths, destination, checkpoint, cluster, java_home, partitions, follow_symlinks=follow_symlinks
        )
    finally:
        spark.stop()
    return _reported(summary)


def _reported(summary: Summary) -> int:
    """Print the summary's lines; the exit status (docs/import.md): 1 when a log was refused or failed, else 0."""
    for line in summary.lines():
        click.echo(line)
    sys.stdout.flush()
    return 1 if summary.problems else 0


COMMANDS = [import_cmd]

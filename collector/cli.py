"""``sparktap collect``: Kafka -> ClickHouse, as a consumer-group service or as a Structured Streaming query."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sparktap.collector.settings import CollectorSettings, IngestSettings
from sparktap.errors import ConfigError

if TYPE_CHECKING:
    from sparktap.collector.consumer import CollectorHooks


EXTENSIONS: list[Callable[[CollectorHooks, IngestSettings], object]] = []
"""What the composition root (``sparktap.cli``) attaches to every collector this command starts: the alerter and
``/findings`` of an embedded store (``sparktap.detection.embedded``, which reads its own settings group). The
collector itself imports no other part."""

SPARK_EXTENSIONS: list[Callable[[IngestSettings], object]] = []
"""What the composition root runs before ``--engine spark`` starts (a warning that it does not alert)."""


def _default(name: str) -> str:
    """The setting's default as the help shows it (read from ``CollectorSettings``, never repeated here)."""
    return f"[{CollectorSettings.model_fields[name].default}]"


def _overrides(**options: Any) -> dict[str, dict[str, Any]]:
    """Command-line options -> nested settings overrides (unset options leave the environment's values)."""
    groups: dict[str, dict[str, Any]] = {"kafka": {}, "clickhouse": {}, "collector": {}}
    for key, value in options.items():
        if value is None or value == () or value is False:
            continue
        group, _, name = key.partition("__")
        groups[group][name] = value
    return {group: values for group, values in groups.items() if values}


@click.command("collect")
@click.option(
    "--engine",
    type=click.Choice(["consumer", "spark"]),
    default="consumer",
    show_default=True,
    help="'consumer': the consumer-group service; 'spark': one Structured Streaming query (sparktap-kafka -> "
    "sparktap-clickhouse) with its offsets in --checkpoint (docs/streaming.md).",
)
@click.option(
    "--checkpoint",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="--engine spark: the query's checkpoint directory (required; keep it to resume exactly).",
)
@click.option(
    "--trigger",
    type=click.Choice(["processing-time", "available-now"]),
    default=None,
    help="--engine spark: run until stopped [processing-time], or read what is there now and exit "
    "(available-now, for backfills).",
)
@click.option(
    "--max-offsets-per-trigger",
    type=click.IntRange(min=1),
    default=None,
    help="--engine spark: at most this many records per micro-batch [unlimited].",
)
@click.option(
    "--master", default=None, help="--engine spark: Spark master when not run through spark-submit [local[*]]."
)
@click.option("--bootstrap-servers", default=None, help="Kafka servers [SPARKTAP_KAFKA__BOOTSTRAP_SERVERS].")
@click.option("--topic", default=None, help="Event topic; dead letters go to <topic>.dlq [SPARKTAP_KAFKA__TOPIC].")
@click.option("--group-id", default=None, help="Consumer group [SPARKTAP_KAFKA__GROUP_ID].")
@click.option(
    "--storage-url",
    default=None,
    help="clickhouse://user:password@host:9000/db?secure=true or chdb:///dir [SPARKTAP_CLICKHOUSE__URL]; "
    "prefer the environment variable for passwords (command lines are visible to other users).",
)
@click.option(
    "--batch-rows", type=click.IntRange(min=1), default=None, help=f"Flush at this many rows {_default('batch_rows')}."
)
@click.option(
    "--batch-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help=f"Flush a batch at most this many seconds old {_default('batch_interval_seconds')}.",
)
@click.option(
    "--max-message-bytes",
    type=click.IntRange(min=256),
    default=None,
    help=f"Larger messages go to the dead-letter topic {_default('max_message_bytes')}.",
)
@click.option(
    "--metrics-host", default=None, help=f"Address of /metrics, /healthz and /readyz {_default('metrics_host')}."
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help=f"Port of /metrics, /healthz and /readyz; 0 picks a free one {_default('metrics_port')}.",
)
@click.option(
    "--instance-id",
    default=None,
    help="Static group membership (group.instance.id): a restarted collector takes its partitions back "
    "without waiting for its old session to expire. Unique per process, e.g. the pod name.",
)
@click.option(
    "--log-format",
    type=click.Choice(["json", "text"]),
    default=None,
    help=f"Log lines as json or text {_default('log_format')}.",
)
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), default=None)
@click.option(
    "--plain-copy",
    is_flag=True,
    default=False,
    hidden=True,
    help="Also insert into <table>_plain without deduplication (integrity tests' negative control).",
)
@click.option(
    "-X",
    "kafka_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra librdkafka setting for the consumer and the DLQ producer (repeatable).",
)
def collect(
    engine: str,
    checkpoint: Path | None,
    trigger: str | None,
    max_offsets_per_trigger: int | None,
    master: str | None,
    bootstrap_servers: str | None,
    topic: str | None,
    group_id: str | None,
    storage_url: str | None,
    batch_rows: int | None,
    batch_interval: float | None,
    max_message_bytes: int | None,
    metrics_host: str | None,
    metrics_port: int | None,
    instance_id: str | None,
    log_format: str | None,
    log_level: str | None,
    plain_copy: bool,
    kafka_options: tuple[str, ...],
) -> None:
    """Land every event from Kafka in ClickHouse, exactly once per (app_id, app_attempt, seq).

    Creates or migrates the schema at start, commits offsets only after ClickHouse accepted the rows, sends bad
    messages to <topic>.dlq, and serves /metrics and /healthz. Run several with the same group id to share the
    partitions. SIGTERM flushes, commits and exits 0.

    With --engine spark the same runs as one Spark Structured Streaming query, exactly once per micro-batch:
    offsets in the checkpoint, each committed batch recorded in ClickHouse with its rows.
    """
    from sparktap.collector.logfmt import setup_logging
    from sparktap.collector.memory import fix_mmap_threshold, share_one_arena
    from sparktap.collector.settings import load_ingest_settings as load_settings
    from sparktap.config import parse_kafka_options, secret_option_warnings

    _check_engine_options(
        engine,
        checkpoint=checkpoint,
        trigger=trigger,
        max_offsets_per_trigger=max_offsets_per_trigger,
        master=master,
        metrics_host=metrics_host,
        metrics_port=metrics_port,
        instance_id=instance_id,
        plain_copy=plain_copy,
    )

    overrides = _overrides(
        kafka__bootstrap_servers=bootstrap_servers,
        kafka__topic=topic,
        kafka__group_id=group_id,
        clickhouse__url=storage_url,
        collector__batch_rows=batch_rows,
        collector__batch_interval_seconds=batch_interval,
        collector__max_message_bytes=max_message_bytes,
        collector__metrics_host=metrics_host,
        collector__metrics_port=metrics_port,
        collector__instance_id=instance_id,
        collector__log_format=log_format,
        collector__plain_copy=plain_copy,
    )
    settings = load_settings(**overrides, **({"log_level": log_level} if log_level else {}))
    extra = parse_kafka_options(kafka_options)
    if extra:
        merged = {**settings.kafka.extra, **extra}
        settings = load_settings(
            **{**overrides, "kafka": {**overrides.get("kafka", {}), "extra": merged}},
            **({"log_level": log_level} if log_level else {}),
        )
    setup_logging(settings.log_level, settings.collector.log_format)
    for warning in secret_option_warnings(extra):
        logging.getLogger("sparktap.collector").warning(warning)
    if engine == "spark" and checkpoint is not None:  # _check_engine_options: spark always has a checkpoint
        _run_spark(settings, checkpoint, trigger or "processing-time", max_offsets_per_trigger, master)
        return
    # process-wide allocator settings belong to the process, set here before librdkafka's and the driver's threads
    # exist and before the first large message (collector/memory.py); a library embedding Collector keeps its own
    fix_mmap_threshold()
    if not settings.clickhouse.target().capabilities.embedded:
        share_one_arena()
    from sparktap.collector.consumer import Collector, CollectorHooks

    hooks = CollectorHooks()
    for extend in EXTENSIONS:
        extend(hooks, settings)
    Collector(settings, hooks=hooks).run()


_SPARK_ONLY = ("checkpoint", "trigger", "max_offsets_per_trigger", "master")
_CONSUMER_ONLY = ("metrics_host", "metrics_port", "instance_id", "plain_copy")


def _set(value: Any) -> bool:
    """Whether an option was given (``0`` is a value; an unset flag is ``False``)."""
    return value is not None and value is not False


def _check_engine_options(engine: str, **given: Any) -> None:
    """Options of the other engine are an error, not silently ignored."""
    foreign = _CONSUMER_ONLY if engine == "spark" else _SPARK_ONLY
    used = ["--" + name.replace("_", "-") for name in foreign if _set(given.get(name))]
    if used:
        verb = "does" if len(used) == 1 else "do"
        raise ConfigError(f"{', '.join(used)} {verb} not apply to --engine {engine}; see sparktap collect --help")
    if engine == "spark" and given.get("checkpoint") is None:
        raise ConfigError("--engine spark needs --checkpoint DIR: the query's offsets live there")


def _run_spark(
    settings: IngestSettings, checkpoint: Path, trigger: str, max_offsets: int | None, master: str | None
) -> None:
    from sparktap.collector.streaming.run import run

    for extend in SPARK_EXTENSIONS:
        extend(settings)

    overrides: dict[str, Any] = {}
    if max_offsets is not None:
        overrides["max_offsets_per_trigger"] = max_offsets
    batches = run(settings, checkpoint, master=master, trigger=trigger, **overrides)
    click.echo(f"committed {batches} micro-batch(es); checkpoint: {checkpoint}")


@click.group("retention")
def retention() -> None:
    """Tiered retention: task rows shortest, stage and application summaries longer (store/retention.py)."""


@retention.command("apply")
def retention_apply() -> None:
    """Delete the rows older than each table's tier limit now (ALTER TABLE … DELETE; the way to expire rows on
    clickhouse-server 18.16, which has no TTL) and set each rollup's TTL to its tier where the server has TTL.
    Tiers: SPARKTAP_CLICKHOUSE__TASK_RETENTION_DAYS (task_end), __RETENTION_DAYS (other events),
    __STAGE_RETENTION_DAYS (stage_rollup, run_rollup), __APP_RETENTION_DAYS (app_rollup),
    __FINDINGS_RETENTION_DAYS (findings)."""
    from sparktap.collector.settings import load_ingest_settings
    from sparktap.store import open_storage
    from sparktap.store.retention import Tiers, apply_retention

    ch = load_ingest_settings().clickhouse
    tiers = Tiers.of(ch)
    with open_storage(ch.target()) as storage:
        schema = storage.ensure_schema(ch.retention_days)
        deleted = apply_retention(storage, schema, tiers)
    for table, rows in deleted.items():
        if rows:
            click.echo(f"{table}: {rows} rows older than {tiers.days(table)} days deleted")
    click.echo(f"retention applied to {len(deleted)} tables, {sum(deleted.values())} rows deleted")


COMMANDS: list[click.Command] = [collect, retention]

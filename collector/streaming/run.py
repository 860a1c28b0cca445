"""``sparktap collect --engine spark``: one Structured Streaming query, Kafka -> parse -> ClickHouse.

The process that calls ``start_collector`` owns the storage, as the consumer-group collector does: for chDB it
serves the store to Spark's commit step (``store_server.StoreServer``), so the alerter and queries can keep reading
it while the query runs; for a ClickHouse server (or cluster), Spark's tasks write their rows to it directly and
the commit records each batch in the ledger (``executor.py``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

from sparktap import DEFAULT_TOPIC
from sparktap.collector.settings import IngestSettings
from sparktap.collector.streaming.ingest import LEDGER_TABLE, ensure_ledger
from sparktap.collector.streaming.sink import SINK_FORMAT
from sparktap.collector.streaming.source import SOURCE_FORMAT
from sparktap.collector.streaming.store_server import StoreServer
from sparktap.errors import ConfigError, SparktapError
from sparktap.schemas.ddl import quote_literal
from sparktap.store import Storage, open_storage
from sparktap.store.views import ensure_views

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("sparktap.collector.streaming")

Trigger = Literal["processing-time", "available-now"]


@dataclass
class CollectorOptions:
    """What the query reads and how; ``source_options``/``sink_options`` add or override any data source option."""

    bootstrap_servers: str
    checkpoint: Path
    topic: str | None = DEFAULT_TOPIC
    subscribe_pattern: str | None = None
    trigger: Trigger = "processing-time"
    interval: str = "1 second"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    parse: Literal["raw", "events"] = "raw"
    """where events are parsed: in the sink (``raw``, the faster) or in the source (``events``, typed columns)"""
    dead_letter_topic: str | None = None
    kafka_conf: Mapping[str, str] = field(default_factory=dict)
    source_options: Mapping[str, str] = field(default_factory=dict)
    sink_options: Mapping[str, str] = field(default_factory=dict)
    query_name: str | None = None
    retention_days: int = 30

    @classmethod
    def from_settings(cls, settings: IngestSettings, checkpoint: Path, **overrides: Any) -> CollectorOptions:
        k = settings.kafka
        conf = {key: str(value) for key, value in k.librdkafka().items() if key != "bootstrap.servers"}
        overrides.setdefault("sink_options", {"maxMessageBytes": str(settings.collector.max_message_bytes)})
        return cls(
            bootstrap_servers=k.bootstrap_servers,
            checkpoint=checkpoint,
            topic=k.topic,
            dead_letter_topic=k.dead_letter_topic,
            kafka_conf=conf,
            retention_days=settings.clickhouse.retention_days,
            **overrides,
        )


class StreamingCollector:
    """A running source -> sink query and the store server it needs (``with`` stops both)."""

    def __init__(self, query: StreamingQuery, storage: Storage, server: StoreServer | None) -> None:
        self.query = query
        self.storage = storage
        self.server = server

    def await_termination(self, timeout: float | None = None) -> bool:
        """True when the query ended (AvailableNow: all data read); raises the query's failure clearly."""
        from pyspark.errors import StreamingQueryException

        try:
            if timeout is None:
                done = self.query.awaitTermination()
            else:  # seconds: pyspark takes a float here, though its hints say int
                done = self.query.awaitTermination(timeout)  # type: ignore[arg-type]
        except StreamingQueryException as exc:
            raise SparktapError(f"the streaming collector failed: {_first_line(exc)}") from exc
        return True if done is None else bool(done)

    def stop(self) -> None:
        try:
            if self.query.isActive:
                self.query.stop()
        finally:
            if self.server is not None:
                self.server.stop()
                self.server = None

    def __enter__(self) -> StreamingCollector:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


_OUR_ERROR = re.compile(r"sparktap\.[\w.]*?(?:Error|Exception): (.+)")


def _first_line(exc: BaseException) -> str:
    """The one line that says what failed: our own error's message when a Python worker raised it, else the first
    line of Spark's."""
    text = str(exc)
    ours = _OUR_ERROR.search(text)
    if ours:
        return ours.group(1).strip()
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__


def start_collector(spark: SparkSession, storage: Storage, options: CollectorOptions) -> StreamingCollector:
    """Ensure the schema, then start ``sparktap-kafka`` -> ``sparktap-clickhouse`` on ``storage``.

    The events are parsed, checked and flattened by the consumer-group collector's decoder inside the sink's
    tasks (``parse=raw``); ``options.parse="events"`` parses them into typed columns in the source first (the
    sink still stores exactly the same rows), at about a third of the throughput (docs/benchmarks.md).
    """
    from sparktap.collector.streaming import register

    if (options.topic is None) == (options.subscribe_pattern is None):
        raise ConfigError("the streaming collector needs exactly one of a topic or a subscribe pattern")
    register(spark)
    ensure_views(storage, storage.ensure_schema(options.retention_days))  # what the consumer-group collector creates
    ensure_ledger(storage)

    reader = (
        spark.readStream.format(SOURCE_FORMAT)
        .option("kafka.bootstrap.servers", options.bootstrap_servers)
        .option("startingOffsets", options.starting_offsets)
        .option("parse", options.parse)
    )
    reader = (
        reader.option("subscribePattern", options.subscribe_pattern)
        if options.subscribe_pattern
        else reader.option("subscribe", str(options.topic))
    )
    if options.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(options.max_offsets_per_trigger))
    for key, value in options.kafka_conf.items():
        reader = reader.option(f"kafka.{key}", value)
    for key, value in options.source_options.items():
        reader = reader.option(key, value)

    server = StoreServer(storage).start() if storage.target.capabilities.embedded else None
    try:
        writer = (
            reader.load()
            .writeStream.format(SINK_FORMAT)
            .option("url", storage.target.url())
            .option("checkpointLocation", str(options.checkpoint))
            .option("ensureSchema", "false")  # done above, by the owner of the storage
            .option("serverVersion", ".".join(str(p) for p in storage.version()))
        )
        if server is not None:
            writer = writer.option("ingest", server.address).option("ingestToken", server.token)
        if options.dead_letter_topic:
            writer = writer.option("deadLetterTopic", options.dead_letter_topic)
            writer = writer.option("kafka.bootstrap.servers", options.bootstrap_servers)
            for key, value in options.kafka_conf.items():
                writer = writer.option(f"kafka.{key}", value)
        for key, value in options.sink_options.items():
            writer = writer.option(key, value)
        if options.query_name:
            writer = writer.queryName(options.query_name)
        if options.trigger == "available-now":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=options.interval)
        query = writer.start()
    except BaseException:
        if server is not None:
            server.stop()
        raise
    return StreamingCollector(query, storage, server)


def run(
    settings: IngestSettings,
    checkpoint: Path,
    *,
    master: str | None = None,
    trigger: str = "processing-time",
    **overrides: Any,
) -> int:
    """The ``collect --engine spark`` command: run until stopped (or, with ``trigger="available-now"``, until caught
    up). ``overrides`` set CollectorOptions fields (``max_offsets_per_trigger``, ``interval``, ``parse`` …).

    The process owns the storage for the query's lifetime. Returns the number of micro-batches this run committed.
    """
    from pyspark.sql import SparkSession

    if trigger not in ("processing-time", "available-now"):
        raise ConfigError(f'trigger="{trigger}" must be processing-time or available-now')
    builder = SparkSession.builder.appName("sparktap-collector")
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    options = CollectorOptions.from_settings(settings, checkpoint, trigger=cast(Trigger, trigger), **overrides)
    storage = open_storage(settings.clickhouse.target())
    started = time.monotonic()
    try:
        storage.ensure_schema(options.retention_days)
        ensure_ledger(storage)
        before = committed_batches(storage, str(checkpoint))
        with start_collector(spark, storage, options) as collector:
            log.info('streaming collector started: checkpoint="%s" storage="%s"', checkpoint, storage.redacted_url)
            try:
                collector.await_termination()
            except KeyboardInterrupt:
                log.info("stopping the streaming collector")
        batches = committed_batches(storage, str(checkpoint)) - before
        log.info("streaming collector stopped after %.1fs, %d batches", time.monotonic() - started, batches)
        return batches
    finally:
        storage.close()


def committed_batches(storage: Storage, sink_id: str) -> int:
    """How many micro-batches of a sink (its checkpoint location) the ledger holds."""
    rows = storage.query(
        f"SELECT count() AS n FROM {storage.qualified(LEDGER_TABLE)} "  # noqa: S608 - literal quoted
        f"WHERE sink_id = {quote_literal(sink_id)}"
    )
    return int(rows[0]["n"]) if rows else 0

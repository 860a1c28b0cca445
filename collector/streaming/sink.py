"""The ``sparktap-clickhouse`` streaming sink: exactly once per micro-batch into ClickHouse server or chDB.

>>> (df.writeStream.format("sparktap-clickhouse").option("url", "clickhouse://u:p@ch:9000/spark")
...    .option("checkpointLocation", "/chk/sparktap").start())

Input: any frame with a binary ``value`` column of event JSON (``sparktap-kafka`` with ``parse=raw`` or
``events``, or Spark's own ``kafka`` source), or the typed ``events`` layout without ``value``.

Executors turn their rows into the columns of each table with the consumer-group collector's own decoder
(``collector/decode.py``: the same checks, the same rows, the same dead-letter reasons). Then, by option
``writes``:

- ``executors`` (the default for a ClickHouse server): each task writes its own rows and dead letters and hands
  the driver counts only (``executor.WrittenMessage``); the driver-side commit records the batch in the ledger
  (``ingest.record_batch``). What stays exactly once, and how, is in ``executor.py``.
- ``driver`` (chDB, always: an embedded store lives in one process): tasks hand their rows to the driver as
  commit messages; the driver-side commit (``ingest.py``) skips a batch the ledger already has (a replay),
  sends the batch's dead letters to the dead-letter topic and waits for their acknowledgements, and inserts the
  rows with the batch id. On chDB it goes through the process that holds the store (options
  ``ingest``/``ingestToken``, set by ``run.py``) or, when no process holds it, opens the store for the commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, DataSourceStreamWriter, WriterCommitMessage

from sparktap.collector.checks import range_rules
from sparktap.collector.decode import Decoded, Decoder, RejectKind, reject_kind
from sparktap.collector.kafka.dlq import (
    HEADER_ERROR,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_REASON,
    HEADER_TIMESTAMP,
    HEADER_TOPIC,
    DeadLetter,
    DeadLetterQueue,
    one_line,
)
from sparktap.collector.streaming.executor import WrittenMessage, batch_counts, task_ids, task_storage, write_task
from sparktap.collector.streaming.ingest import BatchResult, commit_batch, ensure_ledger, is_committed, record_batch
from sparktap.collector.streaming.offsets import StreamingError
from sparktap.collector.streaming.parser import ENVELOPE_FIELDS
from sparktap.collector.streaming.store_server import remote_commit, remote_is_committed
from sparktap.errors import ConfigError
from sparktap.schemas.ddl import LATEST_VERSION, RAW_TABLE, Schema
from sparktap.schemas.rows import columnizer
from sparktap.schemas.schema import schema_for
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget, parse_storage_url

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger("sparktap.collector.streaming")

SINK_FORMAT = "sparktap-clickhouse"
_META = ("topic", "partition", "offset", "timestamp")  # kept with typed events for their dead letters
_DLQ_TIMEOUT = 120.0


@dataclass(frozen=True)
class SinkOptions:
    url: str
    sink_id: str
    ingest: str | None = None
    ingest_token: str = ""
    dead_letter_topic: str | None = None
    kafka_conf: dict[str, str] = field(default_factory=dict)
    ensure_schema: bool = True
    retention_days: int = 30
    max_message_bytes: int = 1_048_576
    server_version: tuple[int, ...] | None = None
    writes: Literal["executors", "driver"] = "driver"
    """who inserts the rows: each Spark task (ClickHouse server only) or the driver's commit"""

    @property
    def target(self) -> StorageTarget:
        return parse_storage_url(self.url)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        url = opts.get("url", "").strip()
        if not url:
            raise ConfigError(
                f'sink "{SINK_FORMAT}" needs option url: clickhouse://user:password@host:9000/db or chdb:///dir'
            )
        try:
            target = parse_storage_url(url)
        except ValueError as exc:
            raise ConfigError(f'sink "{SINK_FORMAT}": option url is invalid: {exc}') from exc
        kafka_conf = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
        dlq = opts.get("deadlettertopic", "").strip() or None
        if dlq and not kafka_conf.get("bootstrap.servers"):
            raise ConfigError(f'sink "{SINK_FORMAT}": option deadLetterTopic needs kafka.bootstrap.servers too')
        version = None
        if opts.get("serverversion", "").strip():
            version = tuple(int(p) for p in opts["serverversion"].split(".") if p.strip().isdigit())
        elif target.capabilities.embedded:  # the engine this package ships
            version = LATEST_VERSION
        writes = opts.get("writes", "").strip().lower() or ("executors" if target.capabilities.remote else "driver")
        if writes not in ("executors", "driver"):
            raise ConfigError(f'sink "{SINK_FORMAT}": option writes="{opts["writes"]}" must be executors or driver')
        if writes == "executors" and not target.capabilities.remote:
            raise ConfigError(
                f'sink "{SINK_FORMAT}": option writes="executors" needs a ClickHouse server url; chDB is embedded in '
                'one process, so its rows go through the driver (writes="driver", the default for chdb://)'
            )
        return cls(
            url=url,
            # batch ids count per checkpoint: the checkpoint location tells two queries on one database apart
            sink_id=opts.get("sinkid", "").strip() or opts.get("checkpointlocation", "").strip() or "default",
            ingest=opts.get("ingest", "").strip() or None,
            ingest_token=opts.get("ingesttoken", ""),
            dead_letter_topic=dlq,
            kafka_conf=kafka_conf,
            ensure_schema=opts.get("ensureschema", "true").strip().lower() not in ("false", "0", "no"),
            retention_days=_int(opts, "retentiondays", "retentionDays", 30),
            max_message_bytes=_int(opts, "maxmessagebytes", "maxMessageBytes", 1_048_576),
            server_version=version,
            writes=cast(Literal["executors", "driver"], writes),
        )


def _int(opts: Mapping[str, str], key: str, name: str, default: int) -> int:
    try:
        return int(opts.get(key, default))
    except ValueError as exc:
        raise ConfigError(f'option {name}="{opts[key]}" must be an integer') from exc


@dataclass
class SinkMessage(WriterCommitMessage):
    """What one task hands to the commit: the columns of every table it filled, and its dead letters."""

    tables: dict[str, dict[str, list[Any]]]
    rows: int
    dead_letters: list[DeadLetter]


_VERSIONS: dict[str, tuple[int, ...]] = {}
_READY: set[tuple[str, str]] = set()  # (url, database) whose schema this process has ensured


def _server_version(options: SinkOptions) -> tuple[int, ...]:
    """The server's version: the table layout (and so the columns executors build) depends on it."""
    if options.server_version is not None:
        return options.server_version
    if options.url not in _VERSIONS:
        with open_storage(options.target) as storage:
            _VERSIONS[options.url] = storage.version()
    return _VERSIONS[options.url]


def _prepare(storage: Storage, options: SinkOptions) -> None:
    key = (storage.redacted_url, storage.database)
    if key in _READY:
        return
    if options.ensure_schema:
        storage.ensure_schema(options.retention_days)
    ensure_ledger(storage)
    _READY.add(key)


_DECODERS: dict[tuple[tuple[int, ...], str, int], Decoder] = {}


def _decoder(schema: Schema, max_message_bytes: int) -> Decoder:
    """One decoder per layout in this worker process (building one compiles code for every table)."""
    key = (schema.version, schema.database, max_message_bytes)
    decoder = _DECODERS.get(key)
    if decoder is None:
        decoder = _DECODERS[key] = Decoder(schema, max_message_bytes)
    return decoder


def _dead_letter(record: Mapping[str, Any], kind: RejectKind, reason: str) -> DeadLetter:
    """A dead letter with the consumer-group collector's headers (``collector/kafka/dlq.py``)."""
    headers = [
        (HEADER_TOPIC, str(record.get("topic") or "").encode()),
        (HEADER_PARTITION, str(record.get("partition")).encode()),
        (HEADER_OFFSET, str(record.get("offset")).encode()),
        (HEADER_ERROR, kind.encode()),
        (HEADER_REASON, one_line(reason).encode()),
    ]
    timestamp = record.get("timestamp")
    if timestamp is not None:
        headers.append((HEADER_TIMESTAMP, str(int(timestamp.timestamp() * 1000)).encode()))
    return DeadLetter(record.get("key"), record.get("value"), headers)


def _kind(reason: str) -> RejectKind:
    if reason.startswith("empty"):
        return "empty"
    if reason.startswith(("not JSON", "not a JSON object")):
        return "not_json"
    return reject_kind(reason)


class ClickHouseStreamWriter(DataSourceStreamArrowWriter):
    """Created on the driver when the query is planned (and pickled to executors), and again for each commit."""

    def __init__(self, options: SinkOptions, schema: StructType, version: tuple[int, ...]) -> None:
        self.options = options
        self.columns = tuple(schema.fieldNames())
        if "value" not in self.columns and "event_type" not in self.columns:
            raise ConfigError(
                f'sink "{SINK_FORMAT}" needs a binary value column of event JSON or the events layout of the '
                f"sparktap-kafka source; got columns {list(self.columns)}"
            )
        self.version = version

    def _schema(self) -> Schema:
        target = self.options.target
        return schema_for(self.version, target.database, self.options.retention_days, target.cluster)

    # -- executors --------------------------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkMessage | WrittenMessage:
        ids = task_ids() if self.options.writes == "executors" else None  # before any work: fail early outside
        schema = self._schema()
        decoder = _decoder(schema, self.options.max_message_bytes) if "value" in self.columns else None
        out = Decoded()
        dead: list[DeadLetter] = []
        for batch in iterator:
            if decoder is not None:
                self._decode(decoder, batch, out, dead)
            else:
                self._typed(schema, batch, out, dead)
        tables = {name: chunk.columns for name, chunk in out.tables.items()}
        if ids is not None:
            o = self.options
            return write_task(
                task_storage(o.url),
                o.sink_id,
                ids,
                tables,
                len(dead),
                lambda: self._send_dead_letters(dead, ids.batch_id),
            )
        return SinkMessage(tables, out.rows, dead)

    @staticmethod
    def _decode(decoder: Decoder, batch: pa.RecordBatch, out: Decoded, dead: list[DeadLetter]) -> None:
        """The consumer-group collector's path: message values -> checked columns per table, rejects."""
        values = batch.column("value").to_pylist()
        decoded = decoder.decode(values)
        for name, chunk in decoded.tables.items():
            out.add(name, chunk.columns, chunk.indices)
        if decoded.rejects:
            meta = {
                c: batch.column(c).to_pylist()
                for c in ("key", "topic", "partition", "offset", "timestamp")
                if c in batch.schema.names
            }
            for reject in decoded.rejects:
                record = {c: meta[c][reject.index] for c in meta}
                record["value"] = values[reject.index]
                dead.append(_dead_letter(record, reject.kind, reject.reason))

    @staticmethod
    def _typed(schema: Schema, batch: pa.RecordBatch, out: Decoded, dead: list[DeadLetter]) -> None:
        """The ``events`` layout without ``value``: validated events from the typed columns, flattened as the
        collector flattens pydantic-validated events (columns, then the column range checks)."""
        import pyarrow.compute as pc

        errors = batch.column("error")
        if errors.null_count < batch.num_rows:
            for record in batch.filter(pc.is_valid(errors)).to_pylist():
                dead.append(_dead_letter(record, _kind(str(record["error"])), str(record["error"])))
            batch = batch.filter(pc.is_null(errors))
        sources: dict[str, list[dict[str, Any]]] = {}
        payload = batch.column("payload")
        if payload.null_count < batch.num_rows:
            for record in batch.filter(pc.is_valid(payload)).select([*ENVELOPE_FIELDS, *_META, "payload"]).to_pylist():
                record["payload"] = orjson.loads(record["payload"])
                sources.setdefault(RAW_TABLE, []).append(record)
            batch = batch.filter(pc.is_null(payload))
        types = batch.column("event_type")
        for event_type in pc.unique(types).to_pylist() if batch.num_rows else ():
            part = batch.filter(pc.equal(types, event_type)).select([*ENVELOPE_FIELDS, *_META, event_type])
            for record in part.to_pylist(maps_as_pydicts="strict"):
                record.update(record.pop(event_type) or {})
                sources.setdefault(schema.table_for(event_type).name, []).append(record)
        lo, hi, outside = _decoder(schema, 1_048_576).window()  # the decode path's event-time window, here too
        for name, events in sources.items():
            spec = schema.tables[name]
            columns = columnizer(spec)(events)
            failed: dict[int, tuple[RejectKind, str]] = {}
            for j, t in enumerate(columns.get("event_time_ms", ())):
                if not (isinstance(t, int) and lo <= t <= hi):
                    failed[j] = ("event_time_out_of_range", outside)
            for rule in range_rules(spec):
                for j in rule.check(columns[rule.name]) or ():
                    failed.setdefault(j, ("invalid", rule.reason))
            if failed:
                for j, (kind, reason) in sorted(failed.items()):
                    dead.append(_dead_letter(events[j], kind, reason))
                keep = [j for j in range(len(events)) if j not in failed]
                columns = {c: [values[j] for j in keep] for c, values in columns.items()}
            out.add(name, columns, list(range(len(next(iter(columns.values()), [])))))

    # -- driver -----------------------------------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        o = self.options
        if o.writes == "executors":
            self._record([m for m in messages if isinstance(m, WrittenMessage)], batchId)
            return
        parts = [cast(SinkMessage, m) for m in messages if m is not None]
        dead = [letter for part in parts for letter in part.dead_letters]
        tables: dict[str, dict[str, list[Any]]] = {}
        for part in parts:
            for table, columns in part.tables.items():
                into = tables.setdefault(table, {name: [] for name in columns})
                for name, values in columns.items():
                    into[name].extend(values)
        if o.ingest:
            if remote_is_committed(o.ingest, o.ingest_token, o.sink_id, batchId):
                result = BatchResult("skipped", 0)
            else:
                self._send_dead_letters(dead, batchId)
                result = remote_commit(o.ingest, o.ingest_token, o.sink_id, batchId, tables, len(dead))
        else:
            with open_storage(o.target) as storage:  # chDB: works when no other process holds the store
                _prepare(storage, o)
                if is_committed(storage, o.sink_id, batchId):
                    result = BatchResult("skipped", 0)
                else:
                    self._send_dead_letters(dead, batchId)
                    result = commit_batch(storage, o.sink_id, batchId, tables, len(dead))
        if result.status == "skipped":
            log.info('batch %d of sink="%s" is already in ClickHouse: skipped the replay', batchId, o.sink_id)
        else:
            log.info('batch %d of sink="%s": %d rows, %d dead letters', batchId, o.sink_id, result.rows, len(dead))

    def _record(self, messages: list[WrittenMessage], batch_id: int) -> None:
        """Executor-side writes: the tasks wrote the rows; record the batch in the ledger (no row data here)."""
        o = self.options
        counts, dead = batch_counts(messages)
        with open_storage(o.target) as storage:
            result = record_batch(storage, o.sink_id, batch_id, counts, dead)
        if result.status == "skipped":
            log.info('batch %d of sink="%s" is already in ClickHouse: skipped the replay', batch_id, o.sink_id)
        else:
            log.info(
                'batch %d of sink="%s": %d rows written by %d tasks, %d dead letters',
                batch_id,
                o.sink_id,
                result.rows,
                len(messages),
                dead,
            )

    def _send_dead_letters(self, dead: list[DeadLetter], batch_id: int) -> None:
        """Send the batch's dead letters and wait for their acknowledgements (before its rows go in)."""
        o = self.options
        if not dead:
            return
        if not o.dead_letter_topic:
            first = dict(dead[0].headers)
            log.warning(
                "batch %d: %d messages are not valid events and no deadLetterTopic is set; first: %s",
                batch_id,
                len(dead),
                first.get(HEADER_REASON, b"").decode(),
            )
            return
        queue = DeadLetterQueue(dict(o.kafka_conf), o.dead_letter_topic)
        try:
            for letter in dead:
                queue.send(letter)
            deadline = time.monotonic() + _DLQ_TIMEOUT
            settled = queue.settle(lambda: time.monotonic() > deadline, time.sleep, lambda: 1.0)
        finally:
            queue.close()
        if not settled:
            raise StreamingError(
                f'cannot deliver {len(dead)} dead letters of batch {batch_id} to topic="{o.dead_letter_topic}" '
                f"within {_DLQ_TIMEOUT:g}s: check Kafka, then restart the query (the batch is replayed)"
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if self.options.writes == "executors":
            # nothing is recorded or deleted: the re-run (same offsets, same rows) collapses with what tasks wrote
            log.warning(
                'batch %d of sink="%s" aborted: not recorded in the ledger; rows its tasks wrote collapse '
                "with its re-run in the _dedup views",
                batchId,
                self.options.sink_id,
            )
            return
        log.warning('batch %d of sink="%s" aborted: nothing was written', batchId, self.options.sink_id)


class ClickHouseSink(DataSource):
    """``df.writeStream.format("sparktap-clickhouse")``."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(cast(Any, options))
        self.sink_options = SinkOptions.from_options(options)

    @classmethod
    def name(cls) -> str:
        return SINK_FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        options = self.sink_options
        if options.writes == "executors":  # tasks write before any commit: the tables and the ledger first
            with open_storage(options.target) as storage:
                _prepare(storage, options)
        return ClickHouseStreamWriter(options, schema, _server_version(options))

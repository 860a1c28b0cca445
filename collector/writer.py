"""Writing a pending batch into ClickHouse: every table, retried until accepted, bad rows isolated.

- ``StorageUnavailableError`` (server away, timeout, overload): reported through ``on_down`` (the collector pauses
  consumption) and retried after ``wait(backoff)``; retrying is safe because every table deduplicates on
  (app_id, app_attempt, seq) and the offsets are not committed yet.
- A schema error (a table or column missing: someone dropped it): ``ensure_schema`` again, then retry.
- A data error (a value ClickHouse refuses despite validation, e.g. a column an operator narrowed): the table's
  rows are bisected; rows refused on their own are removed from the batch and dead-lettered with
  ``rejected_by_clickhouse``. If every row is refused, it is not the data: retried like an outage.
- Any other permanent error (login refused, read-only user, a CHECK constraint …): retried like an outage, with the
  server's message in the log, so fixing the cause resumes the pipeline without losing anything. After
  ``max_attempts`` refusals of one table's rows the rows are bisected as for a data error, so a message ClickHouse
  refuses on its own is dead-lettered instead of retried forever; while every row is refused (it is not the data),
  the batch keeps being retried and nothing is counted or committed.
- "Too many partitions for single INSERT block": the rows are inserted in halves (the event-time window in
  ``decode.py`` keeps a batch within a few months, so this only happens with a retention of over 8 years).

A table counts as inserted only when the insert call returned: both storages raise when ClickHouse refuses a block.

Streams (a server, ``storage/stream.py``): while the collector drains a backlog, the Arrow rows of a batch go as one
more block into an INSERT kept open over several batches (``write(…, stream=True)``), which the server writes as
one part; they count as inserted only when ``finish_stream`` returned. A stream that fails is given up whole
(``StreamFailed``): its rows are no longer in memory, so the collector reads their messages again and inserts them
batch by batch, with everything above (retries, bisection, dead letters).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Message

from sparktap.collector.arrowpath import is_arrow
from sparktap.collector.batch import Origin, PendingBatch, TableRows
from sparktap.collector.decode import RejectKind
from sparktap.collector.logfmt import fields
from sparktap.collector.metrics import CollectorMetrics
from sparktap.schemas.ddl import Schema
from sparktap.store import Storage, StorageError, StorageUnavailableError
from sparktap.store.access import Reader
from sparktap.store.errors import describe
from sparktap.store.stream import InsertStream
from sparktap.store.teams import ensure_readers
from sparktap.store.views import PLAIN_SUFFIX, ensure_plain_copies, ensure_views

log = logging.getLogger("sparktap.collector")

# (NO_SUCH_COLUMN_IN_TABLE, UNKNOWN_IDENTIFIER, UNKNOWN_TABLE, UNKNOWN_DATABASE): re-run ensure_schema, then retry
SCHEMA_CODES = frozenset({16, 47, 60, 81})
# "these rows are bad": isolate them. A StorageError without a code is a client-side conversion failure (chDB's
# Arrow conversion, clickhouse-driver's packing): also about the values.
DATA_CODES = frozenset({6, 26, 27, 32, 33, 38, 41, 53, 69, 70, 72, 117, 131, 190, 321, 349, 354, 395, 403})

DeadLetterSink = Callable[[list[tuple[Message | Origin, RejectKind, str]]], None]
"""sends dead letters: a consumed message, or where it is in Kafka (a refused row's: read back from there)"""


class StreamFailed(Exception):  # noqa: N818 - control flow between the writer and the batching
    """An open INSERT failed: none of its rows counts as stored, and they must be read from Kafka again."""

    def __init__(self, cause: StorageError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _too_many_partitions(exc: StorageError) -> bool:
    return exc.code == 252 and "partitions" in str(exc).lower()


class Backoff:
    """Exponential backoff with jitter: initial, x2 each time, capped."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = max(initial, maximum)
        self._next = initial

    def next(self) -> float:
        wait = self._next
        self._next = min(self.maximum, self._next * 2)
        return wait * random.uniform(0.8, 1.2)  # noqa: S311 - jitter, not cryptography

    def reset(self) -> None:
        self._next = self.initial


def prepare_storage(storage: Storage, retention_days: int, plain_copy: bool, readers: Sequence[Reader] = ()) -> Schema:
    """Create or migrate the schema, the collector's views, (``plain_copy``) the no-dedup copies and the read-only
    users (``readers``: on servers with SQL access control, store/access.py)."""
    schema = storage.ensure_schema(retention_days)
    ensure_views(storage, schema)
    if plain_copy:
        ensure_plain_copies(storage, schema)
    ensure_readers(storage, schema, readers)
    return schema


class BatchWriter:
    """Inserts batches into one storage (and the ``_plain`` copies when ``plain_copy``)."""

    def __init__(
        self,
        storage: Storage,
        metrics: CollectorMetrics,
        *,
        retention_days: int,
        plain_copy: bool,
        dead_letters: DeadLetterSink,
        on_down: Callable[[StorageError, str], None],
        on_up: Callable[[], None],
        backoff: Callable[[], Backoff],
        max_attempts: int = 5,
        on_stream_confirmed: Callable[[], None] = lambda: None,
    ) -> None:
        self.storage = storage
        self.max_attempts = max_attempts
        self.metrics = metrics
        self.retention_days = retention_days
        self.plain_copy = plain_copy
        self._dead_letters = dead_letters
        self._on_down = on_down
        self._on_up = on_up
        self._backoff = backoff
        self.inserted_at: dict[str, float] = {}
        """wall-clock time each table's insert returned, for the batch last written"""
        self.stream: InsertStream | None = None
        """the open INSERT (``storage/stream.py``) of the batches written with ``stream=True`` since it opened"""
        self._streamed: list[tuple[str, int, list[Any]]] = []
        """what the open stream holds, for the metrics once it is confirmed: (table, rows, latency sample); never
        the columns, which are freed once sent"""
        self._on_stream_confirmed = on_stream_confirmed
        self.stream_inserted_at: dict[str, float] = {}
        """wall-clock time the last stream was confirmed, per table it held"""

    @property
    def streaming(self) -> bool:
        return self.stream is not None

    def write(self, batch: PendingBatch, wait: Callable[[float], None], *, stream: bool = False) -> None:
        """Insert every table of ``batch``, retrying until accepted. ``wait(seconds)`` is called between attempts
        (it polls the consumer, and raises to give up the batch). ``stream``: Arrow rows may open an INSERT stream;
        an open one takes every batch it can (StreamFailed when it fails)."""
        backoff = self._backoff()
        self.inserted_at = {}
        for name in list(batch.tables):
            if self._streamed_into(name, batch.tables[name], stream):
                continue
            refusals = 0
            while name in batch.tables and not batch.tables[name].inserted:
                try:
                    try:
                        self._insert(name, batch.tables[name])
                    except StorageUnavailableError as exc:
                        if not (_too_many_partitions(exc) and self._isolate(batch, name, exc, lone_row_is_bad=False)):
                            raise
                    except StorageError as exc:
                        refusals += 1
                        if not self._recover(batch, name, exc, refusals):
                            self._on_down(exc, "ClickHouse refuses the batch (fix the cause shown here)")
                            wait(backoff.next())
                            continue
                except StorageUnavailableError as exc:
                    self._on_down(exc, "cannot insert into ClickHouse")
                    wait(backoff.next())
                    continue
                self._on_up()
                backoff.reset()

    def _streamed_into(self, name: str, rows: TableRows, may_open: bool) -> bool:
        """Send Arrow ``rows`` into the open stream, or into a new one when ``may_open``; False when they are to be
        inserted on their own (an open stream of another table, or one these rows cannot join, is finished first).
        Only ``task_end`` is read into Arrow columns, so one table streams."""
        if self.plain_copy or not rows.columns or not all(map(is_arrow, rows.columns.values())):
            return False
        stream = self.stream
        if stream is not None:
            try:
                sent = stream.table == name and stream.send(rows.columns)
            except StorageError as exc:
                self.cancel_stream()
                raise StreamFailed(exc) from exc
            if sent:
                self._sent(name, rows)
                return True
            self.finish_stream()
        if not may_open:
            return False
        try:
            opened = self.storage.open_stream(name, rows.columns)
        except StorageError as exc:  # nothing counts as sent: inserted on its own, with the retries that has
            log.info("cannot open an INSERT stream: inserting the batch on its own", extra=fields(error=str(exc)))
            return False
        if opened is None:
            return False
        self.stream = opened
        self._sent(name, rows)
        return True

    def _sent(self, name: str, rows: TableRows) -> None:
        rows.inserted = True  # in the open stream: counted once it is confirmed
        emitted = rows.columns.get("emitted_at_ms")
        self._streamed.append((name, rows.rows, self.metrics.latency_sample(emitted) if emitted else []))

    def finish_stream(self) -> None:
        """End the open INSERT and wait for ClickHouse to confirm it (StreamFailed when it does not)."""
        stream = self.stream
        if stream is None:
            return
        try:
            stream.finish()
        except StorageError as exc:
            self.cancel_stream()
            raise StreamFailed(exc) from exc
        self.stream = None
        confirmed_at = time.time()
        self.stream_inserted_at = {}
        for name, count, sample in self._streamed:
            self.stream_inserted_at[name] = self.inserted_at[name] = confirmed_at
            self.metrics.inserted.labels(name).inc(count)
            self.metrics.observe_latency(sample)
        self._streamed = []
        self.metrics.insert_streams.labels("confirmed").inc()
        self._on_stream_confirmed()

    def cancel_stream(self) -> None:
        """Give up the open INSERT: none of its rows counts as stored."""
        if self.stream is not None:
            self.stream.cancel()
            self.stream = None
            self._streamed = []
            self.metrics.insert_streams.labels("failed").inc()

    def write_once(self, batch: PendingBatch) -> None:
        """One attempt at every table not inserted yet (inside a rebalance callback, where waiting is not an
        option); StorageError when it fails."""
        self.inserted_at = {}
        for name, rows in list(batch.tables.items()):
            if not rows.inserted:
                self._insert(name, rows)

    def _insert(self, name: str, rows: TableRows) -> None:
        count = self.storage.insert_columns(name, rows.columns)
        self.inserted_at[name] = time.time()
        if self.plain_copy:
            self.storage.insert_columns(name + PLAIN_SUFFIX, rows.columns)
        rows.inserted = True
        self.metrics.inserted.labels(name).inc(count)
        emitted = rows.columns.get("emitted_at_ms")
        if emitted:
            self.metrics.observe_latency(emitted)

    def _recover(self, batch: PendingBatch, name: str, exc: StorageError, refusals: int = 1) -> bool:
        """Handle a permanent error; False when it could not be (retry like an outage)."""
        if exc.code in SCHEMA_CODES:
            log.warning(
                "a table or column is missing: creating the schema again", extra=fields(table=name, error=str(exc))
            )
            try:
                prepare_storage(self.storage, self.retention_days, self.plain_copy)
            except StorageError as again:
                self._on_down(again, "cannot create the schema again")
                return False
            return True
        if exc.code is None or exc.code in DATA_CODES:
            return self._isolate(batch, name, exc)
        if refusals % self.max_attempts == 0:  # every max_attempts refusals (a bisection costs ~2n inserts)
            log.warning(
                "ClickHouse refused the same rows again: trying them apart, to dead-letter those it refuses "
                "on their own",
                extra=fields(table=name, attempts=refusals, error=str(exc)),
            )
            return self._isolate(batch, name, exc, lone_row_is_bad=False)
        return False

    def _isolate(self, batch: PendingBatch, name: str, exc: StorageError, *, lone_row_is_bad: bool = True) -> bool:
        """Bisect the table's rows: the rows refused on their own go to the DLQ, the others are inserted.
        False when every row is refused (then it is not about the data; a batch of one row counts as refused for
        its data only when ``lone_row_is_bad``, i.e. the error is a data error)."""
        rows = batch.tables[name]
        refused: list[int] = []

        def attempt(start: int, stop: int) -> None:
            try:
                self.storage.insert_columns(name, rows.slice(start, stop))
            except StorageUnavailableError as again:
                if not _too_many_partitions(again) or stop - start == 1:
                    raise
                middle = (start + stop) // 2
                attempt(start, middle)
                attempt(middle, stop)
            except StorageError:
                if stop - start == 1:
                    refused.append(start)
                    return
                middle = (start + stop) // 2
                attempt(start, middle)
                attempt(middle, stop)

        attempt(0, rows.rows)
        if len(refused) == rows.rows and (rows.rows > 1 or not lone_row_is_bad):
            return False
        if refused:
            reason = f"rejected by ClickHouse: {describe(exc.code, exc.name, 'insert failed')}"
            gone = batch.remove_rows(name, set(refused))
            log.warning(
                "ClickHouse refused rows: dead-lettering them", extra=fields(table=name, rows=len(gone), error=str(exc))
            )
            self._dead_letters([(origin, "rejected_by_clickhouse", reason) for origin in gone])
        remaining = batch.tables.get(name)
        if remaining is not None:  # what the bisection inserted is all that is left: finish like a normal insert
            if self.plain_copy:
                self.storage.insert_columns(name + PLAIN_SUFFIX, remaining.columns)
            remaining.inserted = True
            self.inserted_at[name] = time.time()
            self.metrics.inserted.labels(name).inc(remaining.rows)
        return True

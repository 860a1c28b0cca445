"""Executor-side writes of the ``sparktap-clickhouse`` sink into a ClickHouse server (issue 17).

With a ClickHouse server (sink option ``writes=executors``, its default there) every Spark task writes its own
rows straight to ClickHouse and hands the driver a ``WrittenMessage``: counts and ids, no row data. The driver's
``commit(messages, batchId)`` then only records the batch in the ledger (``ingest.record_batch``), so the
commit is no longer a serial step that every row passes through. chDB keeps the driver path (``writes=driver``):
an embedded store lives in one process.

What holds, precisely:

- **Through the ``_dedup`` views (and by distinct event key) every event is there exactly once, always.** Every
  event table is a ``ReplacingMergeTree`` ordered by the event key (``app_id``, ``app_attempt``, ``seq``) and
  partitioned by the event's own month, and the views read it ``FINAL``. A task writes rows decoded from the
  Kafka range Spark gave it; Spark re-runs a batch with the offsets of its offset log, so a retried task, a
  speculative copy, or a batch re-run after a stop or a crash writes rows with keys (and values) already there,
  and they collapse with them. Row-level idempotency by the event key is the mechanism; ClickHouse 18.16 has no
  insert deduplication tokens and no block deduplication for non-replicated tables, and per-(batch, partition)
  staging would bring back a serial step on the driver.
- **In the tables themselves** an event is stored once except in one case: a batch whose tasks wrote but whose
  driver commit did not happen (the query was stopped or the process died mid-batch, a task failed after
  writing, or the batch was aborted). Its re-run writes those rows again, and the second copies stay in the
  table until ClickHouse merges the parts (``OPTIMIZE … FINAL`` forces it); queries read the ``_dedup`` views.
- **A replay of a batch the ledger already has** (Spark died after the driver's commit, before its own commit
  log) writes nothing: every task looks the batch up in the ledger first and returns a ``skipped`` message, and
  the commit skips it too. Its dead letters are not sent again.
- **The driver's commit** records one ledger row (``sink_id``, ``batch_id``, the rows the tasks wrote, per
  table, and the dead letters) unless the ledger has the batch. That row means "every row of this batch is in
  ClickHouse": the tasks only return after ClickHouse confirmed their inserts.
- **abort** records nothing and deletes nothing: rows the batch's tasks wrote stay, and collapse with the
  batch's re-run, which Spark runs with the same offsets when the query restarts.

Dead letters are sent by the task that found them, acknowledged before its rows are written: at least once, as
in the consumer-group collector.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import WriterCommitMessage

from sparktap.collector.streaming.ingest import is_committed
from sparktap.collector.streaming.offsets import StreamingError
from sparktap.store import open_storage
from sparktap.store.target import parse_storage_url

if TYPE_CHECKING:
    from sparktap.store import Storage

log = logging.getLogger("sparktap.collector.streaming")

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property Spark's micro-batch execution sets on every task of a batch (``MicroBatchExecution``)."""


@dataclass
class WrittenMessage(WriterCommitMessage):
    """What a task that wrote its own rows hands to the driver's commit: counts and ids, no row data."""

    batch_id: int
    partition: int
    attempt: int
    rows: int
    tables: dict[str, int]
    """rows written per table"""
    dead_letters: int
    skipped: bool
    """the ledger already had the batch (a replay): the task wrote nothing"""


@dataclass(frozen=True)
class TaskIds:
    batch_id: int
    partition: int
    attempt: int


def task_ids() -> TaskIds:
    """The micro-batch, partition and attempt of the running Spark task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    if context is None or batch is None or not batch.strip().lstrip("-").isdigit():
        raise StreamingError(
            "the sparktap-clickhouse sink writes from executors only inside a streaming micro-batch (no "
            f'{BATCH_ID_PROPERTY} in the task context); use the sink with writeStream, or set option writes="driver"'
        )
    return TaskIds(int(batch), context.partitionId(), context.attemptNumber())


_STORES: dict[str, Storage] = {}


def task_storage(url: str) -> Storage:
    """One connection per Python worker process and URL, kept across tasks (Spark reuses its Python workers)."""
    storage = _STORES.get(url)
    if storage is None:
        storage = _STORES[url] = open_storage(parse_storage_url(url))
    return storage


def write_task(
    storage: Storage,
    sink_id: str,
    ids: TaskIds,
    tables: Mapping[str, Mapping[str, list[Any]]],
    dead_letters: int,
    send_dead_letters: Callable[[], None],
) -> WrittenMessage:
    """Write one task's rows unless the ledger already has its batch; see the module's docstring."""
    if is_committed(storage, sink_id, ids.batch_id):
        log.info(
            'batch %d of sink="%s" is already in ClickHouse: task %d writes nothing',
            ids.batch_id,
            sink_id,
            ids.partition,
        )
        return WrittenMessage(ids.batch_id, ids.partition, ids.attempt, 0, {}, 0, skipped=True)
    send_dead_letters()
    counts: dict[str, int] = {}
    for table in sorted(tables):
        columns = tables[table]
        if columns and len(next(iter(columns.values()))) > 0:
            counts[table] = storage.insert_columns(table, columns)
    return WrittenMessage(
        ids.batch_id, ids.partition, ids.attempt, sum(counts.values()), counts, dead_letters, skipped=False
    )


def batch_counts(messages: list[WrittenMessage]) -> tuple[dict[str, int], int]:
    """The rows per table and the dead letters of a batch, summed over its tasks' messages."""
    counts: dict[str, int] = {}
    for message in messages:
        for table, rows in message.tables.items():
            counts[table] = counts.get(table, 0) + rows
    return counts, sum(message.dead_letters for message in messages)

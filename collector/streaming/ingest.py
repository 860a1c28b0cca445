"""Committing one micro-batch into ClickHouse exactly once: the batch ledger.

Exactly once per micro-batch: ``commit_batch`` runs in one place per batch (Spark's driver-side commit, or the
process serving the store) under a lock. It looks the batch up in the ledger table ``stream_batches`` (one row
per committed ``(sink_id, batch_id)``); a batch already there is a replay and is skipped. Otherwise it inserts
the batch's rows and then the ledger row, in the same step. A crash between the two leaves rows without a
ledger row; Spark replays that batch with the same id and the same rows, which are inserted again and collapse
with the first copy (every event table deduplicates on ``(app_id, app_attempt, seq)``), so the dedup views stay
exact in that window too.

chDB opens a directory from one process only, and Spark commits in a Python worker process: ``store_server.py``
serves a chDB store from the process that holds it, and calls ``commit_batch`` there.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from sparktap.schemas.ddl import quote_literal
from sparktap.store import Storage

log = logging.getLogger("sparktap.collector.streaming")

LEDGER_TABLE = "stream_batches"
Columns = Mapping[str, Sequence[Any]]
_FRAME = struct.Struct(">Q")
_ACCEPTED, _REFUSED = b"+", b"-"
_TOKEN_BYTES = 32  # secrets.token_hex(16)
_IDLE_TIMEOUT = 600.0  # a connection that sends nothing for this long is dropped
_MAX_FRAME = 4 << 30


def ledger_ddl(storage: Storage) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {storage.qualified(LEDGER_TABLE)}\n"
        "(\n    `sink_id` String,\n    `batch_id` Int64,\n    `rows` UInt64,\n    `dead_letters` UInt64,\n"
        "    `tables` String,\n    `committed_at` DateTime DEFAULT now()\n)\n"
        "ENGINE = ReplacingMergeTree\nORDER BY (`sink_id`, `batch_id`)"
    )


def ensure_ledger(storage: Storage) -> None:
    """Create the ledger table (idempotent); the event tables come from ``storage.ensure_schema()``."""
    storage.command(ledger_ddl(storage))


def is_committed(storage: Storage, sink_id: str, batch_id: int) -> bool:
    rows = storage.query(
        f"SELECT count() AS n FROM {storage.qualified(LEDGER_TABLE)} "  # noqa: S608 - literals are quoted
        f"WHERE sink_id = {quote_literal(sink_id)} AND batch_id = {int(batch_id)}"
    )
    return bool(rows) and int(rows[0]["n"]) > 0


@dataclass(frozen=True)
class BatchResult:
    status: str  # "committed" or "skipped"
    rows: int


COMMIT_LOCK = threading.Lock()
"""held while a batch is looked up and committed (the store server takes it for its look-ups too)"""


def commit_batch(
    storage: Storage, sink_id: str, batch_id: int, tables: Mapping[str, Columns], dead_letters: int = 0
) -> BatchResult:
    """Insert a batch's rows and its ledger row, unless the ledger already has the batch (a replay)."""
    with COMMIT_LOCK:
        if is_committed(storage, sink_id, batch_id):
            log.info('batch %d of sink="%s" is already in ClickHouse: skipping the replay', batch_id, sink_id)
            return BatchResult("skipped", 0)
        counts: dict[str, int] = {}
        for table in sorted(tables):
            columns = tables[table]
            if columns and len(next(iter(columns.values()))) > 0:
                counts[table] = storage.insert_columns(table, columns)
        _insert_ledger_row(storage, sink_id, batch_id, counts, dead_letters)
        return BatchResult("committed", sum(counts.values()))


def record_batch(
    storage: Storage, sink_id: str, batch_id: int, counts: Mapping[str, int], dead_letters: int = 0
) -> BatchResult:
    """Record a batch whose rows Spark's tasks already wrote (executor-side writes): the ledger row only, with
    the tasks' counts, unless the ledger already has the batch (a replay: nothing changes)."""
    with COMMIT_LOCK:
        if is_committed(storage, sink_id, batch_id):
            return BatchResult("skipped", 0)
        _insert_ledger_row(storage, sink_id, batch_id, counts, dead_letters)
        return BatchResult("committed", sum(counts.values()))


def _insert_ledger_row(
    storage: Storage, sink_id: str, batch_id: int, counts: Mapping[str, int], dead_letters: int
) -> None:
    storage.insert_columns(
        LEDGER_TABLE,
        {
            "sink_id": [sink_id],
            "batch_id": [int(batch_id)],
            "rows": [sum(counts.values())],
            "dead_letters": [int(dead_letters)],
            "tables": [orjson.dumps(dict(counts), option=orjson.OPT_SORT_KEYS).decode()],
        },
    )

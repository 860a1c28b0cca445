"""Benchmark: bytes ClickHouse stores per ``task_end`` event after merges, as the collector writes them.

    python -m bench.collector_storage [--events 1000000] [--server]

Input: ``--events`` realistic ``task_end`` events (``bench/_collector_data.py``: 8 applications, stages of 2,000
tasks alternating map and reduce, zero counters left out as the listener does), decoded and inserted exactly as the
collector does (``Decoder`` -> ``BatchWriter``, batches of 20,000 rows) into chDB (``--server``: also into a
throwaway clickhouse-server 18.16, whose DDL has no codecs), then ``OPTIMIZE TABLE task_end FINAL``. Bytes come from
``system.parts`` (active parts): on disk (``bytes_on_disk``: compressed columns, marks, primary index, checksums)
and compressed column data alone; the heaviest columns from ``system.columns``.

Prints one line per figure; never fails the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench._collector_data import task_events

BATCH = 20_000


def _fill(storage: Any, events: int, arrow: bool) -> None:
    from confluent_kafka import Message

    from sparktap.collector.batch import PendingBatch
    from sparktap.collector.decode import Decoder
    from sparktap.collector.metrics import CollectorMetrics
    from sparktap.collector.writer import Backoff, BatchWriter, prepare_storage

    schema = prepare_storage(storage, 30, plain_copy=False)
    decoder = Decoder(schema, arrow=arrow)

    def fail(*args: Any) -> None:
        raise RuntimeError(f"unexpected: {args}")

    writer = BatchWriter(
        storage,
        CollectorMetrics(),
        retention_days=30,
        plain_copy=False,
        dead_letters=fail,
        on_down=fail,
        on_up=lambda: None,
        backoff=lambda: Backoff(0.1, 1.0),
    )
    values: list[bytes] = []
    for offset, event in enumerate(task_events(events)):
        values.append(orjson.dumps(event))
        if len(values) == BATCH or offset == events - 1:
            first = offset + 1 - len(values)
            messages = [Message(topic="bench", partition=0, offset=first + i, value=v) for i, v in enumerate(values)]
            batch = PendingBatch()
            batch.add(messages, decoder.decode(values))
            writer.write(batch, lambda s: None)
            values = []


def _report(storage: Any, label: str, events: int) -> None:
    storage.command("OPTIMIZE TABLE task_end FINAL")
    db = storage.database
    (parts,) = storage.query(
        "SELECT sum(rows) AS rows, sum(bytes_on_disk) AS disk, sum(data_compressed_bytes) AS compressed, "
        "sum(data_uncompressed_bytes) AS raw, count() AS parts "
        f"FROM system.parts WHERE database = '{db}' AND table = 'task_end' AND active"  # noqa: S608
    )
    rows = int(parts["rows"])
    if rows != events:
        raise RuntimeError(f"{label}: {rows} rows stored, expected {events}")
    print(
        f"{label}: {int(parts['disk']) / rows:.1f} bytes/event on disk, "
        f"{int(parts['compressed']) / rows:.1f} bytes/event compressed column data "
        f"({int(parts['raw']) / rows:.0f} uncompressed; {int(parts['parts'])} part(s) after OPTIMIZE FINAL)"
    )
    top = storage.query(
        "SELECT name, data_compressed_bytes AS bytes FROM system.columns "  # noqa: S608
        f"WHERE database = '{db}' AND table = 'task_end' ORDER BY bytes DESC LIMIT 6"
    )
    print("  heaviest columns (bytes/event): " + ", ".join(f"{r['name']} {int(r['bytes']) / rows:.2f}" for r in top))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--server", action="store_true", help="also measure a clickhouse-server 18.16")
    args = parser.parse_args()
    from sparktap.store import open_storage
    from sparktap.store.target import StorageTarget

    with tempfile.TemporaryDirectory(prefix="sparktap-bench-") as tmp:
        storage = open_storage(StorageTarget(kind="chdb", path=Path(tmp) / "chdb"))
        try:
            _fill(storage, args.events, arrow=True)
            version = ".".join(map(str, storage.version()[:2]))
            _report(storage, f"chDB (ClickHouse {version}), {args.events:,} task_end events", args.events)
        finally:
            storage.close()
    if args.server:
        from tests.support.services.clickhouse import ClickHouseServerProcess

        with ClickHouseServerProcess() as server:
            storage = open_storage(server.target("bench"))
            try:
                _fill(storage, args.events, arrow=False)
                version = ".".join(map(str, storage.version()[:2]))
                _report(storage, f"clickhouse-server {version}, {args.events:,} task_end events", args.events)
            finally:
                storage.close()


if __name__ == "__main__":
    main()

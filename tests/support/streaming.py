"""Helpers of the Structured Streaming pipeline tests: events, producing, stored counts, the sink's ledger and
the checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from confluent_kafka import Producer

from sparktap.collector.streaming.ingest import LEDGER_TABLE
from sparktap.schemas.examples import example_event
from sparktap.store import Storage


def events(count: int, apps: int = 3, event_type: str = "task_end") -> list[tuple[bytes, bytes]]:
    """(key, value) of ``count`` valid events with unique (app_id, seq)."""
    out = []
    for i in range(count):
        app = f"app-{i % apps}"
        event = example_event(event_type, seq=i // apps + 1, app_id=app)
        out.append((app.encode(), event.model_dump_json().encode()))
    return out


def produce(bootstrap: str, topic: str, messages: Sequence[tuple[bytes | None, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def count(storage: Storage, table: str) -> int:
    return int(storage.query(f"SELECT count() AS n FROM {storage.qualified(table)}")[0]["n"])  # noqa: S608


def ledger(storage: Storage) -> list[tuple[int, int]]:
    rows = storage.query(f"SELECT batch_id, rows FROM {storage.qualified(LEDGER_TABLE)} ORDER BY batch_id")  # noqa: S608
    return [(int(r["batch_id"]), int(r["rows"])) for r in rows]


def drop_last_commit(checkpoint: Path) -> int:
    """Forget that Spark finished the last batch (as if it died right after the sink's commit): it is replayed."""
    commits = sorted((p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    (checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    return int(last.name)


def kafka_topic_named(bootstrap: str, name: str, partitions: int = 1) -> None:
    from sparktap.local.broker import create_topic

    create_topic(bootstrap, name, partitions=partitions)

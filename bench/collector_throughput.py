"""Benchmark: consumer-group collector throughput, Kafka -> ClickHouse (chDB), per core, with the broker's own
consume rate measured in the same run so the collector's cost is separable.

    python -m bench.collector_throughput [--events 200000] [--partitions 4]

Input: ``--events`` realistic ``task_end`` messages (``bench/_collector_data.py``, ~730 bytes each) produced once
to a fresh topic of an embedded tansu broker (``SPARKTAP_BENCH_KAFKA=host:port`` for another broker). Then, in
this process (CPU = ``time.process_time()``: every thread of this process — librdkafka's, chDB's merges — but
not the broker's):

1. **broker consume**: a plain consumer (``assign()``, no group) reads the whole topic: Kafka client + broker cost;
2. **collector pipeline without Kafka**: the same messages through the collector's decode, validation, batching
   and chDB inserts (``Decoder`` -> ``PendingBatch`` -> ``BatchWriter``, default batch size): the collector's own
   cost, i.e. "excluding broker time";
3. **collector end to end**: ``Collector`` (consumer group, default settings) on its own chDB store, until every
   row is in; its CPU minus (1) gives the collector's cost again, measured the other way. Printed twice: over the
   whole run (start-up included: the group join and the creation of the schema in chDB), and in the steady state
   (from the first batch's report to the last, for the rows of the batches after the first).

Prints one line per figure; never fails the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench._collector_run import produce_tasks, run_collector

DEFAULT_EVENTS = 200_000


def _consume_all(bootstrap: str, topic: str, events: int) -> tuple[list[Any], float, float]:
    """Read the topic with assign(): (messages, wall seconds, CPU seconds)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "queued.max.messages.kbytes": 32_768,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    messages: list[Any] = []
    wall, cpu = time.monotonic(), time.process_time()
    deadline = wall + 300
    while len(messages) < events and time.monotonic() < deadline:
        messages.extend(m for m in consumer.consume(10_000, 1.0) if m.error() is None)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    consumer.close()
    if len(messages) < events:
        raise RuntimeError(f"read {len(messages)} of {events} messages")
    return messages, wall, cpu


def _pipeline(messages: list[Any], store: Path) -> dict[str, float]:
    """Decode, validate, batch and insert into chDB like the collector does, without Kafka: wall and CPU seconds,
    with the CPU split into decoding (JSON, checks, columns) and writing (Arrow conversion, chDB insert)."""
    from sparktap.collector.batch import PendingBatch
    from sparktap.collector.decode import Decoder
    from sparktap.collector.metrics import CollectorMetrics
    from sparktap.collector.settings import CollectorSettings
    from sparktap.collector.writer import Backoff, BatchWriter, prepare_storage
    from sparktap.store import open_storage
    from sparktap.store.target import StorageTarget

    cfg = CollectorSettings()
    storage = open_storage(StorageTarget(kind="chdb", path=store))
    try:
        schema = prepare_storage(storage, 30, plain_copy=False)
        decoder = Decoder(schema, cfg.max_message_bytes, arrow=True)  # as the collector does on chDB

        def no_dead_letters(items: Any) -> None:
            raise RuntimeError(f"unexpected dead letters: {items[:1]}")

        def fail(exc: Any, what: str) -> None:
            raise RuntimeError(f"{what}: {exc}")

        writer = BatchWriter(
            storage,
            CollectorMetrics(),
            retention_days=30,
            plain_copy=False,
            dead_letters=no_dead_letters,
            on_down=fail,
            on_up=lambda: None,
            backoff=lambda: Backoff(0.1, 1.0),
        )
        wall, cpu = time.monotonic(), time.process_time()
        write_cpu = 0.0
        batch = PendingBatch()
        for start in range(0, len(messages), cfg.consume_chunk):
            chunk = messages[start : start + cfg.consume_chunk]
            batch.add(chunk, decoder.decode([m.value() for m in chunk]))
            if batch.rows >= cfg.batch_rows or start + cfg.consume_chunk >= len(messages):
                before = time.process_time()
                writer.write(batch, lambda s: None)
                write_cpu += time.process_time() - before
                batch = PendingBatch()
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        rows = int(storage.query("SELECT count() AS n FROM task_end")[0]["n"])
        if rows != len(messages):
            raise RuntimeError(f"stored {rows} of {len(messages)} rows")
        return {"wall": wall, "cpu": cpu, "decode": cpu - write_cpu, "write": write_cpu}
    finally:
        storage.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    from sparktap.local.broker import TansuBroker, create_topic

    external = os.environ.get("SPARKTAP_BENCH_KAFKA", "")
    broker = None if external else TansuBroker().start()
    bootstrap = external or (broker.bootstrap_servers if broker else "")
    try:
        topic = f"bench-collector-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, partitions=args.partitions)
        n = args.events
        produce_s = produce_tasks(bootstrap, topic, n)
        print(f"input: {n:,} task_end messages, {args.partitions} partitions, produced in {produce_s:.1f}s")
        messages, wall, consume_cpu = _consume_all(bootstrap, topic, n)
        print(f"broker consume (assign, no group): {n / wall:,.0f} msg/s wall, {n / consume_cpu:,.0f} msg/s per core")
        with tempfile.TemporaryDirectory(prefix="sparktap-bench-") as tmp:
            pipe = _pipeline(messages, Path(tmp) / "pipeline")
            del messages
            print(
                f"collector pipeline without Kafka (decode + validate + batch + chDB insert): "
                f"{n / pipe['cpu']:,.0f} events/s per core ({n / pipe['wall']:,.0f} events/s wall)"
            )
            print(
                f"  of which decode + validate + columns: {pipe['decode'] / n * 1e6:.2f} µs/event "
                f"({n / pipe['decode']:,.0f} events/s per core); Arrow + chDB insert: "
                f"{pipe['write'] / n * 1e6:.2f} µs/event ({n / pipe['write']:,.0f} events/s per core)"
            )
            result = run_collector(bootstrap, topic, n, url=f"chdb://{Path(tmp) / 'collector'}")
        print(
            f"collector end to end, Kafka -> chDB: {n / result['wall']:,.0f} events/s wall, "
            f"{n / result['cpu']:,.0f} events/s per core over the whole run (group join {result['join']:.1f}s "
            "and schema creation included)"
        )
        own = result["cpu"] - consume_cpu
        print(
            f"  minus the broker consume CPU: {n / own:,.0f} events/s per core "
            f"(Kafka client share of its CPU: {consume_cpu / result['cpu']:.0%})"
        )
        rows, cpu = result["steady_rows"], result["steady_cpu"]
        own = cpu - consume_cpu * rows / n
        print(
            f"collector end to end, steady state (the batches after the first, {rows:,.0f} events): "
            f"{rows / cpu:,.0f} events/s per core; minus the broker consume CPU: {rows / own:,.0f} events/s "
            "per core"
        )
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()

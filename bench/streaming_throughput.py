"""Benchmark: rows/s from Kafka into ClickHouse (chDB) through the Structured Streaming engine, side by side with
the consumer-group collector, on the same topic in one run.

    python -m bench.streaming_throughput [--events 200000] [--partitions 4] [--max-offsets 50000]

Input: the collector benchmark's (``bench/_collector_data.py``): ``--events`` realistic ``task_end`` messages
(~730 bytes each) produced once to a fresh topic of an embedded tansu broker (``SPARKTAP_BENCH_KAFKA=host:port``
for another broker). Every engine reads the whole topic from the start into its own database of one chDB store
(this process holds it, as ``sparktap collect`` does), and its rows are counted:

- consumer-group collector (``collector/consumer.py``, default settings): timed from its first batch (the
  group join, ~20 s on tansu, is reported apart) until every row is in;
- Structured Streaming, Spark local[2] (``sparktap collect --engine spark``, AvailableNow, ``--max-offsets`` per
  micro-batch), once with ``parse=raw`` (the default: the sink parses with the collector's decoder) and once with
  ``parse=events`` (typed columns in the source): timed from query start to end (the first batch includes
  Python worker start-up), and steady state (the batches after the first).

Prints one line per figure and the ratios; never fails the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench._collector_run import produce_tasks, run_collector


def rows_in(storage: Any) -> int:
    from sparktap.schemas.ddl import RAW_TABLE
    from sparktap.schemas.events import EVENT_TYPES

    total = 0
    for table in [*EVENT_TYPES, RAW_TABLE]:
        try:
            total += int(storage.query(f"SELECT count() AS n FROM {storage.qualified(table)}")[0]["n"])  # noqa: S608
        except Exception:  # noqa: BLE001 - the table does not exist yet
            return 0
    return total


def run_streaming(
    spark: Any,
    bootstrap: str,
    topic: str,
    storage: Any,
    parse: str,
    max_offsets: int,
    checkpoint: Path,
    sink_options: dict[str, str] | None = None,
) -> dict[str, float]:
    from sparktap.collector.streaming.run import CollectorOptions, start_collector

    options = CollectorOptions(
        bootstrap_servers=bootstrap,
        checkpoint=checkpoint,
        topic=topic,
        trigger="available-now",
        max_offsets_per_trigger=max_offsets,
        parse=parse,  # type: ignore[arg-type]
        sink_options=sink_options or {},
    )
    started = time.monotonic()
    with start_collector(spark, storage, options) as job:
        job.await_termination()
        progress = list(job.query.recentProgress)
    seconds = time.monotonic() - started
    batches = [p for p in progress if int(p["numInputRows"]) > 0]
    steady_rows = sum(int(p["numInputRows"]) for p in batches[1:])
    steady_ms = sum(int(p["durationMs"]["triggerExecution"]) for p in batches[1:])
    return {
        "seconds": seconds,
        "rows": rows_in(storage),
        "batches": len(batches),
        "steady": steady_rows / (steady_ms / 1000) if steady_ms else 0.0,
    }


def warm_up(spark: Any, bootstrap: str, storage: Any, checkpoint: Path) -> None:
    """A tiny query first, so the JVM's first-query costs are not billed to the first engine measured."""
    from sparktap.local.broker import create_topic

    topic = f"bench-warmup-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions=1)
    produce_tasks(bootstrap, topic, 100)
    run_streaming(spark, bootstrap, topic, storage, "raw", 1000, checkpoint)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets", type=int, default=50_000)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from sparktap.local.broker import TansuBroker, create_topic
    from sparktap.store import open_storage
    from sparktap.store.target import StorageTarget

    scratch = args.dir or Path(tempfile.mkdtemp(prefix="sparktap-bench-"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    external = os.environ.get("SPARKTAP_BENCH_KAFKA", "").strip()
    broker = None if external else TansuBroker().start()
    bootstrap = external or broker.bootstrap_servers  # type: ignore[union-attr]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sparktap-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    stores: dict[str, Any] = {}
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions=args.partitions)
        create_topic(bootstrap, f"{topic}.dlq", partitions=1)
        produced = produce_tasks(bootstrap, topic, args.events)
        print(
            f"input: {args.events} events on {args.partitions} partitions, produced in {produced:.1f}s; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        for name in ("warmup", "consumer", "spark_raw", "spark_events"):
            stores[name] = open_storage(StorageTarget(kind="chdb", path=scratch / "chdb", database=f"bench_{name}"))
        warm_up(spark, bootstrap, stores["warmup"], scratch / "chk-warmup")

        consumer = run_collector(bootstrap, topic, args.events, storage=stores["consumer"])
        print(
            f"consumer-group collector: {args.events / consumer['wall']:,.0f} rows/s "
            f"({args.events} rows in {consumer['wall']:.1f}s; group join {consumer['join']:.1f}s not counted)"
        )
        results = {}
        for parse in ("raw", "events"):
            r = run_streaming(
                spark,
                bootstrap,
                topic,
                stores[f"spark_{parse}"],
                parse,
                args.max_offsets,
                scratch / f"chk-{parse}-{uuid.uuid4().hex[:6]}",
            )
            if r["rows"] != args.events:
                raise RuntimeError(f"spark parse={parse} stored {r['rows']:.0f} of {args.events} rows")
            results[parse] = r
            print(
                f"structured streaming parse={parse}: {r['rows'] / r['seconds']:,.0f} rows/s end to end "
                f"({r['rows']:.0f} rows, {r['batches']:.0f} batches in {r['seconds']:.1f}s); "
                f"steady state {r['steady']:,.0f} rows/s"
            )
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        base = args.events / consumer["wall"]
        for parse, r in results.items():
            print(
                f"ratio spark parse={parse} / consumer: end to end {r['rows'] / r['seconds'] / base:.2f}, "
                f"steady state {r['steady'] / base:.2f}"
            )
    finally:
        for storage in stores.values():
            storage.close()
        spark.stop()
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

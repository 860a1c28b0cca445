"""Benchmark: the Spark engine into a ClickHouse server, rows/s with 1 and 2 executor cores, the driver's commit
inserting every row (``writes=driver``, before issue 17) beside each task writing its own rows
(``writes=executors``), side by side in one run.

    python -m bench.streaming_executor_writes [--events 200000] [--partitions 4] [--max-offsets 50000] [--rounds 2]

Input: the collector benchmark's (``bench/_collector_data.py``): ``--events`` realistic ``task_end`` messages
(~730 bytes each) produced once to a fresh topic of a local Apache Kafka broker (``SPARKTAP_BENCH_KAFKA=host:port``
for another broker). Each run is ``sparktap collect --engine spark`` (``start_collector``, AvailableNow,
``--max-offsets`` records per micro-batch, ``parse=raw``) reading the whole topic from the start into its own
database of one Debian clickhouse-server 18.16 started here; its rows are counted (every run must store them all).
For each Spark master, ``local[1]`` then ``local[2]`` (one and two executor cores; one session each, warmed up by a
tiny query first), the two paths alternate ``--rounds`` times. "End to end" is query start to end; "steady state"
is the micro-batches after the first (the first includes Python worker start-up). The best round of each is
printed, with the ratios executors / driver and local[2] / local[1].

Then the driver's commit step alone, in this process, for one micro-batch of ``--max-offsets`` rows: unpickling
the tasks' commit messages (as Spark's commit worker does) and ``commit(messages, batchId)``, with the rows in
the messages (``writes=driver``: the insert) and with counts only (``writes=executors``: the ledger row).

Prints one line per figure; never fails the suite (``make bench``).
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

from bench._collector_run import produce_tasks
from bench.streaming_throughput import run_streaming

MODES = ("driver", "executors")
MASTERS = ("local[1]", "local[2]")


def commit_step(server: Any, rows: int, rounds: int) -> dict[str, tuple[float, int]]:
    """Seconds of the driver's commit for one batch of ``rows`` task_end rows (best of ``rounds``), and the bytes
    of the pickled commit messages, per path."""
    import pickle

    from bench._collector_data import task_messages
    from sparktap.collector.decode import Decoder
    from sparktap.collector.streaming.executor import WrittenMessage
    from sparktap.collector.streaming.ingest import ensure_ledger
    from sparktap.collector.streaming.parser import spark_schema
    from sparktap.collector.streaming.sink import ClickHouseStreamWriter, SinkMessage, SinkOptions
    from sparktap.store import open_storage

    out: dict[str, tuple[float, int]] = {}
    for mode in MODES:
        database = f"bench_commit_{mode}_{uuid.uuid4().hex[:6]}"
        with open_storage(server.target(database), send_receive_timeout=300) as storage:
            schema = storage.ensure_schema()
            ensure_ledger(storage)
            decoded = Decoder(schema).decode([value for _, value in task_messages(rows)])
            tables = {name: chunk.columns for name, chunk in decoded.tables.items()}
            counts = {name: len(next(iter(columns.values()))) for name, columns in tables.items()}
            messages: list[Any] = (
                [SinkMessage(tables, decoded.rows, [])]
                if mode == "driver"
                else [WrittenMessage(0, 0, 0, decoded.rows, counts, 0, skipped=False)]
            )
            blob = pickle.dumps(messages)
            options = SinkOptions.from_options(
                {"url": storage.target.url(), "writes": mode, "ensureSchema": "false", "sinkId": "bench"}
            )
            writer = ClickHouseStreamWriter(options, spark_schema("raw"), storage.version())
            best = float("inf")
            for batch in range(rounds):
                started = time.perf_counter()
                writer.commit(pickle.loads(blob), batch)  # noqa: S301 - our own bytes
                best = min(best, time.perf_counter() - started)
            out[mode] = (best, len(blob))
            storage.command(f"DROP DATABASE IF EXISTS `{database}`")
    return out


def session(master: str) -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("sparktap-bench-executor-writes")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args(argv)

    from sparktap.local.broker import create_topic
    from sparktap.store import open_storage
    from tests.support.services.clickhouse import ClickHouseServerProcess
    from tests.support.services.kafka import ApacheKafkaBroker

    scratch = args.dir or Path(tempfile.mkdtemp(prefix="sparktap-bench-"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    external = os.environ.get("SPARKTAP_BENCH_KAFKA", "").strip()
    broker = None if external else ApacheKafkaBroker(directory=scratch / "kafka").start()
    bootstrap = external or broker.bootstrap_servers  # type: ignore[union-attr]
    server = ClickHouseServerProcess(scratch / "clickhouse", startup_timeout=60).start()
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions=args.partitions)
        produced = produce_tasks(bootstrap, topic, args.events)
        warm = f"bench-warmup-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, warm, partitions=1)
        produce_tasks(bootstrap, warm, 100)
        with open_storage(server.target("default")) as probe:
            version = ".".join(str(p) for p in probe.version())
        print(
            f"input: {args.events} events on {args.partitions} partitions, produced in {produced:.1f}s; "
            f"clickhouse-server {version}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        for master in MASTERS:
            spark = session(master)
            try:
                for mode in MODES:  # the first query of a session pays the JVM's first-query costs: not measured
                    with open_storage(server.target(f"warm_{mode}_{uuid.uuid4().hex[:6]}")) as storage:
                        run_streaming(
                            spark,
                            bootstrap,
                            warm,
                            storage,
                            "raw",
                            1000,
                            scratch / f"chk-{uuid.uuid4().hex}",
                            {"writes": mode},
                        )
                for _ in range(args.rounds):
                    for mode in MODES:
                        database = f"bench_{mode}_{uuid.uuid4().hex[:6]}"
                        with open_storage(server.target(database), send_receive_timeout=300) as storage:
                            r = run_streaming(
                                spark,
                                bootstrap,
                                topic,
                                storage,
                                "raw",
                                args.max_offsets,
                                scratch / f"chk-{uuid.uuid4().hex}",
                                {"writes": mode},
                            )
                            storage.command(f"DROP DATABASE IF EXISTS `{database}`")
                        if r["rows"] != args.events:
                            raise RuntimeError(f"{master} writes={mode} stored {r['rows']:.0f} of {args.events} rows")
                        results.setdefault((master, mode), []).append(r)
                        print(
                            f"{master} writes={mode}: {r['rows'] / r['seconds']:,.0f} rows/s end to end "
                            f"({r['rows']:.0f} rows, {r['batches']:.0f} batches in {r['seconds']:.1f}s); "
                            f"steady state {r['steady']:,.0f} rows/s; load average {os.getloadavg()[0]:.1f}"
                        )
            finally:
                spark.stop()
        best = {
            key: (max(r["rows"] / r["seconds"] for r in runs), max(r["steady"] for r in runs))
            for key, runs in results.items()
        }
        print(f"best of {args.rounds} (end to end / steady state rows/s):")
        for master in MASTERS:
            (d_e2e, d_steady), (x_e2e, x_steady) = best[(master, "driver")], best[(master, "executors")]
            print(
                f"  {master}: writes=driver {d_e2e:,.0f} / {d_steady:,.0f}; writes=executors {x_e2e:,.0f} / "
                f"{x_steady:,.0f}; ratio executors/driver {x_e2e / d_e2e:.2f} / {x_steady / d_steady:.2f}"
            )
        for mode in MODES:
            (one_e2e, one_steady), (two_e2e, two_steady) = best[("local[1]", mode)], best[("local[2]", mode)]
            print(f"  writes={mode}: ratio local[2]/local[1] {two_e2e / one_e2e:.2f} / {two_steady / one_steady:.2f}")
        step = commit_step(server, args.max_offsets, 3)
        for mode, (seconds, size) in step.items():
            print(
                f"driver commit of a {args.max_offsets}-row batch, writes={mode}: {seconds * 1000:,.1f} ms "
                f"({args.max_offsets / seconds:,.0f} rows/s; commit messages {size:,} bytes pickled)"
            )
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        server.close()
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

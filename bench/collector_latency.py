"""Benchmark: end-to-end latency of the consumer-group collector, event emitted -> row queryable in ClickHouse, at a
steady 10,000 events/s.

    python -m bench.collector_latency [--rate 10000] [--seconds 20] [--server]

A producer process sends realistic ``task_end`` events (``bench/_collector_data.py``) at ``--rate`` for
``--seconds``, each stamped ``emitted_at_ms`` = the wall clock when it is handed to the Kafka producer (the relay
does the same). The collector (default settings: flush at 20,000 rows or 1 s) runs in this process on chDB
(``--server``: a throwaway clickhouse-server 18.16 instead); its ``on_batch`` hook records when each table's insert
returned — from then on the rows are queryable (ClickHouse inserts are synchronous) — and the latency of every row
is ``inserted_at - emitted_at_ms``. The first 2 seconds are warm-up and not counted.

Prints p50 / p95 / p99 / max; never fails the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

WARM_UP_SECONDS = 2.0


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--server", action="store_true", help="clickhouse-server 18.16 instead of chDB")
    args = parser.parse_args()

    from sparktap.collector.consumer import BatchReport, Collector
    from sparktap.local.broker import TansuBroker, create_topic
    from sparktap.settings import load_settings
    from tests.support.services.clickhouse import ClickHouseServerProcess

    external = os.environ.get("SPARKTAP_BENCH_KAFKA", "")
    broker = None if external else TansuBroker().start()
    server = ClickHouseServerProcess().start() if args.server else None
    tmp = tempfile.TemporaryDirectory(prefix="sparktap-bench-")
    try:
        bootstrap = external or (broker.bootstrap_servers if broker else "")
        topic = f"bench-latency-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, partitions=args.partitions)
        url = server.url("bench") if server else f"chdb://{Path(tmp.name) / 'chdb'}"
        settings = load_settings(
            kafka={"bootstrap_servers": bootstrap, "topic": topic, "group_id": f"bench-{uuid.uuid4().hex[:6]}"},
            clickhouse={"url": url},
            collector={"metrics_port": None, "log_format": "text"},
            log_level="WARNING",
        )
        latencies: list[float] = []
        batches: list[int] = []
        measure_from = [float("inf")]
        rows = [0]

        def on_batch(report: BatchReport) -> None:
            batches.append(sum(report.rows.values()))
            for table, emitted in report.emitted_at_ms.items():
                inserted_ms = report.inserted_at[table] * 1000
                rows[0] += len(emitted)
                latencies.extend((inserted_ms - e) / 1000 for e in emitted if e >= measure_from[0])

        collector = Collector(settings, on_batch=on_batch, install_signal_handlers=False)
        thread = threading.Thread(target=collector.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        while collector.health.assigned == 0 and time.monotonic() < deadline:
            collector.started.wait(0.2)
        if collector.health.assigned == 0:
            raise RuntimeError("the collector got no partitions within 120 s")
        # the producer is another process, as in production: it does not compete with the collector for the GIL
        measure_from[0] = time.time() * 1000 + WARM_UP_SECONDS * 1000 + 1000  # + its start-up
        producing = subprocess.run(
            [sys.executable, "-m", "bench._collector_data", bootstrap, topic, str(args.rate), str(args.seconds)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        sent = [int(producing.stdout.split()[-1])]
        deadline = time.monotonic() + 120
        while rows[0] < sent[0] and time.monotonic() < deadline:
            collector.started.wait(0.2)
        collector.stop()
        thread.join(60)
        engine = "clickhouse-server 18.16" if server else "chDB"
        print(
            f"{sent[0]:,} events at {args.rate:,}/s for {args.seconds:g}s into {engine}; {rows[0]:,} rows in "
            f"{len(batches)} inserts (median {statistics.median(batches):,.0f} rows)"
        )
        print(
            f"latency emitted -> queryable: p50 {_quantile(latencies, 0.5):.3f}s, "
            f"p95 {_quantile(latencies, 0.95):.3f}s, p99 {_quantile(latencies, 0.99):.3f}s, "
            f"max {max(latencies):.3f}s ({len(latencies):,} events after {WARM_UP_SECONDS:g}s warm-up)"
        )
    finally:
        if broker is not None:
            broker.stop()
        if server is not None:
            server.close()
        tmp.cleanup()


if __name__ == "__main__":
    main()

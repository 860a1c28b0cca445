"""Benchmark: does the collector's GC tuning still pay? The consumer-group collector end to end (Kafka -> chDB),
with Python's garbage collector as the process has it (plain) and with the loop's tuning (``gc.freeze`` and a young
generation threshold of 100,000 instead of 700), alternating, for each Kafka client.

    python -m bench.collector_gc [--events 100000] [--pairs 2] [--kafka-client auto]

Per run it prints the collections of each generation, the wall time spent inside them (``gc.callbacks``), and the
process's CPU per row in the steady state; then, per client, the tuned/plain ratios of the medians. The tuning was
made when every consumed message was a Python object (confluent-kafka's ``Message``); the collector's own consumer
hands out message chunks instead, so the young collections it saved may no longer happen.

Prints one line per figure; never fails the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench._collector_run import produce_tasks, run_collector


class GcClock:
    """Collections per generation and the wall seconds spent in them, while installed."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.counts[info["generation"]] += 1

    @contextlib.contextmanager
    def installed(self) -> Iterator[GcClock]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


@contextlib.contextmanager
def _plain_gc() -> Iterator[None]:
    yield


def _run(bootstrap: str, topic: str, events: int, client: str, tuned: bool, root: Path) -> dict[str, float]:
    from sparktap.collector import consumer

    saved = consumer.quiet_gc
    if not tuned:
        consumer.quiet_gc = _plain_gc
    try:
        with GcClock().installed() as clock:
            result = run_collector(
                bootstrap, topic, events, url=f"chdb://{root / uuid.uuid4().hex[:8]}", kafka_client=client
            )
    finally:
        consumer.quiet_gc = saved
    return {
        "us_row": result["steady_cpu"] / max(result["steady_rows"], 1) * 1e6,
        "gc_ms": clock.seconds * 1e3,
        "gen0": clock.counts[0],
        "gen1": clock.counts[1],
        "gen2": clock.counts[2],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=2, help="tuned/plain pairs per client, alternating")
    parser.add_argument("--kafka-client", action="append", choices=["auto", "confluent-kafka"])
    args = parser.parse_args()
    from sparktap.local.broker import TansuBroker, create_topic

    clients = args.kafka_client or ["auto", "confluent-kafka"]
    broker = TansuBroker().start()
    try:
        topic = f"bench-gc-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap_servers, topic, partitions=4)
        produce_tasks(broker.bootstrap_servers, topic, args.events)
        print(f"input: {args.events:,} task_end messages, 4 partitions")
        with tempfile.TemporaryDirectory(prefix="sparktap-bench-gc-") as tmp:
            # a warm-up run, not counted: the first collector in a process imports and builds what the others reuse
            _run(broker.bootstrap_servers, topic, args.events, clients[0], True, Path(tmp))
            for client in clients:
                runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
                for pair in range(args.pairs):
                    for tuned in (pair % 2 == 0, pair % 2 != 0):  # the order alternates pair by pair
                        r = _run(broker.bootstrap_servers, topic, args.events, client, tuned, Path(tmp))
                        runs[tuned].append(r)
                        print(
                            f"{client:>15} {'tuned' if tuned else 'plain'}: {r['us_row']:.2f} µs/row CPU, "
                            f"GC {r['gc_ms']:.1f} ms in {r['gen0']:.0f}/{r['gen1']:.0f}/{r['gen2']:.0f} "
                            "collections (gen 0/1/2)"
                        )
                tuned_cpu = statistics.median(r["us_row"] for r in runs[True])
                plain_cpu = statistics.median(r["us_row"] for r in runs[False])
                tuned_gc = statistics.median(r["gc_ms"] for r in runs[True])
                plain_gc = statistics.median(r["gc_ms"] for r in runs[False])
                print(
                    f"{client:>15} tuned/plain: CPU per row {tuned_cpu / plain_cpu:.3f}x "
                    f"({tuned_cpu:.2f} vs {plain_cpu:.2f} µs), wall time in GC {tuned_gc:.1f} vs {plain_gc:.1f} ms "
                    f"per {args.events:,} rows"
                )
    finally:
        broker.stop()


if __name__ == "__main__":
    main()

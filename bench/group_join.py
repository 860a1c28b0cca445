"""Benchmark: the collector's first assignment under the classic group protocol and under ``auto`` (KIP-848 when the
broker offers it), on a real Apache Kafka broker with Kafka's default ``group.initial.rebalance.delay.ms`` (3 s).

    python -m bench.group_join [--runs 3] [--partitions 4] [--delay-ms 3000]

Each run starts a consumer-group collector (chDB store in a fresh directory, a fresh group) in this process and
times, from its log lines: start to "storage ready", subscribe ("consuming") to "partitions assigned", and start
to "partitions assigned". Prints one line per run and the medians; never part of the suite.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
import uuid

_MARKS = ("storage ready", "consuming", "partitions assigned")


class _Marks(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.at: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message in _MARKS and message not in self.at:
            self.at[message] = time.monotonic()


def join_once(bootstrap: str, topic: str, protocol: str) -> tuple[float, float, float]:
    """(start to storage ready, subscribe to assigned, start to assigned) in seconds."""
    from sparktap.collector.consumer import Collector
    from sparktap.settings import load_settings

    settings = load_settings(
        kafka={"bootstrap_servers": bootstrap, "topic": topic, "group_id": f"join-{uuid.uuid4().hex[:8]}"},
        collector={"metrics_port": None, "log_format": "text", "group_protocol": protocol},
        clickhouse={"url": f"chdb://{tempfile.mkdtemp(prefix='sparktap-join-')}"},
        log_level="WARNING",
    )
    marks = _Marks()
    logger = logging.getLogger("sparktap.collector")
    logger.addHandler(marks)
    logger.setLevel(logging.INFO)
    collector = Collector(settings, install_signal_handlers=False)
    started = time.monotonic()
    thread = threading.Thread(target=collector.run, daemon=True)
    thread.start()
    try:
        while "partitions assigned" not in marks.at and time.monotonic() - started < 60:
            time.sleep(0.005)  # noqa: S311 - polling the log marks against a deadline
    finally:
        collector.stop()
        thread.join(60)
        logger.removeHandler(marks)
    if "partitions assigned" not in marks.at:
        raise RuntimeError(f"no partitions assigned within 60 s (protocol {protocol})")
    at = marks.at
    return (
        at["storage ready"] - started,
        at["partitions assigned"] - at["consuming"],
        at["partitions assigned"] - started,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--delay-ms", type=int, default=3000, help="the broker's group.initial.rebalance.delay.ms")
    args = parser.parse_args(argv)

    from sparktap.local.broker import create_topic
    from tests.support.services.kafka import ApacheKafkaBroker

    broker = ApacheKafkaBroker(config={"group.initial.rebalance.delay.ms": str(args.delay_ms)}).start()
    try:
        topic = f"bench-join-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap_servers, topic, partitions=args.partitions)
        create_topic(broker.bootstrap_servers, f"{topic}.dlq", partitions=1)
        print(f"Apache Kafka broker, group.initial.rebalance.delay.ms={args.delay_ms}, {args.partitions} partitions")
        medians = {}
        for protocol in ("classic", "auto"):
            runs = [join_once(broker.bootstrap_servers, topic, protocol) for _ in range(args.runs)]
            for store, join, total in runs:
                print(
                    f"{protocol}: store ready {store:.2f}s, subscribe to assigned {join:.3f}s, "
                    f"start to assigned {total:.2f}s"
                )
            medians[protocol] = statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs)
        for protocol, (join, total) in medians.items():
            print(f"{protocol} median: subscribe to assigned {join:.3f}s, start to assigned {total:.2f}s")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

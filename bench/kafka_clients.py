"""Benchmark: produce throughput of kafka-python (pure Python) against confluent-kafka (librdkafka), the relay's
settings, on a real Apache Kafka broker in one run: does kafka-python earn a role as a relay fallback?

    python -m bench.kafka_clients [--events 200000] [--rounds 2]

Input: the collector benchmark's realistic ``task_end`` messages (~730 bytes, key = app id). Each client produces
them all to a fresh single-partition topic with the relay's delivery settings (idempotence, acks=all, zstd where
the client can, linger 250 ms) and waits for every delivery report; rounds alternate the clients (A B A B) so
neither always runs on a warmer machine. Wall time and this process's CPU time per message are reported.
The broker: Apache Kafka from tests.support.services.kafka (``SPARKTAP_BENCH_KAFKA=host:port`` for another).
kafka-python is not a dependency of sparktap: ``pip install kafka-python zstandard`` to run this (without
zstandard it falls back to gzip, which costs far more CPU than the relay's zstd).

Prints one line per figure and the ratio; never part of the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench._collector_data import task_messages


def confluent(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "zstd",
            "linger.ms": 250,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failed: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    for key, value in messages:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(300) != 0 or failed:
        raise RuntimeError(f"confluent-kafka: {len(failed)} failed deliveries, e.g. {failed[:1]}")


def kafka_python(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        compression_type=_kafka_python_compression(),
        linger_ms=250,
        batch_size=1 << 20,
    )
    futures = [producer.send(topic, key=key, value=value) for key, value in messages]
    producer.flush(300)
    failed = [f for f in futures if f.failed()]
    producer.close(30)
    if failed:
        raise RuntimeError(f"kafka-python: {len(failed)} failed deliveries, e.g. {failed[0].exception!r}")


def _kafka_python_compression() -> str | None:
    """zstd when its codec (the optional zstandard package) is installed, else gzip, else none."""
    from kafka.codec import has_gzip, has_zstd

    return "zstd" if has_zstd() else ("gzip" if has_gzip() else None)


def timed(
    run: Callable[[str, str, list[tuple[bytes, bytes]]], None], bootstrap: str, messages: list[tuple[bytes, bytes]]
) -> tuple[float, float]:
    from sparktap.local.broker import create_topic

    topic = f"bench-clients-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    cpu, wall = time.process_time(), time.monotonic()
    run(bootstrap, topic, messages)
    return time.monotonic() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        import kafka
    except ImportError:
        print("kafka-python is not installed: pip install kafka-python zstandard")
        return 1
    from importlib import metadata

    import confluent_kafka

    from tests.support.services.kafka import ApacheKafkaBroker

    external = os.environ.get("SPARKTAP_BENCH_KAFKA", "").strip()
    broker = None if external else ApacheKafkaBroker().start()
    bootstrap = external or broker.bootstrap_servers  # type: ignore[union-attr]
    try:
        messages = list(task_messages(args.events))
        size = sum(len(v) for _k, v in messages) / len(messages)
        print(
            f"input: {args.events} task_end messages of {size:.0f} bytes on average; "
            f"confluent-kafka {metadata.version('confluent-kafka')} (librdkafka {confluent_kafka.libversion()[0]}), "
            f"kafka-python {kafka.__version__} ({_kafka_python_compression()}); "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        timed(confluent, bootstrap, messages[:1000])  # connections, the producer id, the JIT of the broker
        timed(kafka_python, bootstrap, messages[:1000])
        results: dict[str, list[tuple[float, float]]] = {"confluent-kafka": [], "kafka-python": []}
        for _round in range(args.rounds):
            for name, run in (("confluent-kafka", confluent), ("kafka-python", kafka_python)):
                results[name].append(timed(run, bootstrap, messages))
        rate = {}
        for name, runs in results.items():
            wall = sum(w for w, _c in runs) / len(runs)
            cpu = sum(c for _w, c in runs) / len(runs)
            rate[name] = args.events / wall
            print(
                f"{name}: {rate[name]:,.0f} messages/s produced and acknowledged "
                f"({args.events} in {wall:.2f}s, mean of {len(runs)}), "
                f"{cpu / args.events * 1e6:.1f} µs CPU per message in the producing process"
            )
        print(f"ratio kafka-python / confluent-kafka: {rate['kafka-python'] / rate['confluent-kafka']:.2f}")
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The collector benchmarks' shared steps: produce their input, run the consumer-group collector in this process."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from bench._collector_data import task_messages


def produce_tasks(bootstrap: str, topic: str, count: int) -> float:
    """Produce ``count`` realistic task_end messages (``task_messages``) to ``topic``; seconds taken."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "compression.type": "lz4",
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    started = time.monotonic()
    for i, (key, value) in enumerate(task_messages(count)):
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("could not produce the benchmark input")
    return time.monotonic() - started


def run_collector(
    bootstrap: str, topic: str, events: int, *, storage: Any = None, url: str | None = None, kafka_client: str = "auto"
) -> dict[str, float]:
    """Collect ``events`` rows from ``topic`` into ``storage`` (an open Storage) or the store at ``url``.

    Returns ``wall`` (first batch to the last row, seconds), ``cpu`` (this process's CPU seconds over the whole run,
    the group join and the schema's creation included, as the collector's threads and chDB's spend it), ``join``
    (start to first batch), and the steady state: ``steady_rows`` stored by the batches after the first one and
    ``steady_cpu``, the process's CPU seconds from the first batch's report to the last one; ``batches`` written and
    ``streams``, the INSERTs kept open over several of them (store/stream.py). ``kafka_client``: the
    collector's setting of that name (its own consumer, or confluent-kafka's).
    """
    from sparktap.collector.consumer import BatchReport, Collector
    from sparktap.settings import load_settings

    settings = load_settings(
        kafka={"bootstrap_servers": bootstrap, "topic": topic, "group_id": f"bench-{uuid.uuid4().hex[:6]}"},
        collector={"metrics_port": None, "log_format": "text", "kafka_client": kafka_client},
        log_level="WARNING",
        **({"clickhouse": {"url": url}} if url else {}),
    )
    first: list[float] = []
    done = threading.Event()
    rows = [0]
    steady: dict[str, float] = {}

    def on_batch(report: BatchReport) -> None:
        if not first:
            first.append(time.monotonic() - report.seconds)
            steady.update(cpu=time.process_time(), rows=-sum(report.rows.values()))
        rows[0] += sum(report.rows.values())
        if rows[0] >= events:
            steady.update(cpu=time.process_time() - steady["cpu"], rows=rows[0] + steady["rows"])
            done.set()

    collector = Collector(settings, storage=storage, on_batch=on_batch, install_signal_handlers=False)
    thread = threading.Thread(target=collector.run, daemon=True)
    cpu = time.process_time()
    started = time.monotonic()
    thread.start()
    done.wait(900)
    finished, cpu = time.monotonic(), time.process_time() - cpu
    collector.stop()
    thread.join(60)
    if not first or rows[0] < events:
        raise RuntimeError(f"the consumer-group collector stored {rows[0]} of {events} rows")
    return {
        "wall": finished - first[0],
        "cpu": cpu,
        "join": first[0] - started,
        "steady_rows": steady["rows"],
        "steady_cpu": steady["cpu"],
        "batches": collector.metrics.batches._value.get(),
        "streams": collector.metrics.insert_streams.labels("confirmed")._value.get(),
    }

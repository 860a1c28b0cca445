"""Realistic ``task_end`` messages for the collector benchmarks, shaped like the Java listener writes them.

Per application: stages alternating map (input ~128 MiB splits, shuffle write) and reduce (shuffle read from
local and remote executors, no input), 16 executors on 8 hosts, 64 task slots, log-normal task durations around a
per-stage median, CPU/GC/serialisation times derived from the run time, spills in a few tasks. Like the listener,
zero counters and null optionals are left out of the JSON (readers fill the defaults).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import orjson

BASE_MS = (int(time.time()) // 86_400 - 1) * 86_400_000
"""UTC midnight a day ago: inside the collector's event-time window (older than the retention goes to the DLQ)"""
SLOTS = 64


def _stage_tasks(rnd: random.Random, app: int, stage: int, tasks: int, start_ms: int) -> Iterator[dict[str, Any]]:
    is_map = stage % 2 == 0
    median = rnd.choice((120, 300, 800, 2_000))
    for index in range(tasks):
        executor = rnd.randrange(16)
        duration = max(5, int(rnd.lognormvariate(0, 0.35) * median))
        launch = start_ms + (index // SLOTS) * median + rnd.randrange(0, 40)
        run = max(1, duration - rnd.randrange(1, 8))
        event: dict[str, Any] = {
            "schema_version": 1,
            "event_type": "task_end",
            "cluster": "prod-eu",
            "app_id": f"app-20261122120000-{app:04d}",
            "app_attempt": "1",
            "app_name": "nightly-etl",
            "stage_id": stage,
            "task_id": stage * 10_000 + index,
            "index": index,
            "executor_id": str(executor + 1),
            "host": f"10.0.0.{executor // 2 + 10}",
            "locality": "PROCESS_LOCAL" if is_map and rnd.random() < 0.9 else ("NODE_LOCAL" if is_map else "ANY"),
            "status": "SUCCESS",
            "launch_time_ms": launch,
            "finish_time_ms": launch + duration,
            "duration_ms": duration,
            "run_time_ms": run,
            "cpu_time_ns": int(run * rnd.uniform(0.6, 0.95) * 1_000_000),
            "gc_time_ms": int(run * rnd.uniform(0.0, 0.05)),
            "deserialize_time_ms": rnd.randrange(1, 20),
            "result_size_bytes": 2_000 + rnd.randrange(0, 400),
            "peak_execution_memory": rnd.choice((0, 16 << 20, 32 << 20, 64 << 20)),
            "event_time_ms": launch + duration,
            "emitted_at_ms": launch + duration + rnd.randrange(2, 40),
        }
        if is_map:
            size = 134_217_728 if index < tasks - 1 else rnd.randrange(1 << 20, 134_217_728)
            written = size // rnd.randrange(8, 12)
            event.update(
                input_bytes=size,
                input_records=size // 100,
                shuffle_write_bytes=written,
                shuffle_write_records=written // 40,
                shuffle_write_time_ns=rnd.randrange(1, 50) * 1_000_000,
            )
        else:
            local_blocks = rnd.randrange(1, 8)
            remote_blocks = rnd.randrange(8, 56)
            block = rnd.randrange(200_000, 400_000)
            event.update(
                shuffle_local_blocks=local_blocks,
                shuffle_remote_blocks=remote_blocks,
                shuffle_local_bytes=local_blocks * block,
                shuffle_remote_bytes=remote_blocks * block,
                shuffle_fetch_wait_ms=rnd.randrange(0, 25),
                shuffle_records_read=(local_blocks + remote_blocks) * block // 40,
                output_bytes=rnd.randrange(1 << 20, 8 << 20),
                output_records=rnd.randrange(10_000, 80_000),
            )
        if rnd.random() < 0.02:
            event.update(
                memory_spill_bytes=rnd.randrange(64 << 20, 512 << 20),
                disk_spill_bytes=rnd.randrange(16 << 20, 128 << 20),
            )
        yield event


def task_events(count: int, apps: int = 8, tasks_per_stage: int = 2_000, seed: int = 7) -> Iterator[dict[str, Any]]:
    """``count`` task_end event dicts: applications interleaved, each with seq 1, 2, 3 …"""
    rnd = random.Random(seed)  # noqa: S311 - test data, not cryptography
    streams = [_app(rnd, app, tasks_per_stage) for app in range(apps)]
    for i in range(count):
        yield next(streams[i % apps])


def _app(rnd: random.Random, app: int, tasks_per_stage: int) -> Iterator[dict[str, Any]]:
    seq = 0
    stage = 0
    start = BASE_MS + app * 3_600_000
    while True:
        for event in _stage_tasks(rnd, app, stage, tasks_per_stage, start):
            seq += 1
            event["seq"] = seq
            yield event
        start = event["finish_time_ms"] + rnd.randrange(100, 2_000)
        stage += 1


def task_messages(count: int, apps: int = 8) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) Kafka messages of ``task_events``: key = app_id, compact JSON."""
    for event in task_events(count, apps):
        yield event["app_id"].encode(), orjson.dumps(event)


def produce_paced(bootstrap: str, topic: str, rate: int, seconds: float) -> int:
    """Send ``rate`` x ``seconds`` task_end events at ``rate``/s, each stamped ``emitted_at_ms`` = now when handed
    to the producer (as the relay does); returns the number delivered."""
    import time

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    total = int(rate * seconds)
    events = list(task_events(total))  # generated up front: pacing measures the pipeline, not this generator
    delivered = [0]

    def done(err: object, _msg: object) -> None:
        if err is None:
            delivered[0] += 1

    started = time.monotonic()
    for i, event in enumerate(events):
        event["emitted_at_ms"] = int(time.time() * 1000)
        while True:
            try:
                producer.produce(topic, key=event["app_id"].encode(), value=orjson.dumps(event), on_delivery=done)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100 == 99:
            producer.poll(0)
            ahead = (i + 1) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)  # pacing the producer
    producer.flush(60)
    return delivered[0]


if __name__ == "__main__":  # python -m bench._collector_data BOOTSTRAP TOPIC RATE SECONDS: a paced producer process
    import sys

    print(produce_paced(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])), flush=True)

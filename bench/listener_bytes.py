"""Benchmark: bytes per task event in Kafka vs Spark's own event-log JSON for the same tasks (target ≤ 1/4).

    python -m bench.listener_bytes [--tasks 400]

One Spark local[2] application with the listener and Spark's event log (uncompressed) both on runs a shuffle job
(map tasks writing shuffle data, reduce tasks reading it: the task events carry shuffle read and write metrics).
For the same task ids it compares the size of each ``task_end`` Kafka message value with the size of the
``SparkListenerTaskEnd`` line in the event log, and also zlib-compressed batches of each (Kafka batches are
zstd-compressed on the wire; zlib stands in for both sides here). Prints one line per figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import zlib
from pathlib import Path

from bench._listener_common import (
    add_spark_line_option,
    kafka,
    listener_conf,
    new_topic,
    print_runtime,
    rerun_on_spark_line,
    session,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=400)
    add_spark_line_option(parser)
    args = parser.parse_args()
    if rerun_on_spark_line("bench.listener_bytes", args.spark_line):
        return
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    with kafka() as bootstrap, tempfile.TemporaryDirectory(prefix="sparktap-bench-") as tmp:
        topic = new_topic(bootstrap, "bench-bytes")
        log_dir = Path(tmp) / "eventlog"
        log_dir.mkdir()
        conf = {
            **listener_conf(bootstrap, topic, Path(tmp) / "spool"),
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": log_dir.as_uri(),
            "spark.eventLog.compress": "false",
        }
        spark = session(conf)
        print_runtime(spark)
        maps = args.tasks // 2
        df = spark.range(0, 1000 * maps, 1, maps).selectExpr("id % 5000 AS k", "id AS v")
        df.groupBy("k").sum("v").repartition(args.tasks - maps).count()
        spark.stop()

        spark_lines: dict[int, bytes] = {}
        # Spark 4 writes a rolling event log by default: a directory of events_<n>_<app> files
        for path in sorted(p for p in log_dir.rglob("*") if p.is_file() and not p.name.startswith("appstatus")):
            for line in path.read_bytes().splitlines():
                if b'"Event":"SparkListenerTaskEnd"' in line:
                    spark_lines[json.loads(line)["Task Info"]["Task ID"]] = line
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-bytes", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        ours: dict[int, bytes] = {}
        empty = 0
        while empty < 6:
            batch = consumer.consume(10_000, 0.5)
            empty = 0 if batch else empty + 1
            for msg in batch:
                value = msg.value() or b""
                if msg.error() is None and b'"event_type":"task_end"' in value:
                    ours[json.loads(value)["task_id"]] = value
        consumer.close()

    common = sorted(set(ours) & set(spark_lines))
    ours_sizes = [len(ours[t]) for t in common]
    spark_sizes = [len(spark_lines[t]) for t in common]
    ours_z = len(zlib.compress(b"\n".join(ours[t] for t in common)))
    spark_z = len(zlib.compress(b"\n".join(spark_lines[t] for t in common)))
    print(f"tasks compared: {len(common)} (listener task_end: {len(ours)}, event-log TaskEnd: {len(spark_lines)})")
    print(f"bytes per task event, uncompressed: sparktap {statistics.mean(ours_sizes):.0f} B "
          f"(median {statistics.median(ours_sizes):.0f}), Spark event log {statistics.mean(spark_sizes):.0f} B "
          f"(median {statistics.median(spark_sizes):.0f})")  # fmt: skip
    print(f"ratio sparktap / event log, uncompressed: {sum(ours_sizes) / sum(spark_sizes):.3f} (target <= 0.25)")
    print(f"bytes per task event, compressed batch: sparktap {ours_z / len(common):.0f} B, "
          f"event log {spark_z / len(common):.0f} B, ratio {ours_z / spark_z:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()

"""Benchmark: what sql_plan_stats and Structured Streaming progress cost the listener (target: its whole CPU share
of a job under 2 %).

    python -m bench.listener_plan_streaming [--executions 30] [--branches 70] [--seconds 40] [--spark-line 3.5]

Spark local[2], an embedded tansu broker (``SPARKTAP_BENCH_KAFKA=host:port`` for another). Sessions alternate
without / with the listener:

1. plan: a union of ``--branches`` filtered, projected ranges (a physical plan of over 200 nodes), run
   ``--executions`` times per session; every execution ends with one sql_plan_stats of all its nodes; sessions with
   the listener run both without (the default) and with ``spark.sparktap.plan.codegenStats`` (the code of each
   codegen stage, at most 32 of the 71, regenerated and compiled for its largest method's size);
2. streaming: a rate source (5,000 rows/s) counted per 5-second event-time window with a watermark (a stateful
   query) into the memory sink, with a 1-second trigger for ``--seconds``: one progress event a second.

The listener's CPU is its own threads (``sparktap-*``) and the relay, plus what its callbacks add to Spark's
shared listener-bus thread (``spark-listener-group-shared``: the thread's CPU with the listener minus without),
per SQL execution or per progress event; its share is that over the driver JVM's CPU for the same work. Bytes
are the Kafka message sizes of the new events.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._listener_common import (
    add_spark_line_option,
    kafka,
    listener_conf,
    new_topic,
    print_runtime,
    rerun_on_spark_line,
    session,
)
from bench.listener_overhead import _process_cpu_ms, _relay_pids, _wait_delivered

BUS_THREAD = "spark-listener-group-shared"


def _cpu(spark: Any) -> dict[str, float]:
    """CPU ms so far: the driver JVM, Spark's shared listener-bus thread, and the listener (threads + relay)."""
    sc = spark.sparkContext
    mx = sc._jvm.java.lang.management.ManagementFactory.getThreadMXBean()
    bus = threads = 0.0
    for t in sc._jvm.java.lang.Thread.getAllStackTraces().keySet():
        name = str(t.getName())
        ms = max(0, mx.getThreadCpuTime(t.getId())) / 1e6
        if name == BUS_THREAD:
            bus += ms
        elif name.startswith("sparktap-"):
            threads += ms
    relay = sum(_process_cpu_ms(pid) for pid in _relay_pids(sc.applicationId))
    return {"jvm": _process_cpu_ms(sc._gateway.proc.pid) + relay, "bus": bus, "listener": threads + relay,
            "relay": relay}  # fmt: skip


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


def plan_query(spark: Any, branches: int) -> Any:
    parts = [
        spark.range(0, 1000, 1, 1).where(f"id % {i + 2} = 0").selectExpr(f"id + {i} AS x") for i in range(branches)
    ]
    return functools.reduce(lambda a, b: a.union(b), parts).selectExpr("x % 7 AS g").groupBy("g").count()


def run_plan(conf: dict[str, str], executions: int, branches: int) -> dict[str, float]:
    spark = session(conf)
    try:
        plan_query(spark, branches).collect()  # warm-up
        if conf:
            _wait_delivered(spark)
        before = _cpu(spark)
        for _ in range(executions):
            plan_query(spark, branches).collect()
        if conf:
            _wait_delivered(spark)
        return _delta(_cpu(spark), before)
    finally:
        spark.stop()


def run_stream(conf: dict[str, str], seconds: float) -> tuple[dict[str, float], int]:
    from pyspark.sql.functions import window

    spark = session(conf)
    try:
        stream = spark.readStream.format("rate").option("rowsPerSecond", 5000).load()
        counts = stream.withWatermark("timestamp", "10 seconds").groupBy(window("timestamp", "5 seconds")).count()
        before = _cpu(spark)
        query = counts.writeStream.format("memory").outputMode("update").queryName(f"bench_{time.time_ns()}")
        query = query.trigger(processingTime="1 second").start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            query.awaitTermination(0.5)
        query.stop()
        batches = len(query.recentProgress)
        if conf:
            _wait_delivered(spark)
        return _delta(_cpu(spark), before), batches
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--executions", type=int, default=30)
    parser.add_argument("--branches", type=int, default=70)
    parser.add_argument("--seconds", type=float, default=40.0)
    add_spark_line_option(parser)
    args = parser.parse_args()
    if rerun_on_spark_line("bench.listener_plan_streaming", args.spark_line):
        return
    with kafka() as bootstrap, tempfile.TemporaryDirectory(prefix="sparktap-bench-") as tmp:
        topic = new_topic(bootstrap, "bench-plan")
        conf = listener_conf(bootstrap, topic, Path(tmp) / "spool", streaming_progress_interval_ms=0)
        first = session({})
        print_runtime(first)
        first.stop()
        codegen = {**conf, "spark.sparktap.plan.codegenStats": "true"}
        plan_off: list[dict[str, float]] = []
        plan_on: list[dict[str, float]] = []
        plan_codegen: list[dict[str, float]] = []
        runs = [(plan_off, {}), (plan_on, conf), (plan_codegen, codegen)]
        for pair in range(2):
            for results, settings in runs if pair == 0 else runs[::-1]:
                results.append(run_plan(settings, args.executions, args.branches))
        stream_off, _ = run_stream({}, args.seconds)
        stream_on, batches = run_stream(conf, args.seconds)
        print_plan_figures(bootstrap, topic, plan_on, plan_off, args.executions)
        print_plan_figures(bootstrap, topic, plan_codegen, plan_off, args.executions, "plan.codegenStats=true")
        print_stream_figures(bootstrap, topic, stream_on, stream_off, batches)


def _events(bootstrap: str, topic: str, event_type: str) -> list[int]:
    """Sizes of the messages of one event type in the topic."""
    import orjson
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "enable.auto.commit": False})  # fmt: skip
    sizes: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        idle = 0
        while idle < 4:
            batch = consumer.consume(10_000, 0.5)
            idle = 0 if batch else idle + 1
            for msg in batch:
                value = msg.value() or b""
                if msg.error() is None and orjson.loads(value)["event_type"] == event_type:
                    sizes.append(len(value))
    finally:
        consumer.close()
    return sizes


def print_plan_figures(bootstrap: str, topic: str, on: list[dict[str, float]], off: list[dict[str, float]],
                       executions: int, label: str = "plan") -> None:  # fmt: skip
    bus = statistics.median(x["bus"] for x in on) - statistics.median(x["bus"] for x in off)
    own = statistics.median(x["listener"] for x in on)
    jvm = statistics.median(x["jvm"] for x in on)
    per = (bus + own) / executions
    if label == "plan":
        sizes = _events(bootstrap, topic, "sql_plan_stats")
        print(f"plan: {len(sizes)} sql_plan_stats events (both settings), median {statistics.median(sizes):,.0f} B "
              f"(largest {max(sizes):,} B)")  # fmt: skip
    print(
        f"{label}: listener CPU per SQL execution {per:.2f} ms (bus thread +{bus / executions:.2f} ms, "
        f"listener threads + relay {own / executions:.2f} ms); driver CPU per execution {jvm / executions:.1f} ms"
    )
    print(f"{label}: listener share of the job's CPU {100 * (bus + own) / jvm:.2f} % (target < 2 %)")


def print_stream_figures(bootstrap: str, topic: str, on: dict[str, float], off: dict[str, float],
                         batches: int) -> None:  # fmt: skip
    sizes = _events(bootstrap, topic, "streaming_query_progress")
    listener = on["bus"] - off["bus"] + on["listener"]
    print(f"streaming: {batches} micro-batches, {len(sizes)} progress events, median {statistics.median(sizes):,.0f} B")
    print(
        f"streaming: listener CPU {listener:.0f} ms in all: bus thread +{on['bus'] - off['bus']:.0f} ms, "
        f"listener threads {on['listener'] - on['relay']:.0f} ms, relay process {on['relay']:.0f} ms"
    )
    seconds = max(1, batches)
    print(
        f"streaming: listener CPU per progress event {listener / max(1, len(sizes)):.2f} ms "
        f"({listener / seconds:.1f} ms of CPU a second); "
        f"share of the query's driver CPU {100 * listener / on['jvm']:.2f} % (target < 2 %)"
    )


if __name__ == "__main__":
    main()

"""Benchmark: the driver's cost per task event of the listener's two transports and of Spark's own event log.

    python -m bench.listener_transport [--tasks 4000] [--repeat 3] [--spark-line 4|3.5]

One job, ``spark.range(0, 2 * tasks, 1, tasks).selectExpr("sum(id + k)")`` (``tasks`` short map tasks, one reduce
task), in a fresh local[2] session per mode, in this order: nothing (the baseline), Spark's event-log writer
(``spark.eventLog.enabled``, a local file), the listener with ``spark.sparktap.transport=relay`` (the Python relay
child process) and with ``transport=kafka`` (the producer inside the driver JVM). Kafka: ``SPARKTAP_BENCH_KAFKA``
(the in-JVM producer is idempotent: an Apache Kafka broker; the embedded tansu broker otherwise).

Per mode, the median of ``--repeat`` measured jobs (after one warm-up job), each read once Spark's listener bus is
empty and, with the listener, once everything was delivered:

- CPU: the threads that do the work (Spark's listener-bus threads, the listener's ``sparktap-*`` threads, the
  Kafka producer's network thread) plus, for ``relay``, the relay process, minus the baseline: per task event
  (the whole driver process's CPU is too noisy on a shared host to show a cost this small);
- heap: bytes allocated by those threads, minus the baseline: per task event (the relay's memory is its own
  process's, not the driver's heap);
- per application: the same two figures from the session's start through a one-task job, delivered (the start of
  the relay or the producer, the application's first events), minus the baseline's.

The last lines print the ratios side by side (each mode against the event log).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._listener_common import (
    add_spark_line_option,
    count_messages,
    kafka,
    listener_conf,
    new_topic,
    rerun_on_spark_line,
    session,
)
from bench._proc import cpu_seconds

MODES = ("baseline", "eventlog", "relay", "kafka")
WORK_THREADS = ("spark-listener-group-", "sparktap-", "kafka-producer-network-thread")


def _relay_cpu_s(app_id: str) -> float:
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if b"sparktap.listener.relay" in argv and app_id.encode() in argv:
                    total += cpu_seconds(int(entry.name))
            except OSError:
                continue
    return total


def _sample(spark: Any) -> tuple[float, float]:
    """(CPU seconds of the work threads + the relay process, bytes allocated by the work threads) so far."""
    sc = spark.sparkContext
    jvm = sc._jvm
    mx = jvm.java.lang.management.ManagementFactory.getThreadMXBean()
    cpu_ns = allocated = 0
    for thread in jvm.java.lang.Thread.getAllStackTraces().keySet():
        if str(thread.getName()).startswith(WORK_THREADS):
            cpu_ns += max(0, mx.getThreadCpuTime(thread.getId()))
            allocated += max(0, mx.getThreadAllocatedBytes(thread.getId()))
    return cpu_ns / 1e9 + _relay_cpu_s(sc.applicationId), float(allocated)


def _settle(spark: Any, listener_on: bool, timeout: float = 120.0) -> None:
    """Until Spark's listener bus is empty and, with the listener, its queue and backlog are too."""
    from sparktap.listener import LISTENER_CLASS

    bus = spark.sparkContext._jsc.sc().listenerBus()
    bus.waitUntilEmpty(int(timeout * 1000))
    if not listener_on:
        return
    (listener,) = [x for x in bus.listeners() if x.getClass().getName() == LISTENER_CLASS]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = json.loads(listener.statusJson())
        if status["queue_depth"] == 0 and status["relay_backlog"] == 0:
            return
        time.sleep(0.05)
    raise SystemExit("the listener did not deliver within the timeout: is Kafka up?")


def measure(
    conf: dict[str, str], listener_on: bool, tasks: int, repeat: int, k0: int
) -> tuple[float, float, tuple[float, float]]:
    """(median CPU s, median allocated bytes) of ``repeat`` measured jobs in a fresh session, and (CPU s, bytes) of
    the application's start: the session, a one-task job, delivered (what every application pays once)."""
    spark = session(conf)
    cpu: list[float] = []
    heap: list[float] = []
    try:
        assert spark.range(0, 1, 1, 1).count() == 1
        _settle(spark, listener_on)
        start = _sample(spark)
        spark.range(0, 400, 1, 200).selectExpr("sum(id)").collect()  # warm-up: code generation
        _settle(spark, listener_on)
        for k in range(k0, k0 + repeat):
            before = _sample(spark)
            assert spark.range(0, 2 * tasks, 1, tasks).selectExpr(f"sum(id + {k})").collect()[0][0] == (
                (2 * tasks - 1) * tasks + 2 * tasks * k
            )
            _settle(spark, listener_on)
            after = _sample(spark)
            cpu.append(after[0] - before[0])
            heap.append(after[1] - before[1])
    finally:
        spark.stop()
    return statistics.median(cpu), statistics.median(heap), start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    add_spark_line_option(parser)
    args = parser.parse_args()
    if rerun_on_spark_line("bench.listener_transport", args.spark_line):
        return
    results: dict[str, tuple[float, float, tuple[float, float]]] = {}
    events = args.tasks + 1
    with kafka() as bootstrap, tempfile.TemporaryDirectory(prefix="sparktap-bench-transport-") as scratch:
        topics = {mode: new_topic(bootstrap, f"bench-transport-{mode}") for mode in ("relay", "kafka")}
        eventlog = Path(scratch) / "eventlog"
        eventlog.mkdir()
        measure({}, False, args.tasks, 1, 0)  # the JVM's first session: not measured
        import pyspark

        import sparktap.listener

        print(f"spark {pyspark.__version__}, jar {sparktap.listener.jar_path().name}, {args.tasks:,}-task job")
        k = 1
        for mode in MODES:
            conf: dict[str, str] = {}
            if mode == "eventlog":
                conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": eventlog.as_uri()}
            elif mode in topics:
                conf = listener_conf(bootstrap, topics[mode], Path(scratch) / f"spool-{mode}")
                conf["spark.sparktap.transport"] = mode
            results[mode] = measure(conf, mode in topics, args.tasks, args.repeat, k)
            k += args.repeat
        for mode, topic in topics.items():
            expected = args.repeat * events
            messages, _ = count_messages(bootstrap, topic, expected, timeout=60)
            if messages < expected:
                raise SystemExit(f"transport={mode}: {messages:,} events in Kafka, expected at least {expected:,}")
    base_cpu, base_heap, (base_start_cpu, base_start_heap) = results["baseline"]
    extra = {mode: (results[mode][0] - base_cpu, results[mode][1] - base_heap) for mode in MODES[1:]}
    print(f"{'mode':<10} {'extra CPU / application':>24} {'extra heap / application':>25}")
    for mode in MODES[1:]:
        start_cpu, start_heap = results[mode][2]
        print(f"{mode:<10} {(start_cpu - base_start_cpu) * 1000:>21.1f} ms "
              f"{(start_heap - base_start_heap) / 1e6:>22.1f} MB")  # fmt: skip
    print(f"baseline listener-bus threads per job: {base_cpu * 1000:,.0f} ms CPU, {base_heap / 1e6:,.1f} MB allocated")
    print(f"{'mode':<10} {'extra CPU / task event':>24} {'extra heap / task event':>25}")
    for mode, (cpu, heap) in extra.items():
        print(f"{mode:<10} {cpu * 1e6 / events:>21.1f} µs {heap / events:>23,.0f} B")
    log_cpu, log_heap = extra["eventlog"]
    for mode in ("relay", "kafka"):
        cpu, heap = extra[mode]
        print(f"{mode} / eventlog: CPU {cpu / log_cpu:.2f}, heap {heap / log_heap:.2f}")
    print(f"kafka / relay: CPU {extra['kafka'][0] / extra['relay'][0]:.2f}, "
          f"heap {extra['kafka'][1] / extra['relay'][1]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()

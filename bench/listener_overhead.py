"""Benchmark: job wall time with and without the listener (target ratio < 1.02).

    python -m bench.listener_overhead [--tasks 10000] [--pairs 4] [--repeat 3]

Spark local[2]; the job is ``spark.range(0, 2 * tasks, 1, tasks).selectExpr("sum(id + k)")`` with a fresh ``k`` per
run (a repeated plan would reuse the shuffle and skip the map stage): ``tasks`` short map tasks and one reduce
task. With the listener on, every run sends one task_end per task plus stage/job/SQL events to an embedded tansu
broker (``SPARKTAP_BENCH_KAFKA=host:port`` for another).

Sessions alternate without / with the listener (a fresh session each, same JVM, which side goes first alternates
too); each session runs a small warm-up job, then the measured job ``--repeat`` times, and keeps its fastest run
(the minimum is what interference from other processes on a shared host cannot inflate). Figures:

- wall time: each pair's ratio, the medians of both sides and their ratio (the target);
- CPU: what the driver JVM process plus the relay consumed per measured job, with / without (a ratio that other
  load on the host blurs much less than wall time), and the part of it used by the listener's own threads
  (``sparktap-*``) and the relay: the cost per task event.
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


def _process_cpu_ms(pid: int) -> float:
    return cpu_seconds(pid) * 1000


def _relay_pids(app_id: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"sparktap.listener.relay" in argv and app_id.encode() in argv:
                pids.append(int(entry.name))
    return pids


def _cpu(spark: Any) -> tuple[float, float]:
    """(driver JVM + relay CPU ms, listener threads + relay CPU ms) so far."""
    sc = spark.sparkContext
    relay = sum(_process_cpu_ms(pid) for pid in _relay_pids(sc.applicationId))
    jvm = _process_cpu_ms(sc._gateway.proc.pid)
    mx = sc._jvm.java.lang.management.ManagementFactory.getThreadMXBean()
    threads = sum(
        max(0, mx.getThreadCpuTime(t.getId())) / 1e6
        for t in sc._jvm.java.lang.Thread.getAllStackTraces().keySet()
        if str(t.getName()).startswith("sparktap-")
    )
    return jvm + relay, threads + relay


def _wait_delivered(spark: Any, timeout: float = 60.0) -> None:
    """Until the listener's queue is empty and the relay reports nothing outstanding."""
    from sparktap.listener import LISTENER_CLASS

    listeners = spark.sparkContext._jsc.sc().listenerBus().listeners()
    (listener,) = [x for x in listeners if x.getClass().getName() == LISTENER_CLASS]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = json.loads(listener.statusJson())
        if status["queue_depth"] == 0 and status["relay_backlog"] == 0:
            return
        time.sleep(0.05)


def measure(conf: dict[str, str], tasks: int, repeat: int, k0: int) -> tuple[float, float, float]:
    """(fastest wall s, median process CPU ms, median listener CPU ms) of ``repeat`` runs in a fresh session."""
    spark = session(conf)
    walls: list[float] = []
    process_cpu: list[float] = []
    listener_cpu: list[float] = []
    try:
        spark.range(0, 400, 1, 200).selectExpr("sum(id)").collect()  # warm-up: code generation, the relay start
        if conf:
            _wait_delivered(spark)
        for k in range(k0, k0 + repeat):
            job = spark.range(0, 2 * tasks, 1, tasks).selectExpr(f"sum(id + {k})")
            before = _cpu(spark)
            start = time.perf_counter()
            assert job.collect()[0][0] == (2 * tasks - 1) * tasks + 2 * tasks * k
            walls.append(time.perf_counter() - start)
            if conf:
                _wait_delivered(spark)  # the relay's share of this job is done before its CPU time is read
            after = _cpu(spark)
            process_cpu.append(after[0] - before[0])
            listener_cpu.append(after[1] - before[1])
    finally:
        spark.stop()
    return min(walls), statistics.median(process_cpu), statistics.median(listener_cpu)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    add_spark_line_option(parser)
    args = parser.parse_args()
    if rerun_on_spark_line("bench.listener_overhead", args.spark_line):
        return
    runs: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    with kafka() as bootstrap, tempfile.TemporaryDirectory(prefix="sparktap-bench-spool-") as spool:
        topic = new_topic(bootstrap, "bench-overhead")
        measure({}, args.tasks, 1, 0)  # the JVM's first session: not measured
        import pyspark

        import sparktap.listener

        print(f"spark {pyspark.__version__}, jar {sparktap.listener.jar_path().name}")
        k = 1
        for pair in range(args.pairs):
            for on in [False, True] if pair % 2 == 0 else [True, False]:
                conf = listener_conf(bootstrap, topic, Path(spool)) if on else {}
                runs[on].append(measure(conf, args.tasks, args.repeat, k))
                k += args.repeat
            off_wall, on_wall = runs[False][-1][0], runs[True][-1][0]
            print(f"pair {pair + 1}: fastest of {args.repeat}: without {off_wall:.2f} s, with {on_wall:.2f} s, "
                  f"ratio {on_wall / off_wall:.3f}", flush=True)  # fmt: skip
        expected = args.pairs * args.repeat * (args.tasks + 1)  # at least the measured jobs' task_end events
        messages, _ = count_messages(bootstrap, topic, expected, timeout=60)
    wall_off = statistics.median(r[0] for r in runs[False])
    wall_on = statistics.median(r[0] for r in runs[True])
    cpu_off = statistics.median(r[1] for r in runs[False])
    cpu_on = statistics.median(r[1] for r in runs[True])
    listener = statistics.median(r[2] for r in runs[True])
    print(f"job with {args.tasks:,} tasks, wall time (median of {args.pairs} sessions' fastest): "
          f"without {wall_off:.2f} s, with {wall_on:.2f} s")  # fmt: skip
    print(f"wall time ratio with/without: {wall_on / wall_off:.3f} (target < 1.02)")
    print(f"driver CPU per job (JVM + relay): without {cpu_off:,.0f} ms, with {cpu_on:,.0f} ms, "
          f"ratio {cpu_on / cpu_off:.3f}")  # fmt: skip
    print(
        f"listener's own CPU per job (sparktap-* threads + relay): {listener:,.0f} ms = "
        f"{listener * 1000 / (args.tasks + 1):.1f} µs per task event = {listener / cpu_off:.2%} of the job's CPU"
    )
    print(f"listener events in Kafka: {messages:,} (expected at least {expected:,})")


if __name__ == "__main__":
    main()

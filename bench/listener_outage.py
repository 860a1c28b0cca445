"""Benchmark: a Kafka outage during a long job, with the listener producing from the driver JVM.

    python -m bench.listener_outage [--tasks 5000] [--task-ms 60] [--outage-s 120]

One Spark 4 local[2] application with the listener on ``spark.sparktap.transport=kafka`` and a real Apache Kafka
broker (``tests/support/services/kafka.py``), three identical jobs of ``--tasks`` tasks that each sleep
``--task-ms`` in the JVM (``java_method('java.lang.Thread', 'sleep', …)``: the job's length does not depend on how
busy the shared cores are), one after the other, after a warm-up job that is not measured:

- ``before``: the broker up;
- ``outage``: the broker stopped (its data kept) once the job has run 2 % of its tasks, for ``--outage-s`` seconds,
  then started again while the job still runs: the listener spools, then resends;
- ``after``: the broker up again (the same job once more: the noise between ``before`` and ``after`` is the
  yardstick for ``outage``).

Printed: each job's wall time (Spark's job start to end), ``outage / before`` beside ``after / before``; the
listener's own counts (events spooled, lost, dropped); and what reached Kafka, read back from the start: every
``task_end`` of every job exactly once, and the application's ``seq`` 1..N with no gap and no repeat. Exits 1 when
anything was lost.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench._listener_common import listener_conf, session

JOBS = ("before", "outage", "after")


def _listener(spark: Any) -> Any:
    from sparktap.listener import LISTENER_CLASS

    bus = spark.sparkContext._jsc.sc().listenerBus()
    (listener,) = [x for x in bus.listeners() if x.getClass().getName() == LISTENER_CLASS]
    return listener


def _status(spark: Any) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(_listener(spark).statusJson())
    return status


def _settled(spark: Any, spool: Path) -> bool:
    status = _status(spark)
    return status["queue_depth"] == 0 and status["relay_backlog"] == 0 and not list(spool.glob("seg-*"))


def _poll(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.2)


def _run_job(spark: Any, tasks: int, task_ms: int, label: str) -> float:
    """The job's wall time in seconds; its result checked."""
    spark.sparkContext.setJobDescription(f"outage-bench {label}")
    started = time.monotonic()
    row = (
        spark.range(0, tasks, 1, tasks)
        .selectExpr(f"length(java_method('java.lang.Thread', 'sleep', cast({task_ms} as bigint))) AS n")
        .groupBy()
        .sum("n")
        .collect()[0]
    )
    seconds = time.monotonic() - started
    if row[0] != 4 * tasks:  # String.valueOf(null) of each void call: "null"
        raise SystemExit(f"job {label}: unexpected result {row[0]}")
    return seconds


def _completed_tasks(spark: Any) -> int:
    tracker = spark.sparkContext.statusTracker()
    done = 0
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            done += info.numCompletedTasks
    return done


def _read_all(bootstrap: str, topic: str, expected_min: int, timeout: float = 180.0) -> list[dict[str, Any]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})  # fmt: skip
    events: list[dict[str, Any]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(10_000, 0.5)
            got = [m for m in batch if m.error() is None]
            events.extend(json.loads(m.value() or b"{}") for m in got)
            if got:
                idle_since = time.monotonic()
            elif len(events) >= expected_min and time.monotonic() - idle_since > 5:
                break
    finally:
        consumer.close()
    return events


def _outage_job(spark: Any, broker: Any, spool: Path, args: argparse.Namespace) -> tuple[float, float, int]:
    """(the job's wall s, how long the broker was down, events spooled by then): the broker stopped once 2 % of the
    job's tasks ran, for ``--outage-s``, then started again while the job runs on."""
    result: dict[str, float] = {}

    def run() -> None:
        result["s"] = _run_job(spark, args.tasks, args.task_ms, "outage")

    job = threading.Thread(target=run, daemon=True)
    job.start()
    _poll(lambda: _completed_tasks(spark) >= args.tasks // 50, 120, "the outage job to start")
    broker.stop_keeping_data()
    down = time.monotonic()
    # the outage lasts --outage-s: the experiment's own length, while the job runs on
    while time.monotonic() - down < args.outage_s:
        if not job.is_alive():
            raise SystemExit("the job ended before the outage did: raise --tasks or --task-ms")
        time.sleep(0.5)
    spooled: int = _status(spark).get("relay_spooled", 0)
    broker.restart()
    down_s = time.monotonic() - down
    job.join()
    _poll(lambda: _settled(spark, spool), 300, "the spool to be resent")
    return result["s"], down_s, spooled


def _run_all(broker: Any, scratch: Path, args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    """(app id, topic, figures): the warm-up and the three jobs in one application."""
    import pyspark

    from sparktap.local.broker import create_topic

    topic = f"bench-outage-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap_servers, topic, partitions=1)
    spool = scratch / "spool"
    conf = listener_conf(broker.bootstrap_servers, topic, spool)
    conf["spark.sparktap.transport"] = "kafka"
    spark = session(conf)
    figures: dict[str, Any] = {}
    try:
        app_id: str = spark.sparkContext.applicationId
        print(f"spark {pyspark.__version__}, transport=kafka, {args.tasks:,} tasks x {args.task_ms} ms, "
              f"outage {args.outage_s:.0f} s")  # fmt: skip
        _run_job(spark, min(args.tasks, 1000), args.task_ms, "warm-up")  # JIT, codegen: not measured
        _poll(lambda: _settled(spark, spool), 120, "the listener to deliver the warm-up job")
        for label in JOBS:
            if label == "outage":
                figures[label], figures["down_s"], figures["spooled_during"] = _outage_job(spark, broker, spool, args)
            else:
                figures[label] = _run_job(spark, args.tasks, args.task_ms, label)
                _poll(lambda: _settled(spark, spool), 120, "the listener to deliver a job")
        figures["status"] = _status(spark)
    finally:
        spark.stop()
    return app_id, topic, figures


def _check(events: list[dict[str, Any]], app_id: str, tasks: int) -> tuple[list[int], dict[int, Any], int, int]:
    """(task-end counts of the stages of ``tasks`` tasks, stages whose task ends are not all there, seq gaps,
    repeated seqs) of the application's events read back from Kafka."""
    mine = [e for e in events if e.get("app_id") == app_id]
    seqs = sorted(e["seq"] for e in mine)
    per_stage: dict[int, int] = {}
    for e in mine:
        if e["event_type"] == "task_end":
            per_stage[e["stage_id"]] = per_stage.get(e["stage_id"], 0) + 1
    big = sorted(n for n in per_stage.values() if n >= tasks)
    short: dict[int, Any] = {}
    for e in mine:  # every stage: as many task ends in Kafka as its stage_completed says it ran
        ran = e.get("tasks_succeeded", 0) + e.get("tasks_failed", 0) + e.get("tasks_killed", 0)
        if e["event_type"] == "stage_completed" and per_stage.get(e["stage_id"], 0) != ran:
            short[e["stage_id"]] = (per_stage.get(e["stage_id"], 0), ran)
    gaps = len(set(range(1, seqs[-1] + 1)) - set(seqs)) if seqs else -1
    print(f"in Kafka: {len(mine):,} events, seq 1..{seqs[-1] if seqs else 0:,}; task ends of each {tasks:,}-task "
          f"job: {big}")  # fmt: skip
    return big, short, gaps, len(seqs) - len(set(seqs))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--task-ms", type=int, default=60)
    parser.add_argument("--outage-s", type=float, default=120.0)
    args = parser.parse_args()

    from tests.support.services.kafka import ApacheKafkaBroker

    with tempfile.TemporaryDirectory(prefix="sparktap-bench-outage-") as scratch:
        broker = ApacheKafkaBroker(directory=Path(scratch) / "kafka").start()
        try:
            app_id, topic, fig = _run_all(broker, Path(scratch), args)
            # a floor for the read-back: the warm-up's and the three jobs' task ends
            events = _read_all(broker.bootstrap_servers, topic, 3 * args.tasks + min(args.tasks, 1000))
        finally:
            broker.stop()
    status = fig["status"]
    print(f"{'job':<8} {'wall s':>8} {'/ before':>9}")
    for label in JOBS:
        print(f"{label:<8} {fig[label]:>8.1f} {fig[label] / fig['before']:>9.3f}")
    noise = abs(fig["after"] / fig["before"] - 1)
    print(f"outage / before {fig['outage'] / fig['before']:.3f}; noise |after / before - 1| {noise:.3f}")
    print(f"broker down {fig['down_s']:.0f} s (stop, --outage-s, restart until ready), "
          f"{fig['spooled_during']:,} events spooled by then; listener: spooled {status.get('relay_spooled', 0):,}, "
          f"lost {status.get('kafka_events_lost', 0):,}, dropped {status.get('events_dropped', 0):,}")  # fmt: skip
    big, short, gaps, repeats = _check(events, app_id, args.tasks)
    print(f"seq gaps {gaps}, repeated seqs {repeats}, stages short of task ends {short or 'none'}")
    if gaps or repeats or short or len(big) != 3 or status.get("kafka_events_lost", 0):
        raise SystemExit("events were lost or repeated")


if __name__ == "__main__":
    main()

"""Benchmark: sparkMeasure's Kafka listener beside sparktap's, on the same task-heavy job.

    python -m bench.peer_sparkmeasure [--tasks 4000] [--rounds 2] [--repeat 2]

sparkMeasure (``ch.cern.sparkmeasure.KafkaSinkExtended``: three Kafka messages per task, started, ended and
metrics, plus job, stage, query and executor messages) is fetched with mvn. The registry reachable here serves it
for Scala 2.12 only (``spark-measure_2.12:0.24``; no ``_2.13`` build resolves), so the benchmark runs on the Spark
3.5 line: it starts the broker, then runs itself again under ``.venv-spark35`` (pyspark 3.5.9, Java 11), as
``--spark-line 3.5`` does for the other listener benchmarks.

Sessions rotate without a listener / with sparktap / with sparkMeasure, ``--rounds`` times, each running a warm-up
and then ``--repeat`` times a job of ``--tasks`` short map tasks and one reduce task. Per job:

- the listener's CPU: its own threads (sparktap: ``sparktap-*`` and the relay process; sparkMeasure: the Kafka
  producer's I/O thread) plus what it adds to Spark's shared listener-bus thread, where both run their callbacks
  (that thread's CPU minus the same without a listener); per task event and as a share of the job's driver CPU;
- bytes on the wire per task: sparktap's ``task_end``; sparkMeasure's ``tasks_started``, ``tasks_ended`` and
  ``task_metrics`` (its extended sink sends the three for every task).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._listener_common import kafka, listener_conf, new_topic, print_runtime, rerun_on_spark_line, session
from bench.listener_overhead import _process_cpu_ms, _relay_pids, _wait_delivered

SPARKMEASURE = ("ch.cern.sparkmeasure", "spark-measure_2.12", "0.24")
KAFKA_CLIENTS = ("org.apache.kafka", "kafka-clients", "3.7.0")
BUS_THREAD = "spark-listener-group-shared"
MODES = ("none", "sparktap", "sparkmeasure")


def sparkmeasure_jars() -> list[Path]:
    from sparktap.listener import javabuild

    out = javabuild.maven_dir(javabuild.LINES["spark3"]).parent / "sparkmeasure-0.24"
    folder = javabuild.fetch_maven([SPARKMEASURE, KAFKA_CLIENTS], out, "sparkMeasure 0.24 and kafka-clients 3.7.0")
    return sorted(folder.glob("*.jar"))


def _cpu(spark: Any) -> dict[str, float]:
    sc = spark.sparkContext
    mx = sc._jvm.java.lang.management.ManagementFactory.getThreadMXBean()
    out = {"bus": 0.0, "sparktap": 0.0, "producer": 0.0}
    for t in sc._jvm.java.lang.Thread.getAllStackTraces().keySet():
        name, ms = str(t.getName()), max(0, mx.getThreadCpuTime(t.getId())) / 1e6
        if name == BUS_THREAD:
            out["bus"] += ms
        elif name.startswith("sparktap-"):
            out["sparktap"] += ms
        elif name.startswith("kafka-producer-network-thread"):
            out["producer"] += ms
    relay = sum(_process_cpu_ms(pid) for pid in _relay_pids(sc.applicationId))
    out["sparktap"] += relay
    out["jvm"] = _process_cpu_ms(sc._gateway.proc.pid) + relay
    return out


def _end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def _wait_sparkmeasure(bootstrap: str, topic: str, at_least: int, timeout: float = 60.0) -> None:
    """Until sparkMeasure's topic holds ``at_least`` messages (its producer sends asynchronously)."""
    deadline = time.monotonic() + timeout
    while _end_offset(bootstrap, topic) < at_least and time.monotonic() < deadline:
        time.sleep(0.1)


def measure(mode: str, conf: dict[str, str], tasks: int, repeat: int, k0: int, bootstrap: str,
            sm_topic: str) -> list[dict[str, float]]:  # fmt: skip
    spark = session(conf)
    runs = []
    try:
        spark.range(0, 400, 1, 200).selectExpr("sum(id)").collect()  # warm-up
        for k in range(k0, k0 + repeat):
            if mode == "sparktap":
                _wait_delivered(spark)
            sent = _end_offset(bootstrap, sm_topic) if mode == "sparkmeasure" else 0
            before = _cpu(spark)
            assert spark.range(0, 2 * tasks, 1, tasks).selectExpr(f"sum(id + {k})").collect()[0][0] is not None
            if mode == "sparktap":
                _wait_delivered(spark)
            elif mode == "sparkmeasure":
                _wait_sparkmeasure(bootstrap, sm_topic, sent + 2 * (tasks + 1))
            after = _cpu(spark)
            runs.append({key: after[key] - before[key] for key in after})
    finally:
        spark.stop()
    return runs


def _sizes(bootstrap: str, topic: str, field: str) -> dict[str, list[int]]:
    """Message sizes in the topic by the value of ``field`` (the event type or name)."""
    import json

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "enable.auto.commit": False})  # fmt: skip
    out: dict[str, list[int]] = {}
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        end, seen = _end_offset(bootstrap, topic), 0
        while seen < end:
            for msg in consumer.consume(10_000, 1.0):
                seen += 1
                value = msg.value() or b""
                if msg.error() is None:
                    out.setdefault(str(json.loads(value).get(field)), []).append(len(value))
    finally:
        consumer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if rerun_on_spark_line("bench.peer_sparkmeasure", "3.5"):
        return
    jars = ",".join(str(p) for p in sparkmeasure_jars())
    with kafka() as bootstrap, tempfile.TemporaryDirectory(prefix="sparktap-bench-") as tmp:
        st_topic, sm_topic = new_topic(bootstrap, "bench-st"), new_topic(bootstrap, "bench-sm")
        confs = {
            "none": {},
            "sparktap": listener_conf(bootstrap, st_topic, Path(tmp) / "spool"),
            "sparkmeasure": {"spark.jars": jars, "spark.extraListeners": "ch.cern.sparkmeasure.KafkaSinkExtended",
                             "spark.sparkmeasure.kafkaBroker": bootstrap, "spark.sparkmeasure.kafkaTopic": sm_topic},
        }  # fmt: skip
        first = session({"spark.jars": jars})  # launches the driver JVM: jars reach its class path only now
        print_runtime(first)
        first.stop()
        runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        k = 1
        for r in range(args.rounds):
            for mode in MODES[r % 3 :] + MODES[: r % 3]:  # which side goes first rotates
                runs[mode] += measure(mode, confs[mode], args.tasks, args.repeat, k, bootstrap, sm_topic)
                k += args.repeat
        med = {m: {key: statistics.median(x[key] for x in runs[m]) for key in runs[m][0]} for m in MODES}
        events = args.tasks + 1
        for mode, own in (("sparktap", "sparktap"), ("sparkmeasure", "producer")):
            bus = med[mode]["bus"] - med["none"]["bus"]
            total = bus + med[mode][own]
            print(
                f"{mode}: listener CPU per job {total:.0f} ms (bus thread +{bus:.0f} ms, own threads "
                f"{med[mode][own]:.0f} ms) = {1000 * total / events:.1f} µs per task event = "
                f"{100 * total / med[mode]['jvm']:.2f} % of the job's driver CPU ({med[mode]['jvm']:,.0f} ms)"
            )
        st = _sizes(bootstrap, st_topic, "event_type")
        sm = _sizes(bootstrap, sm_topic, "name")
        for who, sizes in (("sparktap", st), ("sparkMeasure", sm)):
            kinds = ", ".join(f"{k} {len(v)} x {statistics.mean(v):.0f} B" for k, v in sorted(sizes.items()))
            print(f"{who} messages: {kinds}")
        st_bytes = statistics.mean(st["task_end"])
        per_task = ("tasks_started", "tasks_ended", "task_metrics")  # KafkaSinkExtended sends all three per task
        sm_bytes = sum(statistics.mean(sm[k]) for k in per_task)
        print(
            f"bytes per task on the wire: sparktap task_end {st_bytes:.0f} B; sparkMeasure "
            f"{' + '.join(per_task)} {sm_bytes:.0f} B"
        )
        cpu = {
            m: med[m]["bus"] - med["none"]["bus"] + med[m][own]
            for m, own in (("sparktap", "sparktap"), ("sparkmeasure", "producer"))
        }
        print(
            f"ratio sparktap / sparkMeasure: listener CPU per task {cpu['sparktap'] / cpu['sparkmeasure']:.2f}, "
            f"bytes per task {st_bytes / sm_bytes:.2f}"
        )


if __name__ == "__main__":
    main()

"""Benchmark: how many events/s the listener takes, and pushes through the relay to Kafka, with zero drops.

    python -m bench.listener_throughput [--events 500000]

Runs the harness class ``io.sparktap.listener.SyntheticLoad`` (bench/java/, compiled here beside the listener
jar; it is not shipped) in a plain JVM with
Spark's jars, against an embedded tansu broker (``SPARKTAP_BENCH_KAFKA=host:port`` for another broker):

1. ``serialize``: build a task_end event from a SparkListenerTaskEnd and write its JSON, on one thread:
   the JVM side's work per event (the bus thread's copy plus the writer thread's serialisation);
2. ``pipeline`` flat out with a queue that holds everything: the real listener's ``onTaskEnd`` on the calling
   thread (the listener bus's cost per event), then everything through the relay to the broker;
3. ``pipeline`` at fixed rates with the default queue (100,000): events/s sustained with zero drops.

Every run's events are counted in the topic. Prints one line per figure.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._listener_common import count_messages, kafka, new_topic

ROOT = Path(__file__).resolve().parents[1]


def harness_classpath() -> str:
    """The listener jar of this pyspark, Spark's jars, and the harness (bench/java/) compiled beside them."""
    import sparktap.listener
    from sparktap.listener import javabuild

    jar = sparktap.listener.jar_path()
    line = javabuild.line_for(sparktap.listener.running_spark_version() or "4")
    spark = javabuild.compile_classpath(line)
    classes = ROOT / ".bench" / "java-classes"
    classes.mkdir(parents=True, exist_ok=True)
    sources = sorted((ROOT / "bench" / "java").rglob("*.java"))
    javabuild._javac(line.release, f"{jar}:{spark}/*", classes, sources)  # same package as the listener's classes
    return f"{classes}:{jar}:{spark}/*"


def harness(*args: str) -> dict[str, str]:
    classpath = harness_classpath()
    proc = subprocess.run(
        ["java", "-Xmx2g", "-cp", classpath, "io.sparktap.listener.SyntheticLoad", *args],
        capture_output=True, text=True, check=True, timeout=900,
    )  # fmt: skip
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def pipeline(bootstrap: str, spool: Path, events: int, rate: int, **conf: str) -> dict[str, str]:
    topic = new_topic(bootstrap, "bench-listener")
    settings = {
        "spark.sparktap.kafka.bootstrap.servers": bootstrap,
        "spark.sparktap.kafka.topic": topic,
        "spark.sparktap.relay.python": sys.executable,
        "spark.sparktap.relay.spoolDir": str(spool),
        **conf,
    }
    out = harness("pipeline", str(events), str(rate), *(f"{k}={v}" for k, v in settings.items()))
    final_seq = int(out["status_after_end"].split('"seq":')[1].split(",")[0])
    out["in_kafka"] = str(count_messages(bootstrap, topic, final_seq)[0])
    out["expected_in_kafka"] = str(final_seq)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=500_000)
    args = parser.parse_args()

    ser = harness("serialize", str(args.events * 2))
    print(f"jvm serialise (build + JSON, one thread): {float(ser['serialize_events_per_s']):,.0f} events/s, "
          f"{float(ser['task_end_bytes_avg']):.0f} B per synthetic task_end")  # fmt: skip
    with kafka() as bootstrap, tempfile.TemporaryDirectory(prefix="sparktap-bench-spool-") as spool:
        flat = pipeline(
            bootstrap, Path(spool), args.events, 0, **{"spark.sparktap.queueCapacity": str(args.events * 2)}
        )
        print(f"listener bus thread (onTaskEnd): {float(flat['bus_ns_per_event']):,.0f} ns/event = "
              f"{float(flat['bus_events_per_s']):,.0f} events/s")  # fmt: skip
        print(
            f"flat out through relay to Kafka: {float(flat['end_to_end_events_per_s']):,.0f} events/s "
            f"({flat['in_kafka']}/{flat['expected_in_kafka']} in Kafka; status {flat['status_after_end']})"
        )
        for rate in (10_000, 50_000, 100_000):
            run = pipeline(bootstrap, Path(spool), rate * 5, rate)  # 5 s at each rate
            status = run["status_after_end"]
            dropped = int(status.split('"events_dropped":')[1].split(",")[0])
            print(f"sustained {rate:,} events/s with the default queue: dropped={dropped}, "
                  f"{run['in_kafka']}/{run['expected_in_kafka']} in Kafka, "
                  f"achieved {float(run['end_to_end_events_per_s']):,.0f} events/s end to end")  # fmt: skip


if __name__ == "__main__":
    main()

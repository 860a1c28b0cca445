"""Benchmark: Spark's own Kafka source (``spark-sql-kafka-0-10``, JVM) against ``sparktap-kafka`` (Python Data
Source API, confluent-kafka), the same topic, the same Trigger.AvailableNow backfill into the same sink, one run.

    python -m bench.spark_kafka_source [--events 200000] [--partitions 4] [--max-offsets 50000] [--rounds 2]
                                       [--sink noop|parquet] [--precompiled-pyspark true|false]
                                       [--preload-workers true|false]

Input: the collector benchmark's realistic ``task_end`` messages (~730 bytes, ``bench/_collector_data.py``)
produced once to a fresh topic on a real Apache Kafka broker (tests.support.services.kafka; ``SPARKTAP_BENCH_KAFKA`` for
another). Spark local[2], one session holding both sources; Spark's connector jars come from Maven Central via
mvn (tests.support.services.maven, cached): the newest ``spark-sql-kafka-0-10_2.13`` at or below the running pyspark.
Both queries select the same columns (key, value, topic, partition, offset, timestamp) from offsets read
``earliest``, ``--max-offsets`` per micro-batch, into the same sink: ``noop`` (the source's cost alone) or
``parquet``. A tiny warm-up query runs each source first; rounds alternate the sources (A B A B). Rows/s end to
end (query start to termination) and steady state (batches after the first), and the ratio.

Prints one line per figure; never part of the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench._collector_run import produce_tasks

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp"]
# Jars of the connector that the pyspark wheel does not ship already (it has Scala, Hadoop, lz4, snappy, slf4j).
CONNECTOR_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")


def connector_jars(spark_version: str) -> tuple[str, list[Path]]:
    """(version used, jars) of spark-sql-kafka-0-10_2.13: the running version, else the newest earlier one there."""
    from sparktap.errors import ServiceError
    from tests.support.services import maven

    major, minor, patch = (int(p) for p in spark_version.split(".")[:3])
    candidates = [f"{major}.{minor}.{p}" for p in range(patch, -1, -1)]
    candidates += [f"{major}.{m}.0" for m in range(minor - 1, -1, -1)]
    last: Exception | None = None
    for version in candidates:
        try:
            jars = maven.jars(f"spark-sql-kafka-{version}", [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"])
        except ServiceError as exc:
            last = exc
            continue
        return version, [j for j in jars if j.name.startswith(CONNECTOR_JARS)]
    raise RuntimeError(f"no spark-sql-kafka-0-10_2.13 at or below {spark_version} could be fetched: {last}")


def reader(spark: Any, kind: str, bootstrap: str, topic: str, max_offsets: int) -> Any:
    if kind == "spark-kafka":
        df = spark.readStream.format("kafka")
    else:
        from sparktap.collector.streaming import register

        register(spark)
        df = spark.readStream.format("sparktap-kafka").option("parse", "raw")
    df = (
        df.option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets))
        .load()
    )
    return df.select(*COLUMNS)


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and all its descendants, living or reaped (``cutime``/``cstime`` hold the reaped
    ones): the Spark JVM with its Python daemon, workers and the data source's planner worker."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        cpu[pid] = sum(int(f) for f in fields[11:15]) / tick
    total = 0.0
    for pid, seconds in cpu.items():
        p = pid
        while p and p != root:
            p = parents.get(p, 0)
        if p == root:
            total += seconds
    return total


def backfill(
    spark: Any,
    kind: str,
    bootstrap: str,
    topic: str,
    max_offsets: int,
    sink: str,
    scratch: Path,
    cold: bool = False,
) -> dict[str, Any]:
    """One Trigger.AvailableNow query; ``cold``: the wall time includes ``register`` and ``load()``."""
    jvm = spark.sparkContext._gateway.proc.pid
    cpu = tree_cpu(jvm) + time.process_time()
    run = scratch / f"{kind}-{uuid.uuid4().hex[:6]}"
    loading = time.monotonic()
    writer = reader(spark, kind, bootstrap, topic, max_offsets).writeStream.format(sink)
    if sink == "parquet":
        writer = writer.option("path", str(run / "data"))
    started = loading if cold else time.monotonic()
    query = writer.option("checkpointLocation", str(run / "chk")).trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.monotonic() - started
    cpu = tree_cpu(jvm) + time.process_time() - cpu
    if query.exception() is not None:
        raise RuntimeError(f"{kind}: {query.exception()}")
    batches = [p for p in query.recentProgress if int(p["numInputRows"]) > 0]
    steady_rows = sum(int(p["numInputRows"]) for p in batches[1:])
    steady_ms = sum(int(p["durationMs"]["triggerExecution"]) for p in batches[1:])
    return {
        "seconds": seconds,
        "rows": sum(int(p["numInputRows"]) for p in batches),
        "batches": len(batches),
        "steady": steady_rows / (steady_ms / 1000) if steady_ms else 0.0,
        "cpu": cpu,
        "first_ms": float(batches[0]["durationMs"]["triggerExecution"]) if batches else 0.0,
        "first_parts": ", ".join(
            f"{k} {int(v) / 1000:.1f}s"
            for k, v in (batches[0]["durationMs"] if batches else {}).items()
            if k != "triggerExecution" and int(v) >= 100
        ),
    }


def ported_cases(spark: Any, bootstrap: str) -> None:
    """Cases ported from Spark's KafkaMicroBatchSourceSuite, run on both sources: one line each with the batch sizes
    and whether both read the same rows (offset, value)."""
    from confluent_kafka import Producer

    from sparktap.local.broker import create_topic

    def run(kind: str, topic: str, max_offsets: int, isolation: str) -> tuple[list[int], list[tuple[int, bytes]]]:
        name = f"ported_{kind.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
        if kind == "spark-kafka":
            df = (
                spark.readStream.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(max_offsets))
                .option("kafka.isolation.level", isolation)
                .load()
                .selectExpr("offset", "value")
            )
        else:
            from sparktap.collector.streaming import register

            register(spark)
            df = (
                spark.readStream.format("sparktap-kafka")
                .option("parse", "raw")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(max_offsets))
                .option("kafka.isolation.level", isolation)
                .load()
                .selectExpr("offset", "value")
            )
        query = (
            df.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", tempfile.mkdtemp(prefix="sparktap-bench-chk-"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        sizes = [int(p["numInputRows"]) for p in query.recentProgress if int(p["numInputRows"]) > 0]
        rows = sorted((int(r.offset), bytes(r.value)) for r in spark.sql(f"SELECT * FROM {name}").collect())  # noqa: S608
        return sizes, rows

    def case(title: str, topic: str, max_offsets: int, isolation: str = "read_uncommitted") -> None:
        ours, theirs = (
            run("sparktap-kafka", topic, max_offsets, isolation),
            run("spark-kafka", topic, max_offsets, isolation),
        )
        print(
            f"ported case {title}: spark-kafka batches {theirs[0]}, sparktap-kafka batches {ours[0]}; "
            f"{len(ours[1])} rows; same batches and rows: {ours == theirs}"
        )

    topic = f"bench-ported-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions=5)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(15):
        producer.produce(topic, value=b"foo-%d" % i, partition=0)
    producer.flush(30)
    case("AvailableNow, maxOffsetsPerTrigger=5 over 15 messages", topic, 5)

    topic = f"bench-ported-tx-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions=1)
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}"})
    tx.init_transactions(30)
    for n, commit in enumerate((True, False, True)):  # committed, aborted, committed: markers at 5, 11, 17
        tx.begin_transaction()
        for i in range(5):
            tx.produce(topic, value=b"t%d-%d" % (n, i), partition=0)
        if commit:
            tx.commit_transaction(30)
        else:
            tx.flush(30)
            tx.abort_transaction(30)
    case("transactions read_committed, maxOffsetsPerTrigger=4", topic, 4, "read_committed")
    case("transactions read_uncommitted, maxOffsetsPerTrigger=4", topic, 4, "read_uncommitted")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sink", choices=("noop", "parquet"), default="noop")
    parser.add_argument(
        "--precompiled-pyspark",
        choices=("true", "false"),
        default="true",
        help="spark.sparktap.precompiledPyspark: false measures the data sources' processes compiling pyspark",
    )
    parser.add_argument(
        "--preload-workers",
        choices=("true", "false"),
        default="true",
        help="spark.sparktap.preloadWorkers: false measures each forked read worker importing pyarrow and the source",
    )
    args = parser.parse_args(argv)

    import pyspark
    from pyspark.sql import SparkSession

    from sparktap.local.broker import create_topic
    from tests.support.services.kafka import ApacheKafkaBroker

    version, jars = connector_jars(pyspark.__version__)
    scratch = Path(tempfile.mkdtemp(prefix="sparktap-bench-"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    external = os.environ.get("SPARKTAP_BENCH_KAFKA", "").strip()
    broker = None if external else ApacheKafkaBroker().start()
    bootstrap = external or broker.bootstrap_servers  # type: ignore[union-attr]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sparktap-bench-sources")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sparktap.precompiledPyspark", args.precompiled_pyspark)
        .config("spark.sparktap.preloadWorkers", args.preload_workers)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        topic = f"bench-sources-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions=args.partitions)
        produced = produce_tasks(bootstrap, topic, args.events)
        print(
            f"input: {args.events} events on {args.partitions} partitions of Apache Kafka, produced in "
            f"{produced:.1f}s; pyspark {pyspark.__version__}, spark-sql-kafka-0-10_2.13 {version}; sink {args.sink}; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
            f"spark.sparktap.precompiledPyspark={args.precompiled_pyspark}, "
            f"spark.sparktap.preloadWorkers={args.preload_workers}"
        )
        warm = f"bench-warmup-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, warm, partitions=1)
        produce_tasks(bootstrap, warm, 1000)
        kinds = ("sparktap-kafka", "spark-kafka")
        for kind in reversed(kinds):  # Spark's first: it pays for the JVM's first streaming query
            r = backfill(spark, kind, bootstrap, warm, 1000, args.sink, scratch, cold=True)
            print(
                f"{kind} cold start (the session's first query of this source, 1,000 rows, from load()): "
                f"{r['seconds']:.2f}s, CPU {r['cpu']:.2f}s (Spark's JVM, its Python workers and this process)"
            )
        ported_cases(spark, bootstrap)
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for _round in range(args.rounds):
            for kind in kinds:
                r = backfill(spark, kind, bootstrap, topic, args.max_offsets, args.sink, scratch)
                if r["rows"] != args.events:
                    raise RuntimeError(f"{kind} read {r['rows']:.0f} of {args.events} rows")
                runs[kind].append(r)
                print(
                    f"{kind} round {_round + 1}: {r['rows'] / r['seconds']:,.0f} rows/s end to end "
                    f"({r['rows']:.0f} rows, {r['batches']:.0f} batches in {r['seconds']:.1f}s); "
                    f"steady state {r['steady']:,.0f} rows/s; first batch {r['first_ms'] / 1000:.1f}s "
                    f"({r['first_parts']}); "
                    f"CPU {r['cpu'] / r['rows'] * 1e6:.1f} µs/row (Spark's JVM, its Python workers and this process)"
                )
        mean = {k: {f: sum(r[f] for r in v) / len(v) for f in ("seconds", "steady", "cpu")} for k, v in runs.items()}
        for kind in kinds:
            print(
                f"{kind}: {args.events / mean[kind]['seconds']:,.0f} rows/s end to end, "
                f"{mean[kind]['steady']:,.0f} rows/s steady state, CPU {mean[kind]['cpu'] / args.events * 1e6:.1f} "
                f"µs/row (mean of {args.rounds})"
            )
        ours, theirs = mean["sparktap-kafka"], mean["spark-kafka"]
        print(f"steady state ratio sparktap-kafka / spark-kafka: {ours['steady'] / theirs['steady']:.2f}")
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        print(
            f"ratio sparktap/spark_kafka: rows_per_s={theirs['seconds'] / ours['seconds']:.2f} "
            f"cpu_per_row={ours['cpu'] / theirs['cpu']:.2f}"
        )
    finally:
        spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

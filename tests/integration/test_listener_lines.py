"""The wrong jar for the Spark line: the job runs to the end, the driver log says so in one line, and no partial
data is sent. Real pyspark 3.5 (Java 11) and 4.x drivers, real broker."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

import sparktap.listener
from sparktap.listener import javabuild
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import (
    CLUSTER_CANARY,
    CLUSTER_PROBLEM,
    assert_valid,
    env_transport,
    new_topic,
    read_all,
    read_events_until_off,
)
from tests.fixtures.spark_lines import AppRun, SparkLine, run_app, spark_line

pytestmark = pytest.mark.integration

EXPECTED_RESULTS = {"w1": 1000, "w2": 100, "w3": 15_050 * 20 + 99 * 50 * 20, "w4": 200, "w5": 50}


def _run_with_jar(
    line: SparkLine, jar_line: str, kafka: KafkaService, scratch: Path, **extra: str
) -> tuple[AppRun, str]:
    topic = new_topic(kafka.bootstrap_servers)
    conf = sparktap.listener.spark_conf(
        spark_version=line.spark_version,
        bootstrap_servers=kafka.bootstrap_servers,
        topic=topic,
        spool_dir=str(scratch / "spool"),
        flush_timeout_ms=10_000,
        relay_status_interval_ms=100,
        **env_transport(),
    )
    conf["spark.jars"] = str(javabuild.JAR_DIR / javabuild.LINES[jar_line].jar_name)  # forced, not picked
    app = run_app(line, scratch, {"conf": {**conf, **extra}, "description": "d", "sql": "SELECT 'x'"})
    assert app.returncode == 0, app.log[-3000:]
    assert {k: app.out["results"][k] for k in EXPECTED_RESULTS} == EXPECTED_RESULTS  # the job ran to the end
    return app, topic


def _sparktap_lines(log: str) -> list[str]:
    """The driver log's WARN/ERROR lines from sparktap."""
    return [line for line in log.splitlines() if "sparktap" in line and re.search(r"\b(WARN|ERROR)\b", line)]


@pytest.mark.parametrize(
    ("line_name", "jar_line", "wanted"),
    [("3.5", "spark4", "sparktap-listener-spark3_2.12.jar"), ("4", "spark3", "sparktap-listener-spark4_2.13.jar")],
    ids=["scala2.13-jar-on-spark3.5", "scala2.12-jar-on-spark4"],
)
def test_a_jar_of_the_other_line_says_so_in_one_line_and_sends_nothing(
    line_name: str, jar_line: str, wanted: str, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    line = spark_line(line_name)
    app, topic = _run_with_jar(line, jar_line, kafka_broker, tmp_path)
    built_for = javabuild.LINES[jar_line]
    (logged,) = _sparktap_lines(app.log)
    assert "ERROR" in logged
    assert (
        f"sparktap: listener is off for this application: this listener jar is for Spark {built_for.spark_major}.x "
        f"/ Scala {built_for.scala} ({built_for.artifact}.jar), but the driver runs Spark {line.spark_version} "
        f"/ Scala {'2.12' if line_name == '3.5' else '2.13'}."
    ) in logged
    assert f"/ Java {app.out['java_version']}: put {wanted} on spark.jars instead" in logged
    assert logged.endswith("; the job runs on")
    listener: dict[str, Any] = app.out["listener"]
    assert listener["active"] is False and listener["status"] == "{}"
    assert listener["off_reason"] in logged
    # nothing at all reached Kafka (the listener never started its relay): read for a while to be sure
    assert read_all(kafka_broker.bootstrap_servers, topic, timeout=5.0) == []


def test_a_callback_that_fails_to_link_turns_the_listener_off_after_a_health_event(
    kafka_broker: KafkaService, tmp_path: Path
) -> None:
    """With the line check off (diagnosis only), the Scala 2.13 jar on Spark 3.5 (on Java 17, where its classes
    load) sends what links, then turns itself off at the first callback that does not."""
    line = dataclasses.replace(spark_line("3.5"), java_home=None)  # the machine's JDK 17
    app, topic = _run_with_jar(line, "spark4", kafka_broker, tmp_path, **{"spark.sparktap.lineCheck": "false"})
    events = read_events_until_off(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)
    types = events.types()
    # app_start and the driver's executor_added link on both lines; the first action's SQL start walks the plan,
    # reading each node's SparkPlanInfo.metrics() (for the scans' file metrics) first, a Scala Seq: that is where it
    # stops
    assert types["app_start"] == 1
    assert set(types) <= {"app_start", "executor_added", "listener_health"}
    final = events.final_health
    assert final["seq"] == max(events.seqs) and events.seqs == list(range(1, final["seq"] + 1))
    assert final["callback_errors"] == 1
    assert final["first_error"] == (
        "onOtherEvent: java.lang.NoSuchMethodError: "
        "'scala.collection.immutable.Seq org.apache.spark.sql.execution.SparkPlanInfo.metrics()'"
    )
    (logged,) = _sparktap_lines(app.log)
    assert "sparktap: listener is off for this application: onOtherEvent failed to link (java.lang.NoSuchMeth" in logged
    assert f"on Spark {line.spark_version} / Scala 2.12." in logged
    assert app.out["listener"]["active"] is False


def test_an_invalid_cluster_name_is_refused_at_start_in_one_line(kafka_broker: KafkaService, tmp_path: Path) -> None:
    """spark.sparktap.cluster outside the identifier rule (schemas/types.py), on Spark 3.5 / Java 11 (Spark 4: in
    test_listener_modes.py): the listener stays off with one line naming the conf and the allowed set, the job
    runs, nothing is sent."""
    line = spark_line("3.5")
    topic = new_topic(kafka_broker.bootstrap_servers)
    conf = sparktap.listener.spark_conf(
        spark_version=line.spark_version,
        bootstrap_servers=kafka_broker.bootstrap_servers,
        topic=topic,
        spool_dir=str(tmp_path / "spool"),
        **env_transport(),
    )
    conf["spark.sparktap.cluster"] = CLUSTER_CANARY
    app = run_app(line, tmp_path, {"conf": conf, "light": True})
    assert app.returncode == 0, app.log[-3000:]
    assert app.out["results"] == {"w1": 1000}
    problem = CLUSTER_PROBLEM
    (logged,) = _sparktap_lines(app.log)
    assert logged.endswith(f" WARN SparkTapListener: sparktap: listener is off for this application: {problem}; "
                           "the job runs on"), logged  # fmt: skip
    assert app.out["listener"] == {"active": False, "off_reason": problem, "status": "{}"}
    assert read_all(kafka_broker.bootstrap_servers, topic, timeout=2.0) == []

"""Listener settings in real applications: task sampling and switching task events off, and the listener turning
itself off (one log line, the job unaffected) when it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

import sparktap.listener
from sparktap.local.ports import wait_until
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import (
    CLUSTER_CANARY,
    CLUSTER_PROBLEM,
    assert_valid,
    listener_of,
    listener_settings,
    new_topic,
    read_all,
    read_app_events,
    start_session,
)
from tests.fixtures.spark import SparkSessions

pytestmark = pytest.mark.integration

M64 = (1 << 64) - 1


def sampled(task_id: int, fraction: float) -> bool:
    """The listener's deterministic per-task choice (splitmix64 of the task id), as in ListenerConfig.emitTask."""
    z = (task_id + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return (z >> 11) * 2.0**-53 < fraction


@pytest.mark.parametrize("tasks", ["sample:0.5", "off"])
def test_task_events_sampled_or_off_while_stage_aggregates_count_every_task(
    tasks: str, listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    spark = start_session(
        listener_sessions, listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path, tasks=tasks)
    )
    assert spark.range(0, 4000, 1, 40).count() == 4000
    listener_sessions.stop()

    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)
    assert events.seqs == list(range(1, events.final_health["seq"] + 1))  # not emitting is not dropping
    emitted = sorted(e["task_id"] for e in events.of("task_end"))
    completed = events.of("stage_completed")
    ran = sum(s["num_tasks"] for s in completed)
    all_task_ids = range(ran)  # a fresh SparkContext numbers its tasks 0, 1, 2, …
    expected = [t for t in all_task_ids if sampled(t, 0.5)] if tasks.startswith("sample") else []
    assert emitted == expected
    assert sum(s["tasks_succeeded"] for s in completed) == ran
    assert max(s["num_tasks"] for s in completed) == 40
    (start,) = events.of("app_start")
    assert start["properties"]["spark.sparktap.tasks"] == tasks


def _off_reason(spark: object) -> str:
    listener = listener_of(spark)  # type: ignore[arg-type]
    reason: str = wait_until(lambda: listener.offReason(), 30.0, "the listener turning itself off")
    assert not listener.isActive()
    return reason


@pytest.mark.parametrize(
    ("case", "expected_in_line"),
    [
        ("no python for the relay", "spark.sparktap.relay.python"),
        ("unknown Kafka setting", 'No such configuration property: "no.such.property"'),
        ("bootstrap servers missing", "--conf spark.sparktap.kafka.bootstrap.servers="),
        ("invalid tasks setting", "--conf spark.sparktap.tasks=all"),
        ("invalid cluster name", CLUSTER_PROBLEM),
    ],
)
def test_listener_that_cannot_run_turns_itself_off_and_the_job_runs_on(
    case: str, expected_in_line: str, listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    # the relay's own checks (its Python, librdkafka's properties) run on the relay whatever the suite's transport;
    # the JVM producer ignores a librdkafka-only property with a line (test_listener_jvm_transport)
    relay = {"transport": "relay"} if case in ("no python for the relay", "unknown Kafka setting") else {}
    conf = listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path, **relay)
    if case == "no python for the relay":
        conf["spark.sparktap.relay.python"] = str(tmp_path / "no-such-python")
    elif case == "unknown Kafka setting":
        conf["spark.sparktap.kafka.no.such.property"] = "secret-value-never-logged"
    elif case == "bootstrap servers missing":
        del conf["spark.sparktap.kafka.bootstrap.servers"]
    elif case == "invalid cluster name":
        conf["spark.sparktap.cluster"] = CLUSTER_CANARY
    else:
        conf["spark.sparktap.tasks"] = "some"
    spark = start_session(listener_sessions, conf)

    reason = _off_reason(spark)
    assert expected_in_line in reason
    assert "secret-value-never-logged" not in reason
    assert spark.range(0, 1000, 1, 4).selectExpr("sum(id)").collect()[0][0] == 499_500
    listener_sessions.stop()
    assert read_all(kafka_broker.bootstrap_servers, topic, timeout=2.0) == []


def test_enabled_false_keeps_the_listener_silent(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    conf = listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path, enabled=False)
    spark = start_session(listener_sessions, conf)
    assert listener_of(spark).offReason() == "spark.sparktap.enabled=false"
    assert spark.range(10).count() == 10
    listener_sessions.stop()
    assert read_all(kafka_broker.bootstrap_servers, topic, timeout=2.0) == []
    assert conf["spark.extraListeners"] == sparktap.listener.LISTENER_CLASS

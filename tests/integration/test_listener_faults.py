"""Faults around the listener in real applications on the relay transport: Kafka stopped or paused, the relay
stalled or killed.

The job must never notice; every loss must be counted (listener_health) and visible (seq gaps); nothing is lost
that the design promises to keep (paused broker: buffered; stopped broker: spooled and resent later). Every
application here runs ``transport=relay`` whatever ``SPARKTAP_TEST_LISTENER_TRANSPORT`` says: the counts asserted
(the relay's backlog, a pause buffered in the relay's memory rather than spooled, its process restarted) are the
relay's. The JVM producer's faults: tests/integration/test_listener_jvm_transport.py (the broker stopped mid-job:
spooled, resent in order; an unreachable broker: all spooled, the relay's bytes) and ``python -m
bench.listener_outage`` (a 2-minute outage in a 5,000-task job).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparktap.local.ports import wait_until
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import (
    assert_valid,
    listener_of,
    listener_settings,
    listener_status,
    new_topic,
    read_app_events,
    relay_pid,
    relay_pids,
    start_session,
    stop_session,
)
from tests.fixtures.spark import SparkSessions

pytestmark = pytest.mark.integration

FLUSH_TIMEOUT_MS = 3000
SLEEPY_TASKS = "java_method('java.lang.Thread', 'sleep', {ms}L) AS slept"


@pytest.fixture
def sessions(spark_sessions: SparkSessions) -> Iterator[SparkSessions]:
    yield spark_sessions
    stop_session(spark_sessions)


@pytest.fixture
def broker(kafka_broker: KafkaService) -> Iterator[KafkaService]:
    """The pausable broker; resumed whatever happens in the test."""
    if not kafka_broker.pausable:
        pytest.skip("needs the embedded (pausable) broker")
    yield kafka_broker
    assert kafka_broker.broker is not None
    if kafka_broker.broker.is_paused:
        kafka_broker.resume()


def _drain_cli(spool_dir: Path, bootstrap_servers: str) -> str:
    """Resend the spool with the real command line (another process, as an operator would)."""
    proc = subprocess.run(
        [sys.executable, "-m", "sparktap", "relay-drain", "--spool-dir", str(spool_dir),
         "--bootstrap-servers", bootstrap_servers, "--timeout", "30"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _run_app_with_broker_stopped(
    sessions: SparkSessions, broker: KafkaService, tmp_path: Path, **settings: Any
) -> tuple[str, float, float]:
    """An application that runs entirely while the broker is stopped; returns (app id, job s, stop s)."""
    topic = new_topic(broker.bootstrap_servers)
    conf = listener_settings(
        broker.bootstrap_servers,
        topic,
        tmp_path / "spool",
        flush_timeout_ms=FLUSH_TIMEOUT_MS,
        transport="relay",
        **settings,
    )
    broker.pause()
    spark = start_session(sessions, conf)
    app_id = spark.sparkContext.applicationId
    started = time.monotonic()
    assert spark.range(0, 10_000, 1, 8).selectExpr("id % 10 AS k").groupBy("k").count().count() == 10
    job_seconds = time.monotonic() - started
    started = time.monotonic()
    stop_session(sessions)
    stop_seconds = time.monotonic() - started
    wait_until(lambda: not relay_pids(app_id), 10.0, "the relay to exit after the application")
    broker.resume()
    return topic, job_seconds, stop_seconds


def test_broker_stopped_for_the_whole_job_spools_everything_and_drain_resends_it(
    sessions: SparkSessions, broker: KafkaService, tmp_path: Path
) -> None:
    topic, job_seconds, stop_seconds = _run_app_with_broker_stopped(sessions, broker, tmp_path)
    assert job_seconds < 30
    assert stop_seconds < FLUSH_TIMEOUT_MS / 1000 + 2  # the driver never waits beyond the flush deadline
    assert list((tmp_path / "spool").glob("seg-*.seg"))

    line = _drain_cli(tmp_path / "spool", broker.bootstrap_servers)

    events = read_app_events(broker.bootstrap_servers, topic)
    assert_valid(events.events)
    final = events.final_health
    n = final["seq"]
    assert events.seqs == list(range(1, n + 1))  # nothing lost: all spooled, all resent
    assert final["relay_spooled"] == n - 1  # everything before the final report waited in the spool
    assert final.get("kafka_events_lost", 0) == 0
    assert final["relay_backlog"] == n - 1
    assert line == f"drained segments=1 records={n} delivered={n} left_in_spool=0"
    assert not list((tmp_path / "spool").glob("seg-*"))


def test_broker_stopped_with_a_tiny_spool_counts_the_loss_exactly(
    sessions: SparkSessions, broker: KafkaService, tmp_path: Path
) -> None:
    topic, job_seconds, stop_seconds = _run_app_with_broker_stopped(sessions, broker, tmp_path, spool_max_bytes=4096)
    assert job_seconds < 30
    assert stop_seconds < FLUSH_TIMEOUT_MS / 1000 + 2

    _drain_cli(tmp_path / "spool", broker.bootstrap_servers)

    events = read_app_events(broker.bootstrap_servers, topic)
    assert_valid(events.events)
    final = events.final_health
    n = final["seq"]
    lost = final["kafka_events_lost"]
    spooled = final["relay_spooled"]
    assert lost > 0 and spooled > 0
    assert spooled + lost == n - 1  # every event before the final report: spooled or counted as lost
    received = set(events.seqs)
    assert len(received) == len(events.events) == spooled + 1  # the spooled ones and the final report
    assert len(set(range(1, n + 1)) - received) == lost  # the loss shows as exactly that many seq gaps


def test_broker_paused_20s_mid_job_loses_nothing(sessions: SparkSessions, broker: KafkaService, tmp_path: Path) -> None:
    topic = new_topic(broker.bootstrap_servers)
    conf = listener_settings(broker.bootstrap_servers, topic, tmp_path, health_interval_ms=2000, transport="relay")
    spark = start_session(sessions, conf)
    sc = spark.sparkContext
    done = threading.Event()
    result: list[Any] = []

    def job() -> None:
        try:
            # 100 tasks of 0.5 s on 2 cores: about 25 s
            result.append(len(spark.range(0, 100, 1, 100).selectExpr(SLEEPY_TASKS.format(ms=500)).collect()))
        finally:
            done.set()

    worker = threading.Thread(target=job, daemon=True)
    worker.start()
    tracker = sc.statusTracker()

    def under_way() -> bool:
        infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        return any(info is not None and info.numCompletedTasks >= 4 for info in infos)

    wait_until(under_way, 60.0, "the job to be under way")
    with broker.paused():
        assert not done.wait(20.0), "the job finished before the 20 s pause ended: it must span the pause"
        backlog_during_pause = listener_status(spark)["relay_backlog"]
    assert done.wait(60.0)
    worker.join()
    assert result == [100]
    stop_session(sessions)

    events = read_app_events(broker.bootstrap_servers, topic, timeout=60.0)
    assert_valid(events.events)
    final = events.final_health
    assert events.seqs == list(range(1, final["seq"] + 1))  # no event lost
    assert len(events.of("task_end")) == 100
    assert final.get("kafka_events_lost", 0) == 0 and final.get("relay_spooled", 0) == 0
    assert backlog_during_pause > 0  # the events of the pause waited in the relay's buffer
    assert any(h.get("relay_backlog", 0) > 0 for h in events.of("listener_health"))


def test_tiny_queue_overflow_is_counted_and_shows_as_seq_gaps(
    sessions: SparkSessions, broker: KafkaService, tmp_path: Path
) -> None:
    topic = new_topic(broker.bootstrap_servers)
    conf = listener_settings(broker.bootstrap_servers, topic, tmp_path, queue_capacity=16, transport="relay")
    spark = start_session(sessions, conf)
    app_id = spark.sparkContext.applicationId
    assert spark.range(0, 100, 1, 2).count() == 100
    wait_until(lambda: listener_status(spark)["relay_up"], 30.0, "the relay to be up")
    pid = relay_pid(app_id)
    os.kill(pid, signal.SIGSTOP)  # a stalled relay: the pipe fills, the writer blocks, the tiny queue overflows
    try:
        assert spark.range(0, 2000, 1, 1000).selectExpr("sum(id)").collect()[0][0] == 1_999_000
        dropped_while_stalled = listener_status(spark)["events_dropped"]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert listener_status(spark)["callback_errors"] == 0
    stop_session(sessions)

    events = read_app_events(broker.bootstrap_servers, topic)
    assert_valid(events.events)
    final = events.final_health
    n, dropped = final["seq"], final["events_dropped"]
    assert dropped >= dropped_while_stalled > 0
    assert sum(final["dropped_by_type"].values()) == dropped
    assert final["dropped_by_type"]["task_end"] > 0
    received = set(events.seqs)
    assert len(received) == len(events.events) == n - dropped
    assert len(set(range(1, n + 1)) - received) == dropped
    assert final["events_accepted"] + dropped == n - 1


def test_killed_relay_is_restarted_and_nothing_is_lost(
    sessions: SparkSessions, broker: KafkaService, tmp_path: Path
) -> None:
    topic = new_topic(broker.bootstrap_servers)
    spark = start_session(sessions, listener_settings(broker.bootstrap_servers, topic, tmp_path, transport="relay"))
    app_id = spark.sparkContext.applicationId
    assert spark.range(0, 100, 1, 4).count() == 100
    # every accepted event was handed to the relay, which delivered it: killing the relay now loses nothing
    wait_until(lambda: _all_delivered(listener_status(spark)), 30.0, "every event written and delivered")
    first = relay_pid(app_id)
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: relay_pids(app_id) not in ([], [first]), 30.0, "a new relay")
    wait_until(lambda: listener_status(spark)["relay_up"], 30.0, "the new relay to be up")
    assert spark.range(0, 100, 1, 4).count() == 100
    assert listener_of(spark).isActive()
    stop_session(sessions)

    events = read_app_events(broker.bootstrap_servers, topic)
    final = events.final_health
    where = [(r.offset, orjson.loads(r.value)["seq"]) for r in events.records[:5]]
    assert events.seqs == list(range(1, final["seq"] + 1)), f"(offset, seq) of the first records: {where}; {final}"
    assert final["relay_restarts"] == 1
    assert final.get("kafka_events_lost", 0) == 0
    assert len(events.of("job_end")) == len(events.of("job_start")) >= 2


def _all_delivered(status: dict[str, Any]) -> bool:
    return (
        bool(status["relay_up"])
        and status["queue_depth"] == 0
        and status["relay_backlog"] == 0
        and (status["events_written"] == status["events_accepted"])
    )

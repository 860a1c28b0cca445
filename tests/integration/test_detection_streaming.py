"""The streaming rules end to end: real Spark local[2] with the listener → real broker → the real collector →
ClickHouse (chDB, and the same topic collected again into clickhouse-server 18.16) → the detection query and the
streaming dashboard's panels.

- Saturation: a rate → foreachBatch query whose batches take longer than its trigger is saturated while it still runs
  (its progress rows are the query's own recentProgress); a query with idle time between batches is not.
- State: a streaming aggregation without a watermark grows its state; one with a watermark evicts and is not
  reported.
- Falling behind: the same Kafka query capped by maxOffsetsPerTrigger below the arrival rate, and uncapped; only the
  capped one's backlog grows, and it is found while it runs.

The plan rules' end-to-end tests are in ``test_detection_plans.py``; the two share
``tests/support/plan_streaming.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from sparktap.collector.streaming import register
from sparktap.detection import Finding
from sparktap.local.ports import wait_until
from sparktap.store import Storage
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import assert_valid, listener_settings, new_topic, read_app_events, start_session
from tests.fixtures.spark import SparkSessions
from tests.support.listener_apps import recent_progress
from tests.support.plan_streaming import collecting, detect, on_both, server_database

pytestmark = pytest.mark.integration

STREAMING_RULES = ("streaming_saturated", "streaming_state_growth")


@pytest.fixture
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database on clickhouse-server 18.16 (or SPARKTAP_TEST_CLICKHOUSE), dropped afterwards."""
    with server_database(request.getfixturevalue("clickhouse_server")) as url:
        yield url


def _label(progress: list[dict[str, Any]]) -> str:
    return f"{progress[0]['name']} ({progress[0]['id']})"


def _stored_progress(storage: Storage, query_id: str) -> list[tuple[int, int]]:
    rows = storage.query(
        f"SELECT batch_id, num_input_rows FROM {storage.database}.streaming_query_progress_dedup "
        f"WHERE query_id = '{query_id}' ORDER BY batch_id"
    )
    return [(int(r["batch_id"]), int(r["num_input_rows"])) for r in rows]


def streaming_app(sessions: SparkSessions, kafka: KafkaService, tmp_path: Path) -> tuple[str, Any]:
    """A session with the listener sending every progress event to a new topic: (topic, session)."""
    topic = new_topic(kafka.bootstrap_servers)
    conf = listener_settings(kafka.bootstrap_servers, topic, tmp_path / "spool", streaming_progress_interval_ms=0)
    return topic, start_session(sessions, conf)


def rate(spark: Any, rows_per_second: int) -> Any:
    return spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).option("numPartitions", 2).load()


def test_a_saturated_stream_is_found_while_it_runs_and_an_idle_one_is_not(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path, server_url: str
) -> None:
    topic, spark = streaming_app(listener_sessions, kafka_broker, tmp_path)

    def slow_sink(batch: Any, batch_id: int) -> None:
        batch.count()
        # the workload: a sink slower than the trigger, and than the rate source's one-second offsets (not a wait)
        time.sleep(1.5)

    saturated = (
        rate(spark, 50)
        .writeStream.foreachBatch(slow_sink)
        .queryName("saturated")
        .option("checkpointLocation", str(tmp_path / "chk-saturated"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    idle = rate(spark, 50).writeStream.format("memory").queryName("idle").trigger(processingTime="1 second").start()
    try:
        with collecting(kafka_broker, topic, f"chdb://{tmp_path / 'chdb'}") as collector:
            storage = collector.storage
            assert storage is not None

            def fired() -> list[Finding]:
                if min(len(_stored_progress(storage, str(q.id))) for q in (saturated, idle)) < 10:
                    return []
                return [f for f in detect(storage, STREAMING_RULES)]

            live = wait_until(fired, 120.0, "a streaming finding while the queries run")
            still_running = saturated.isActive and idle.isActive
            live_progress = recent_progress(saturated)
    finally:
        saturated.stop()
        idle.stop()
    progress = {q.name: recent_progress(q) for q in (saturated, idle)}
    listener_sessions.stop()

    assert still_running
    (finding,) = live
    assert (finding.rule, finding.severity, finding.running, finding.stage_name) == (
        "streaming_saturated",
        "warning",
        True,
        _label(live_progress),
    )
    assert (finding.stage_id, finding.sql_execution_id, finding.node_id) == (None, None, None)
    assert finding.evidence["busy_share"] >= 0.9 and finding.evidence["batches"] == 10
    assert finding.evidence["avg_batch_ms"] >= 1500
    assert finding.explanation.startswith(
        f"Over batches {int(finding.evidence['first_batch_id'])}–{int(finding.evidence['last_batch_id'])} the query "
        "was busy "
    )
    assert "maxOffsetsPerTrigger" in finding.suggested_fix

    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)

    def panels(rows: dict[str, list[dict[str, Any]]]) -> None:
        runs = {
            r["query"]: (int(r["batches"]), int(r["last_batch_id"]), int(r["input_rows"]), r["state"])
            for r in rows["Streaming queries"]
        }
        assert runs == {
            _label(p): (len(p), p[-1]["batchId"], sum(b["numInputRows"] for b in p), "stopped")
            for p in progress.values()
        }
        assert [(r["rule"], r["query"]) for r in rows["Streaming findings"]] == [
            ("streaming_saturated", _label(progress["saturated"]))
        ]
        if "Batch duration vs interval" in rows:
            assert {r["query"] for r in rows["Batch duration vs interval"]} == set(runs)

    findings = on_both(kafka_broker, topic, events, tmp_path / "after", server_url, STREAMING_RULES, panels)
    assert [(f.rule, f.stage_name, f.running) for f in findings] == [
        ("streaming_saturated", _label(progress["saturated"]), False)
    ]
    with collecting(kafka_broker, topic, f"chdb://{tmp_path / 'after' / 'chdb'}") as collector:
        assert collector.storage is not None
        for name, theirs in progress.items():
            assert _stored_progress(collector.storage, theirs[0]["id"]) == [
                (p["batchId"], p["numInputRows"]) for p in theirs
            ], name
    last = progress["saturated"][-10:]
    (after,) = findings
    assert (after.evidence["first_batch_id"], after.evidence["last_batch_id"]) == (
        last[0]["batchId"],
        last[-1]["batchId"],
    )
    durations = [p["durationMs"]["triggerExecution"] for p in last]
    assert after.evidence["avg_batch_ms"] == pytest.approx(sum(durations) / 10)


STATE_RULE = "streaming_state_growth"


def test_state_without_a_watermark_grows_and_one_with_a_watermark_does_not(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path, server_url: str
) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    topic, spark = streaming_app(listener_sessions, kafka_broker, tmp_path)
    # 2 s triggers: on two shared cores, 1 s batches of the growing state get busy enough to be saturated as well
    unbounded = (
        rate(spark, 1000)
        .groupBy("value")
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .queryName("per_value")
        .option("checkpointLocation", str(tmp_path / "chk-unbounded"))
        .trigger(processingTime="2 seconds")
        .start()
    )
    windowed = (
        rate(spark, 1000)
        .withWatermark("timestamp", "1 second")
        .groupBy(F.window("timestamp", "1 second"))
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .queryName("per_second")
        .option("checkpointLocation", str(tmp_path / "chk-windowed"))
        .trigger(processingTime="2 seconds")
        .start()
    )
    try:
        wait_until(
            lambda: all(len(q.recentProgress) >= 12 for q in (unbounded, windowed)),
            180.0,
            "12 micro-batches of both queries",
        )
    finally:
        unbounded.stop()
        windowed.stop()
    progress = {q.name: recent_progress(q) for q in (unbounded, windowed)}
    listener_sessions.stop()

    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)
    evicted = sum(
        op["numRowsRemoved"] + op["numRowsDroppedByWatermark"]
        for p in progress["per_second"][-10:]
        for op in p["stateOperators"]
    )
    assert evicted > 0

    def panels(rows: dict[str, list[dict[str, Any]]]) -> None:
        peak = {r["query"]: 0 for r in rows.get("State rows", [])}
        for r in rows.get("State rows", []):
            peak[r["query"]] = max(peak[r["query"]], int(r["state_rows"]))
        if "State rows" in rows:
            assert peak[_label(progress["per_value"])] == max(
                p["stateOperators"][0]["numRowsTotal"] for p in progress["per_value"]
            )
        # Only the state rule: whether these batches also fill their 2 s trigger (streaming_saturated, tested above
        # with a workload built to be saturated) depends on the machine's load: a CI run busy with other Spark
        # tests took 2.1-4.5 s a batch, and saturated was then a right finding on both queries.
        assert [(r["rule"], r["query"]) for r in rows["Streaming findings"] if r["rule"] == STATE_RULE] == [
            (STATE_RULE, _label(progress["per_value"]))
        ]

    findings = on_both(kafka_broker, topic, events, tmp_path, server_url, (STATE_RULE,), panels)
    assert [(f.rule, f.severity, f.stage_name, f.running) for f in findings] == [
        ("streaming_state_growth", "warning", _label(progress["per_value"]), False)
    ]
    last = progress["per_value"][-10:]
    rows = [p["stateOperators"][0]["numRowsTotal"] for p in last]
    (finding,) = findings
    assert {
        k: finding.evidence[k]
        for k in (
            "state_rows_first",
            "state_rows_last",
            "rows_evicted",
            "first_batch_id",
            "last_batch_id",
            "watermark_ms",
        )
    } == {
        "state_rows_first": rows[0],
        "state_rows_last": rows[-1],
        "rows_evicted": 0,
        "first_batch_id": last[0]["batchId"],
        "last_batch_id": last[-1]["batchId"],
        "watermark_ms": 0,
    }
    assert finding.value == rows[-1] - rows[0]
    assert finding.explanation.startswith(
        f"Over batches {last[0]['batchId']}–{last[-1]['batchId']} the state grew from {rows[0]} to {rows[-1]} rows ("
    )
    assert finding.explanation.endswith(
        ") and there is no watermark to evict any: it grows until the executors run out of memory"
    )
    memory = [sum(op["memoryUsedBytes"] for op in p["stateOperators"]) for p in last]
    assert (finding.evidence["state_bytes_first"], finding.evidence["state_bytes_last"]) == (memory[0], memory[-1])
    assert "withWatermark" in finding.suggested_fix


def _produce(bootstrap: str, topic: str, rows_per_second: int, stop: threading.Event) -> None:
    """The source's arrivals: ``rows_per_second`` messages a second, sent every tenth of a second, until ``stop``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent, started = 0, time.monotonic()
    while not stop.wait(0.1):  # the workload's pace, not a wait for a result
        due = int((time.monotonic() - started) * rows_per_second)
        for i in range(sent, due):
            producer.produce(topic, value=f"row-{i}".encode())
        sent = max(sent, due)
        producer.poll(0)
    producer.flush(10)


def kafka_stream(spark: Any, bootstrap: str, topic: str, max_offsets: int | None) -> Any:
    """The topic read with the ``sparktap-kafka`` source, at most ``max_offsets`` rows a micro-batch (or all)."""
    register(spark)
    reader = (
        spark.readStream.format("sparktap-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("parse", "raw")
    )
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets)
    return reader.load()


def test_a_capped_stream_whose_backlog_grows_is_behind_and_the_same_uncapped_keeps_up(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    """Two topics receive 400 rows/s each; the same query reads each on a 1 s trigger, once with
    maxOffsetsPerTrigger=100 (at most 100 rows/s: a quarter of the arrivals), once without. Spark's input rate is the
    capped intake, so only the backlog (latest minus end offset, per batch) tells that the first falls behind: found
    while it runs, with the backlog's growth (~300 rows/s), the throughput, the arrival rate and the time to catch
    up. The uncapped one reads all that arrived each batch: its backlog stays flat and nothing is found. (Busy share
    is set to 100 % here: on shared cores either query's batches may fill their trigger, which is another finding.)"""
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic(bootstrap)
    conf = listener_settings(bootstrap, topic, tmp_path / "spool", streaming_progress_interval_ms=0)
    spark = start_session(listener_sessions, conf)
    capped_topic, uncapped_topic = new_topic(bootstrap), new_topic(bootstrap)
    stop = threading.Event()
    producers = [
        threading.Thread(target=_produce, args=(bootstrap, t, 400, stop), daemon=True)
        for t in (capped_topic, uncapped_topic)
    ]
    for p in producers:
        p.start()
    queries: dict[str, Any] = {}
    for name, source, cap in (("capped", capped_topic, 100), ("uncapped", uncapped_topic, None)):
        queries[name] = (
            kafka_stream(spark, bootstrap, source, cap)
            .writeStream.format("noop")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / f"chk-{name}"))
            .trigger(processingTime="1 second")
            .start()
        )
        # one source runner starting at a time: Spark gives a Python runner 10 s to connect back
        wait_until(lambda q=queries[name]: q.lastProgress or q.exception(), 120.0, f"the {name} query's first batch")
    backlog_only = {"busy_share": 1.0}  # back-to-back batches stay under 100 % busy: only "behind" can fire
    try:
        with collecting(kafka_broker, topic, f"chdb://{tmp_path / 'chdb'}") as collector:
            storage = collector.storage
            assert storage is not None

            def fired() -> list[Finding]:
                if min(len(_stored_progress(storage, str(q.id))) for q in queries.values()) < 6:
                    return []
                return detect(storage, ("streaming_saturated",), streaming_saturated=backlog_only)

            live = wait_until(fired, 180.0, "the behind finding while the queries run")
            running = all(q.isActive for q in queries.values())
            labels = {name: _label(recent_progress(q)) for name, q in queries.items()}
            uncapped_backlogs = [
                int(r["b"])
                for r in storage.query(
                    f"SELECT backlog AS b FROM {storage.database}.streaming_query_progress_dedup "
                    f"ARRAY JOIN sources_backlog AS backlog WHERE query_id = '{queries['uncapped'].id}'"
                )
            ]
    finally:
        stop.set()
        for q in queries.values():
            q.stop()
        for p in producers:
            p.join(15)
    listener_sessions.stop()

    assert running
    (behind,) = live
    assert (behind.rule, behind.stage_name, behind.running) == ("streaming_saturated", labels["capped"], True)
    assert "falling behind" in behind.explanation
    e = behind.evidence
    assert e["backlog_last"] - e["backlog_first"] >= 1_000
    assert 0 < e["throughput_rows_per_s"] <= 100 * 1.05  # never more than the cap allows
    assert 150 <= e["backlog_growth_rows_per_s"] <= 400  # ~300: 400 arriving, at most 100 taken
    assert e["arrival_rows_per_s"] == pytest.approx(e["throughput_rows_per_s"] + e["backlog_growth_rows_per_s"])
    assert e["catch_up_ms"] == pytest.approx(e["backlog_last"] / e["throughput_rows_per_s"] * 1000)
    assert e["time_lost_ms"] == e["catch_up_ms"]
    # the uncapped query read up to the latest offset every batch: a known, flat backlog
    assert len(uncapped_backlogs) >= 6 and min(uncapped_backlogs) >= 0
    assert max(uncapped_backlogs) - min(uncapped_backlogs) < 1_000

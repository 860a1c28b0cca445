"""Structured Streaming queries through the listener: start, every micro-batch's progress and the end, compared
with the query's own ``recentProgress``; progress rate-limited per query and the skips counted. Real Spark
local[2], real broker."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from sparktap.local.ports import wait_until
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import (
    AppEvents,
    assert_valid,
    listener_settings,
    new_topic,
    read_app_events,
    start_session,
)
from tests.fixtures.spark import SparkSessions
from tests.support.listener_apps import recent_progress

pytestmark = pytest.mark.integration


def _rate_app(
    sessions: SparkSessions, kafka: KafkaService, spool: Path, name: str, batches: int, interval_ms: int
) -> tuple[list[dict[str, Any]], AppEvents]:
    """An application whose one streaming query (a rate source into the memory sink, every 300 ms) runs `batches`
    micro-batches: the query's recentProgress and every event the listener sent, validated."""
    topic = new_topic(kafka.bootstrap_servers)
    conf = listener_settings(kafka.bootstrap_servers, topic, spool, streaming_progress_interval_ms=interval_ms)
    spark = start_session(sessions, conf)
    stream = spark.readStream.format("rate").option("rowsPerSecond", 40).option("numPartitions", 2).load()
    query = stream.writeStream.format("memory").queryName(name).trigger(processingTime="300 milliseconds").start()
    try:
        wait_until(lambda: (query.lastProgress or {}).get("batchId", -1) >= batches - 1, 60.0, f"{batches} batches")
    finally:
        query.stop()
    progress = recent_progress(query)
    sessions.stop()
    events = read_app_events(kafka.bootstrap_servers, topic)
    assert_valid(events.events)
    return progress, events


def test_progress_events_are_the_querys_own_progress(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    progress, events = _rate_app(listener_sessions, kafka_broker, tmp_path, "rates_all", batches=5, interval_ms=0)
    (start,) = events.of("streaming_query_start")
    (end,) = events.of("streaming_query_end")
    query_id, run_id = progress[0]["id"], progress[0]["runId"]
    assert (start["query_id"], start["run_id"], start["name"]) == (query_id, run_id, "rates_all")
    assert (end["query_id"], end["run_id"], end["name"]) == (query_id, run_id, "rates_all")
    assert "exception" not in end and end.get("progress_skipped", 0) == 0
    ours = sorted(events.of("streaming_query_progress"), key=lambda e: e["seq"])
    assert len(progress) >= 5
    assert [(e["batch_id"], e.get("num_input_rows", 0)) for e in ours] == [
        (p["batchId"], p["numInputRows"]) for p in progress
    ]
    for e, p in zip(ours, progress, strict=True):
        assert e["query_id"] == query_id and e["run_id"] == run_id
        assert e["duration_ms"] == p["durationMs"]
        assert e["sink"] == p["sink"]["description"]
        assert e["sink_num_output_rows"] == p["sink"]["numOutputRows"]
        (source,) = e["sources"]
        (theirs,) = p["sources"]
        assert source["description"] == theirs["description"]
        assert (source["start_offset"], source["end_offset"]) == (
            str(theirs["startOffset"]) if theirs["startOffset"] is not None else "",
            str(theirs["endOffset"]),
        )
        assert source.get("num_input_rows", 0) == theirs["numInputRows"]
        assert start["seq"] < e["seq"] < end["seq"]


def test_progress_is_rate_limited_per_query_and_the_skips_counted(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    progress, events = _rate_app(
        listener_sessions, kafka_broker, tmp_path, "rates_limited", batches=4, interval_ms=600_000
    )
    (sent,) = events.of("streaming_query_progress")  # the first; the rest fall within the 10 minutes
    assert sent["batch_id"] == progress[0]["batchId"]
    (end,) = events.of("streaming_query_end")
    assert end["progress_skipped"] == len(progress) - 1


def test_a_sparktap_kafka_backlog_shows_in_the_progress_events(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    """300 records waiting, 50 per micro-batch: each progress event's source reports what is still unread."""
    from confluent_kafka import Producer

    from sparktap.collector.streaming import register
    from sparktap.local.broker import create_topic

    bootstrap = kafka_broker.bootstrap_servers
    events_topic, data = new_topic(bootstrap), f"backlog-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, data, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(300):
        producer.produce(data, value=b"%d" % i)
    assert producer.flush(30) == 0
    conf = listener_settings(bootstrap, events_topic, tmp_path / "spool", streaming_progress_interval_ms=0)
    spark = start_session(listener_sessions, conf)
    register(spark)
    df = (
        spark.readStream.format("sparktap-kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", data).option("startingOffsets", "earliest").option("parse", "raw")
        .option("maxOffsetsPerTrigger", "50").load()
    )  # fmt: skip
    query = (
        df.writeStream.format("memory").queryName(f"backlog_{uuid.uuid4().hex[:6]}")
        .option("checkpointLocation", str(tmp_path / "chk")).trigger(processingTime="200 milliseconds").start()
    )  # fmt: skip
    try:
        wait_until(lambda: (query.lastProgress or {}).get("batchId", -1) >= 2, 120.0, "3 micro-batches")
    finally:
        query.stop()
    progress = recent_progress(query)
    listener_sessions.stop()

    events = read_app_events(bootstrap, events_topic)
    assert_valid(events.events)
    ours = sorted(events.of("streaming_query_progress"), key=lambda e: e["seq"])
    batches = [(e["sources"][0], p["sources"][0]) for e, p in zip(ours, progress, strict=True)
               if p["numInputRows"] > 0]  # fmt: skip
    assert len(batches) >= 3
    for n, (source, theirs) in enumerate(batches, start=1):
        assert source.get("num_input_rows", 0) == theirs["numInputRows"] == 50
        assert json.loads(source["latest_offset"]) == theirs["latestOffset"]  # Spark's text, as the source wrote it
        assert source["backlog"] == 300 - 50 * n  # latest (300) minus where this batch ended

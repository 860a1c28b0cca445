"""Structured Streaming queries through the listener: start, every micro-batch's progress and the end, compared
with the query's own ``recentProgress``; progress rate-limited per query and the skips counted. Real Spark
local[2], real broker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparktap.local.ports import wait_until
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import (
    assert_valid,
    listener_settings,
    new_topic,
    read_app_events,
    start_session,
    stop_session,
)
from tests.fixtures.spark import SparkSessions

pytestmark = pytest.mark.integration


@pytest.fixture
def sessions(spark_sessions: SparkSessions) -> Iterator[SparkSessions]:
    yield spark_sessions
    stop_session(spark_sessions)


def _run_rate_query(spark: Any, name: str, batches: int) -> list[dict[str, Any]]:
    """A rate source into the memory sink, every 300 ms, until `batches` micro-batches ran; its recentProgress."""
    stream = spark.readStream.format("rate").option("rowsPerSecond", 40).option("numPartitions", 2).load()
    query = stream.writeStream.format("memory").queryName(name).trigger(processingTime="300 milliseconds").start()
    try:
        wait_until(lambda: (query.lastProgress or {}).get("batchId", -1) >= batches - 1, 60.0, f"{batches} batches")
    finally:
        query.stop()
    # pyspark 4 hands out StreamingQueryProgress objects (UUIDs inside), 3.x plain dicts: both as Spark's JSON
    return [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in query.recentProgress]


def test_progress_events_are_the_querys_own_progress(
    sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    conf = listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path, streaming_progress_interval_ms=0)
    spark = start_session(sessions, conf)
    progress = _run_rate_query(spark, "rates_all", batches=5)
    sessions.stop()

    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)
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
    sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    conf = listener_settings(kafka_broker.bootstrap_servers, topic, tmp_path, streaming_progress_interval_ms=600_000)
    spark = start_session(sessions, conf)
    progress = _run_rate_query(spark, "rates_limited", batches=4)
    sessions.stop()

    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    assert_valid(events.events)
    (sent,) = events.of("streaming_query_progress")  # the first; the rest fall within the 10 minutes
    assert sent["batch_id"] == progress[0]["batchId"]
    (end,) = events.of("streaming_query_end")
    assert end["progress_skipped"] == len(progress) - 1

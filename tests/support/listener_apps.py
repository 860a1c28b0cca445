"""Spark applications and readers shared by the listener and detection tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def wide_aggregate_app(
    sessions: SparkSessions,
    kafka: KafkaService,
    tmp_path: Path,
    columns: int,
    huge_method_limit: int | None = None,
    codegen_stats: bool = False,
) -> tuple[str, AppEvents, list[int]]:
    """An application that sums ``columns`` columns of 1,000 rows by 10 groups (with
    ``spark.sql.codegen.hugeMethodLimit`` set to ``huge_method_limit`` if given, the listener measuring generated
    methods if ``codegen_stats``): its topic, its events (validated) and the ids of the aggregate's jobs."""
    from pyspark.sql import functions as F  # noqa: N812

    topic = new_topic(kafka.bootstrap_servers)
    settings = listener_settings(kafka.bootstrap_servers, topic, tmp_path)
    if codegen_stats:
        settings["spark.sparktap.plan.codegenStats"] = "true"
    spark = start_session(sessions, settings)
    sc = spark.sparkContext
    if huge_method_limit is not None:
        spark.conf.set("spark.sql.codegen.hugeMethodLimit", str(huge_method_limit))  # a runtime SQL conf
    wide = spark.range(0, 1000, 1, 2).select(*[(F.col("id") + i).alias(f"c{i}") for i in range(columns)])
    sc.setJobGroup("agg", "wide aggregate")
    rows = wide.groupBy((F.col("c0") % 10).alias("g")).agg(*[F.sum(f"c{i}") for i in range(columns)]).collect()
    assert len(rows) == 10
    job_ids = sorted(sc.statusTracker().getJobIdsForGroup("agg"))
    sessions.stop()
    events = read_app_events(kafka.bootstrap_servers, topic)
    assert_valid(events.events)
    return topic, events, job_ids


def recent_progress(query: Any) -> list[dict[str, Any]]:
    """The query's recentProgress as Spark's JSON (pyspark 4 hands out objects with UUIDs inside, 3.x dicts)."""
    return [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in query.recentProgress]

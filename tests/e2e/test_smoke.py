"""The end-to-end smoke of ``make test-fast``: one small Spark job with the listener attached, through the real
broker and the collector into chDB. Every job, stage and task Spark ran is stored, no ``seq`` is missing, and
detection finds nothing on a healthy job."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktap.detection import Detector
from sparktap.local.ports import wait_until
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import listener_settings, new_topic, start_session, stop_session
from tests.fixtures.spark import SparkSessions
from tests.support.collector import in_process, settings_for

pytestmark = pytest.mark.e2e

WINDOW = (0, 4_102_444_800_000)  # the whole store


def test_a_healthy_job_is_stored_whole_and_raises_nothing(
    listener_sessions: SparkSessions, kafka_broker: KafkaService, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic(bootstrap)
    spark = start_session(listener_sessions, listener_settings(bootstrap, topic, tmp_path / "spool"))
    sc = spark.sparkContext
    app_id = sc.applicationId
    sc.setJobGroup("smoke", "smoke: a groupBy over 4 partitions")
    rows = spark.range(0, 40_000, numPartitions=4).selectExpr("id % 10 AS k", "id").groupBy("k").count().collect()
    assert len(rows) == 10
    tracker = sc.statusTracker()
    job_ids = tracker.getJobIdsForGroup("smoke")
    stage_ids = sorted(s for j in job_ids for s in tracker.getJobInfo(j).stageIds)
    stages = [tracker.getStageInfo(s) for s in stage_ids]
    # skipped stages (AQE) report no info, or no tasks: only stages that ran count
    ran = {s.stageId: s.numCompletedTasks for s in stages if s is not None and s.numCompletedTasks > 0}
    stop_session(listener_sessions)

    with in_process(settings_for(bootstrap, topic, f"chdb://{tmp_path / 'chdb'}", batch_interval_seconds=0.25)) as c:
        wait_until(lambda: c.storage is not None, 120, "the collector's store")
        storage = c.storage
        assert storage is not None

        def count(sql: str) -> int:
            return int(storage.query(sql)[0]["n"])

        app = f"app_id = '{app_id}'"
        wait_until(
            lambda: count(f"SELECT count() AS n FROM {storage.qualified('app_end_dedup')} WHERE {app}") == 1,
            120,
            "the application's end in ClickHouse",
        )
        # the batch holding app_end is inserted table by table: wait for every seq up to the last one stored
        gaps_sql = f"SELECT received, missing FROM {storage.qualified('seq_gaps')} WHERE {app}"  # noqa: S608
        wait_until(
            lambda: [int(r["missing"]) for r in storage.query(gaps_sql)] == [0], 60, "no seq missing in ClickHouse"
        )
        jobs = count(f"SELECT count() AS n FROM {storage.qualified('job_end_dedup')} WHERE {app}")
        stored_stages = {
            int(r["stage_id"]): int(r["num_tasks"])
            for r in storage.query(
                f"SELECT stage_id, num_tasks FROM {storage.qualified('stage_completed_dedup')} WHERE {app}"  # noqa: S608
            )
        }
        tasks = count(f"SELECT count() AS n FROM {storage.qualified('task_end_dedup')} WHERE {app}")
        findings = [
            f
            for f in Detector(storage.query, database=storage.database, version=storage.version()).findings(*WINDOW)
            if f.app_id == app_id
        ]

    assert jobs == len(job_ids)
    assert {s: n for s, n in stored_stages.items() if s in ran} == ran
    assert tasks == sum(stored_stages.values()) and tasks >= sum(ran.values())
    assert findings == []

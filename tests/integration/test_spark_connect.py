"""Spark Connect attribution end to end (issue 26): a local Spark Connect server from the pyspark 4 installation with
the listener attached on the server → the real broker → the collector → ClickHouse (chDB) → detection.

Two clients connect as ``alice`` and ``bob`` (``sc://127.0.0.1:PORT/;user_id=…``): alice runs a small aggregation,
bob (with ``spark.addTag("team-x")``) a join whose one key holds most rows, AQE's skew handling off. Checked: the
operation events (one started / analyzed / ready / finished / closed per operation run, with user, session and
rows), every stored job, stage, SQL execution and task of each operation carrying its user, session and operation,
and the skew finding naming bob, his session and operation and ``team-x``, none naming alice.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sparktap.detection import Detector, Thresholds
from sparktap.local.ports import wait_until
from sparktap.report.collect import collect
from sparktap.report.render import render
from sparktap.settings import load_settings
from tests.fixtures.spark_connect import ConnectServer
from tests.support.collector import in_process

pytestmark = pytest.mark.integration

HOT_ROWS = 1_200_000
CANARY = "CANARY_CONNECT_1"
CREDENTIALS = f"jdbc:postgresql://u:{CANARY}@db:5432/x"  # in bob's request text: stage names, statement
SKEW_CONF = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "false",
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.shuffle.partitions": "8",
}


def _client(server: ConnectServer, user: str) -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(server.server.remote(user)).create()


def test_two_users_operations_and_the_skew_finding_name_who_ran_them(
    spark_connect: ConnectServer, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    alice, bob = _client(spark_connect, "alice"), _client(spark_connect, "bob")
    try:
        counts = alice.range(0, 100_000, 1, 4).select((F.col("id") % 7).alias("k")).groupBy("k").count().collect()
        assert sorted(r["count"] for r in counts) == [14_285] * 2 + [14_286] * 5  # ids % 7 over 100,000 ids
        bob.addTag("team-x")
        for key, value in SKEW_CONF.items():
            bob.conf.set(key, value)
        big = bob.range(0, 1_600_000, 1, 4).select(F.when(F.col("id") < HOT_ROWS, 0).otherwise(F.col("id")).alias("k"))
        small = bob.range(0, 100_000, 1, 2).select(F.col("id").alias("k")).where(F.lit(CREDENTIALS) != F.lit(""))
        assert big.join(small, "k").count() == HOT_ROWS  # only key 0 (HOT_ROWS rows) is on both sides
    finally:
        alice.stop()
        bob.stop()
        # a remote session marks the process as Spark Connect (pyspark sets SPARK_CONNECT_MODE_ENABLED), after which
        # every later SparkSession.builder.getOrCreate() of the suite would ask for a remote URL
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)

    settings = load_settings(
        kafka={"bootstrap_servers": spark_connect.bootstrap_servers, "topic": spark_connect.topic,
               "group_id": f"connect-{uuid.uuid4().hex[:8]}"},
        clickhouse={"url": f"chdb://{tmp_path / 'chdb'}"},
        collector={"metrics_host": "127.0.0.1", "metrics_port": 0, "findings_port": 0, "batch_interval_seconds": 0.25,
                   "log_format": "text"},
    )  # fmt: skip
    with in_process(settings) as collector:
        wait_until(collector.started.is_set, 120, "the collector to start")
        storage = collector.storage
        assert storage is not None

        def rows(sql: str) -> list[dict[str, Any]]:
            return storage.query(sql.replace("DB.", f"`{storage.database}`."))

        def count(table: str, where: str = "1") -> int:
            return int(rows(f"SELECT count() AS n FROM DB.{table}_dedup WHERE {where}")[0]["n"])

        def settled() -> bool:
            """Both operations closed, and every job and stage stored with its end (tables flush independently)."""
            if count("operation", "status = 'closed' AND operation_id != ''") < 2:
                return False
            jobs, stages = count("job_start"), count("stage_submitted")
            return 0 < jobs == count("job_end") and 0 < stages == count("stage_completed")

        wait_until(settled, 120, "both operations, their jobs and stages in ClickHouse")
        operations = rows(
            "SELECT operation_id, session_id, user_id, user_name, status, statement, session_tags, rows, "
            "start_time_ms, event_time_ms FROM DB.operation_dedup WHERE operation_id != '' ORDER BY event_time_ms"
        )
        jobs = rows("SELECT job_id, sql_execution_id, stage_ids, job_tags, user_id, session_id, operation_id "
                    "FROM DB.job_start_dedup")  # fmt: skip
        stages = {
            table: rows(
                f"SELECT stage_id, user_id, session_id, operation_id, {'name' if table != 'task_end' else 'stage_id'} "
                f"AS name FROM DB.{table}_dedup"
            )
            for table in ("stage_submitted", "stage_completed", "task_end")
        }
        sqls = rows("SELECT execution_id, user_id, session_id, operation_id, description FROM DB.sql_start_dedup")
        texts = rows(
            "SELECT name AS text FROM DB.stage_submitted_dedup UNION ALL SELECT name FROM DB.stage_completed_dedup "
            "UNION ALL SELECT description FROM DB.sql_start_dedup UNION ALL SELECT ifNull(description, '') "
            "FROM DB.job_start_dedup UNION ALL SELECT statement FROM DB.operation_dedup"
        )
        detector = Detector(
            storage.query, database=storage.database, version=storage.version(),
            thresholds=Thresholds(data_skew={"min_time_lost_ms": 0}),
        )  # fmt: skip
        findings = detector.findings(0, 4_102_444_800_000)
        (app_id,) = {str(r["app_id"]) for r in rows("SELECT DISTINCT app_id FROM DB.operation_dedup")}
        report = collect(storage.query, app_id, database=storage.database, version=storage.version(),
                         thresholds=Thresholds(data_skew={"min_time_lost_ms": 0}))  # fmt: skip

    # the operation events: exactly one operation per client, each through every status once
    started = {r["user_id"]: r for r in operations if r["status"] == "started"}
    assert sorted(started) == ["alice", "bob"] and len([r for r in operations if r["status"] == "started"]) == 2
    op = {user: started[user]["operation_id"] for user in started}
    session = {user: started[user]["session_id"] for user in started}
    assert len(set(op.values())) == 2 and len(set(session.values())) == 2
    for user in ("alice", "bob"):
        statuses = Counter(r["status"] for r in operations if r["operation_id"] == op[user])
        assert statuses == Counter({"started": 1, "analyzed": 1, "ready": 1, "finished": 1, "closed": 1}), user
        assert {(r["user_id"], r["session_id"]) for r in operations if r["operation_id"] == op[user]} == {
            (user, session[user])
        }
        assert started[user]["statement"]  # the request text (redacted as SQL text); user_name: the client sets none
    assert list(started["bob"]["session_tags"]) == ["team-x"] and list(started["alice"]["session_tags"]) == []
    finished = {r["operation_id"]: r["rows"] for r in operations if r["status"] == "finished"}
    assert finished[op["alice"]] == 7 and finished[op["bob"]] == 1  # rows returned to the client

    # every job, stage, task and SQL execution of each operation names its user, session and operation
    who = {user: (user, session[user], op[user]) for user in op}
    by_job = {int(j["job_id"]): (j["user_id"], j["session_id"], j["operation_id"]) for j in jobs}
    assert jobs and set(by_job.values()) == set(who.values())
    job_of_stage = {int(s): int(j["job_id"]) for j in jobs for s in j["stage_ids"]}
    for table, stage_rows in stages.items():
        assert stage_rows, table
        for s in stage_rows:
            assert (s["user_id"], s["session_id"], s["operation_id"]) == by_job[job_of_stage[int(s["stage_id"])]], table
    # Connect's request text (stage names, descriptions, the statement) is redacted as SQL text: no credential
    assert started["bob"]["statement"].startswith("common {")  # the request, as Spark Connect writes it
    assert not [t["text"] for t in texts if CANARY in str(t["text"])]
    assert sqls and {(s["user_id"], s["session_id"], s["operation_id"]) for s in sqls} <= set(who.values())
    bob_jobs = [j for j in jobs if j["user_id"] == "bob"]
    assert bob_jobs and all("team-x" in j["job_tags"] for j in bob_jobs)
    assert all("team-x" not in j["job_tags"] for j in jobs if j["user_id"] == "alice")

    # the skew finding names bob; nothing names alice
    skew = [f for f in findings if f.rule == "data_skew"]
    assert skew and {(f.user, f.session_id, f.operation_id) for f in skew} == {who["bob"]}
    assert all("team-x" in f.job_tags for f in skew)
    assert not [f for f in findings if f.user == "alice"]

    # the report: who ran each stage, and who the finding belongs to
    assert {s.ran_by for s in report.stages} == {"alice", "bob"}
    html = render(report)
    assert "<th>Ran by</th>" in html and "<th>Who</th>" in html

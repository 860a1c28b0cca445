"""Every value a Spark Connect user controls has one path (issue 41 items 1-3, promise 25), end to end: a real Spark
Connect server with the listener → the real broker → the collector → ClickHouse (chDB).

Three clients connect with hostile user ids: ``password=hunter2``, 100,000 characters and 1 MiB (the audit's: the
first was stored raw in every job, stage, task and SQL event, the second copied whole into each, the third made every
one of them too large for Kafka and lost). The first also reads a CSV file with credentials as reader options, which
reach the Connect plan text as ``options { key: "password" value: "…" }``. Checked: the exact stored user id on every
operation, job, stage, task and SQL row of each user, every job and stage stored with its end and every task, no event
lost (contiguous ``seq``, ``kafka_events_lost=0``), and no canary secret (nor an uncut id) anywhere in the topic's bytes
or in any ClickHouse table.
"""

from __future__ import annotations

import os
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparktap.local.ports import wait_until
from sparktap.settings import load_settings
from tests.fixtures.listener import read_all
from tests.fixtures.spark_connect import ConnectServer
from tests.support.collector import in_process

pytestmark = pytest.mark.integration

MASK = "*********(redacted)"
SECRET_USER = "password=hunter2"  # noqa: S105 - the canary of a secret in a user id
LONG_USER = "v" * 100_000
HUGE_USER = "w" * 1_048_576
STORED = {  # as the listener (Redactor.name) and the collector (collector/scrub.py) both store them
    SECRET_USER: f"password={MASK}",
    LONG_USER: "v" * 231 + "…[truncated 99769 chars]",
    HUGE_USER: "w" * 230 + "…[truncated 1048346 chars]",
}
OPTIONS = {"password": "s3cr3t-CANARY41A", "fs.s3a.secret.key": "wJal/CANARY41B+=", "token": "ghp_CANARY41C"}
CANARIES = [b"hunter2", b"CANARY41", b"v" * 232, b"w" * 232]  # a secret, or an id longer than its cap


def _client(server: ConnectServer, user: str) -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(server.server.remote(urllib.parse.quote(user, safe=""))).create()


def test_hostile_connect_user_ids_and_reader_options_are_stored_clean_and_nothing_is_lost(
    spark_connect: ConnectServer, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    csv = tmp_path / "in.csv"
    csv.write_text("k,v\n" + "".join(f"{i % 5},{i}\n" for i in range(1000)))
    clients = {user: _client(spark_connect, user) for user in STORED}
    try:
        reader = clients[SECRET_USER].read.format("csv").option("header", "true")
        for key, value in OPTIONS.items():
            reader = reader.option(key, value)
        counts = reader.load(str(csv)).groupBy("k").count().collect()
        assert sorted(r["count"] for r in counts) == [200] * 5
        for user in (LONG_USER, HUGE_USER):
            rows = clients[user].range(0, 3000, 1, 3).groupBy((F.col("id") % 3).alias("k")).count().collect()
            assert sorted(r["count"] for r in rows) == [1000] * 3
    finally:
        for client in clients.values():
            client.stop()
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)  # see test_spark_connect.py
    done_ms = int(time.time() * 1000)

    # the topic: a listener_health sent after the operations accounts for every event, and no byte holds a canary
    def healthy_after(records: list[Any]) -> bool:
        return any(
            e["event_type"] == "listener_health" and e["event_time_ms"] > done_ms
            for e in (orjson.loads(r.value) for r in records if r.value is not None)
        )

    records = read_all(spark_connect.bootstrap_servers, spark_connect.topic, timeout=60, until=healthy_after)
    events = [orjson.loads(r.value) for r in records if r.value is not None]
    health = min((e for e in events if e["event_type"] == "listener_health" and e["event_time_ms"] > done_ms),
                 key=lambda e: e["seq"])  # fmt: skip
    counts = ("kafka_events_lost", "kafka_delivery_errors", "events_dropped")  # the listener leaves out zero counts
    assert {k: health.get(k, 0) for k in counts} == dict.fromkeys(counts, 0)
    assert sorted({e["seq"] for e in events if e["seq"] <= health["seq"]}) == list(range(1, health["seq"] + 1))
    leaked = [c for c in CANARIES for r in records if c in (r.key or b"") + (r.value or b"")]
    assert leaked == []

    settings = load_settings(
        kafka={"bootstrap_servers": spark_connect.bootstrap_servers, "topic": spark_connect.topic,
               "group_id": f"connect-values-{uuid.uuid4().hex[:8]}"},
        clickhouse={"url": f"chdb://{tmp_path / 'chdb'}"},
        collector={"metrics_host": "127.0.0.1", "metrics_port": 0, "findings_port": 0, "batch_interval_seconds": 0.25,
                   "log_format": "text"},
    )  # fmt: skip
    users = ", ".join(f"'{v}'" for v in STORED.values())
    with in_process(settings) as collector:
        wait_until(collector.started.is_set, 120, "the collector to start")
        storage = collector.storage
        assert storage is not None

        def rows(sql: str) -> list[dict[str, Any]]:
            return storage.query(sql.replace("DB.", f"`{storage.database}`."))

        def count(table: str, where: str) -> int:
            return int(rows(f"SELECT count() AS n FROM DB.{table}_dedup WHERE {where}")[0]["n"])

        mine = f"user_id IN ({users})"

        def settled() -> bool:
            """Each user's operation closed, every job and stage stored with its end, every task of those stages."""
            if count("operation", f"status = 'closed' AND {mine}") < len(STORED):
                return False
            jobs, stages = count("job_start", mine), count("stage_submitted", mine)
            tasks = rows(f"SELECT sum(num_tasks) AS n FROM DB.stage_completed_dedup WHERE {mine}")[0]["n"]
            return (
                0 < jobs == count("job_end", f"job_id IN (SELECT job_id FROM DB.job_start_dedup WHERE {mine})")
                and 0 < stages == count("stage_completed", mine)
                and count("task_end", mine) == tasks
            )

        wait_until(settled, 120, "every operation, job, stage and task of the three users in ClickHouse")
        by_user = {
            table: {
                r["user_id"]: int(r["n"])
                for r in rows(f"SELECT user_id, count() AS n FROM DB.{table}_dedup WHERE {mine} GROUP BY user_id")
            }  # fmt: skip
            for table in ("operation", "job_start", "stage_submitted", "stage_completed", "task_end", "sql_start")
        }
        statement = rows(
            f"SELECT statement FROM DB.operation_dedup WHERE status = 'started' AND user_id = '{STORED[SECRET_USER]}'"
        )
        stored = _every_table(storage)

    # the stored id of each user, on every kind of event its work produced
    for table, counts in by_user.items():
        assert set(counts) == set(STORED.values()), table
    assert all(by_user["operation"][u] >= 6 for u in STORED.values())  # started … closed, at least
    (started,) = statement
    assert 'key: "password"' in started["statement"] and f"value: {MASK}" in started["statement"]
    assert started["statement"].count(MASK) == len(OPTIONS)

    # no canary, and no id longer than its cap, in any table
    found = {t: [str(r)[:120] for r in table_rows if any(c.decode() in str(r) for c in CANARIES)]
             for t, table_rows in stored.items()}  # fmt: skip
    assert {t: r for t, r in found.items() if r} == {}


def _every_table(storage: Any) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table of the store (views left out; AggregateFunction states hold no text)."""
    database = storage.database
    tables = [
        str(r["name"])
        for r in storage.query(
            f"SELECT name FROM system.tables WHERE database = '{database}' AND engine NOT LIKE '%View%'"  # noqa: S608
        )
    ]
    out = {}
    for table in tables:
        columns = ", ".join(
            f"`{r['name']}`"
            for r in storage.query(
                f"SELECT name FROM system.columns WHERE database = '{database}' AND table = '{table}' "  # noqa: S608
                "AND type NOT LIKE 'AggregateFunction%' ORDER BY position"
            )
        )
        out[table] = storage.query(f"SELECT {columns} FROM {storage.qualified(table)}")  # noqa: S608
    return out

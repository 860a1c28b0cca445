"""Cluster mode on a real ClickHouse cluster (``clickhouse_cluster``: Debian's ZooKeeper and three Debian
clickhouse-server 18.16 processes on 127.0.0.1, 2 shards, the second with 2 replicas): the schema ON CLUSTER and its
migrations, detection answering exactly as on one node, and 100,000 events through two collectors in one group
while a replica and then a whole shard are stopped for 30 s each."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparktap.collector.integrity import integrity_report
from sparktap.collector.writer import prepare_storage
from sparktap.detection import Detector, Scope
from sparktap.local.ports import wait_until
from sparktap.schemas import health_rollups
from sparktap.schemas.ddl import DDL_VERSION
from sparktap.store import ServerStorage, Storage, open_storage
from sparktap.store.target import parse_storage_url
from tests.fixtures.kafka import KafkaService
from tests.support import detection_samples as samples
from tests.support.cluster import on_node
from tests.support.collector import (
    CollectorProcess,
    assert_integrity,
    events,
    produce,
    settings_for,
    wait_committed,
)
from tests.support.detection import WINDOW, load
from tests.support.services.clickhouse import ClickHouseServerProcess
from tests.support.services.cluster import ClickHouseCluster

pytestmark = pytest.mark.integration

N = 100_000
APPS = 16
RATE = 1_000  # events/s: production spans both outages
OUTAGE_S = 30


@pytest.fixture
def cluster_storage(clickhouse_cluster: ClickHouseCluster, cluster_database: str) -> Iterator[Storage]:
    storage = open_storage(parse_storage_url(clickhouse_cluster.url(cluster_database)), send_receive_timeout=120)
    try:
        yield storage
    finally:
        storage.close()


def test_schema_on_the_cluster_is_replicated_sharded_and_migrates_idempotently(
    clickhouse_cluster: ClickHouseCluster, cluster_storage: Storage, cluster_database: str
) -> None:
    schema = prepare_storage(cluster_storage, 30, plain_copy=False)  # as the collector does: schema and views
    assert cluster_storage.ensure_schema().statements() == schema.statements()  # twice: nothing changes
    tables = len(schema.tables)
    for node in clickhouse_cluster.all_nodes():
        engines = dict(
            on_node(
                node, cluster_database, f"SELECT name, engine FROM system.tables WHERE database = '{cluster_database}'"
            )
        )
        assert engines["task_end_local"] == "ReplicatedReplacingMergeTree"
        assert engines["task_end"] == engines["task_end_dedup"] == "Distributed"
        assert engines["task_end_dedup_local"] == "View"
        assert engines["schema_migrations"] == "ReplicatedReplacingMergeTree"
        assert engines["seq_gaps"] == engines["listener_drops"] == "View"  # the collector's views: on every server
        health = set(health_rollups.object_names(schema))  # the pipeline-health rollup: its own test
        assert health <= set(engines)
        engines = {name: engine for name, engine in engines.items() if name not in health}
        # + the four rollups (schemas/rollups.py: stage, app, run, table) and the findings (schemas/findings_table.py):
        # local, Distributed, dedup view local + Distributed; the rollups' 7 materialized views
        rollups = 4
        assert sorted(engines.values()).count("Distributed") == 2 * tables + 2 * rollups + 2
        assert sorted(engines.values()).count("View") == tables + 2 + rollups + 1
        assert (
            sorted(engines.values()).count("ReplicatedReplacingMergeTree") == tables + 3 + rollups + 1
        )  # + schema_migrations, alert_silences, alert_silenced, the rollups' and the findings' local tables
        assert engines["findings_dedup"] == "Distributed"
        assert sorted(engines.values()).count("MaterializedView") == 3 + 3 + 1  # app 2, run 3, stage 1, table 1
        assert engines["alert_silences"] == engines["alert_silenced"] == "ReplicatedReplacingMergeTree"
    full = on_node(
        clickhouse_cluster.node(1, 1),
        cluster_database,
        f"SELECT engine_full FROM system.tables WHERE name = 'task_end_local' AND database = '{cluster_database}'",
    )
    path = f"/clickhouse/tables/{{shard}}/{cluster_database}/task_end_local"
    assert full[0][0].startswith(f"ReplicatedReplacingMergeTree('{path}', '{{replica}}')")
    assert cluster_storage.applied_versions() == [DDL_VERSION]

    # a migration: a column missing on every shard (an older layout) is added back ON CLUSTER, the views follow
    cluster_storage.command(f"ALTER TABLE task_end_local ON CLUSTER {clickhouse_cluster.name} DROP COLUMN executor_id")
    for node in clickhouse_cluster.all_nodes():
        assert on_node(
            node,
            cluster_database,
            "SELECT count() FROM system.columns WHERE table = 'task_end_local' "
            f"AND name = 'executor_id' AND database = '{cluster_database}'",
        ) == [(0,)]
    cluster_storage.ensure_schema()
    cluster_storage.ensure_schema()
    for node in clickhouse_cluster.all_nodes():
        counts = on_node(
            node,
            cluster_database,
            "SELECT table, count() FROM system.columns WHERE name = 'executor_id' "
            f"AND database = '{cluster_database}' AND table LIKE 'task_end%' "
            "GROUP BY table ORDER BY table",
        )
        assert counts == [("task_end", 1), ("task_end_dedup", 1), ("task_end_dedup_local", 1), ("task_end_local", 1)]
    assert cluster_storage.query("SELECT count() AS n FROM task_end_dedup WHERE executor_id = ''") == [{"n": 0}]

    # a collector (re)starting while a replica is stopped: the schema is in place, so no ON CLUSTER statement waits
    # for the stopped server (each would, up to distributed_ddl_task_timeout = 180 s)
    clickhouse_cluster.node(1, 1).stop()
    try:
        started = time.monotonic()
        with open_storage(parse_storage_url(clickhouse_cluster.url(cluster_database))) as again:
            assert again.ensure_schema().statements() == schema.statements()
            assert again.applied_versions() == [DDL_VERSION]
        assert time.monotonic() - started < 20
    finally:
        clickhouse_cluster.start()


def test_detection_on_the_cluster_finds_exactly_what_one_node_finds(
    cluster_storage: Storage, server_storage: ServerStorage
) -> None:
    findings = []
    for storage in (server_storage, cluster_storage):
        storage.ensure_schema()
        load(storage, samples.scenario_apps())
        detector = Detector(storage.query, database=storage.database, version=storage.version())  # type: ignore[arg-type]
        findings.append(sorted(detector.findings(*WINDOW), key=repr))
    one_node, cluster = findings
    assert len(one_node) >= 19
    assert cluster == one_node
    # an event-driven pass on the cluster (staged: temporary tables of the session, the history IN subqueries
    # inline for the shards) finds what the whole pass found for those applications
    apps = ["app-skewed-join", "app-explode", "app-running", "app-failures"]
    scoped = Detector(cluster_storage.query, database=cluster_storage.database, version=cluster_storage.version())  # type: ignore[arg-type]
    statements: list[str] = []

    def recorded(sql: str) -> list[dict[str, Any]]:
        statements.append(sql)
        return cluster_storage.query(sql)

    scoped = dataclasses.replace(scoped, query=recorded, scope=Scope.of(apps=apps))
    assert sorted(scoped.findings(*WINDOW), key=repr) == [f for f in one_node if f.app_id in apps]
    assert sum(s.startswith("CREATE TEMPORARY TABLE") for s in statements) >= 5
    # no single query: outside the CREATEs only the probes of which rules fire (severities alone) evaluate rules
    probes = [s for s in statements if "ARRAY JOIN [" in s and not s.startswith("CREATE")]
    assert probes and all("emptyArrayString(), emptyArrayFloat64(), '', '')" in s for s in probes)


def test_new_parts_on_every_shard_name_their_applications_and_a_stopped_replica_is_passed_over(
    clickhouse_cluster: ClickHouseCluster, cluster_storage: Storage
) -> None:
    """``sparktap alert``'s follower on a cluster (``detection/follow.py``): one connection per shard, so the
    applications inserted on either shard are named, where the URL's server alone sees only its own shard's; with the
    replica it reads stopped, it goes on with the shard's other replica and still names every application."""
    from sparktap.detection.follow import InsertFollower, ShardFollowers, follower_for

    cluster_storage.ensure_schema()
    followers = follower_for(cluster_storage)
    assert isinstance(followers, ShardFollowers)
    one_server = InsertFollower(cluster_storage.query, cluster_storage.database)
    (lone,), (first, second) = clickhouse_cluster.nodes
    assert [(s.number, s.replicas) for s in followers.shards] == [
        (1, [(lone.host, lone.tcp_port)]),
        (2, [(first.host, first.tcp_port), (second.host, second.tcp_port)]),
    ]
    named: set[tuple[str, str]] = set()

    def named_all(expected: set[tuple[str, str]]) -> bool:
        named.update(followers.poll())
        return named >= expected

    # no merges during the test: a part merged from blocks seen and unseen names the applications of both (one
    # evaluation more), which would make the names below depend on when the servers merge
    for node in clickhouse_cluster.all_nodes():
        on_node(node, "default", "SYSTEM STOP MERGES")
    try:
        assert followers.poll() == set() and one_server.poll() == set()  # the first poll records where tables are
        apps = samples.scenario_apps()
        load(cluster_storage, apps[:12])
        expected = {(a.cluster, a.app_id) for a in apps[:12]}
        wait_until(lambda: named_all(expected), 60, "every application named")
        assert named == expected
        on_one_server = one_server.poll()
        assert set() < on_one_server < expected  # the other shard's applications are not on the URL's server

        database = cluster_storage.database

        def parts(node: ClickHouseServerProcess) -> set[object]:
            return set(
                on_node(
                    node,
                    database,
                    "SELECT table, name FROM system.parts "  # noqa: S608
                    f"WHERE database = '{database}' AND active",
                )
            )

        # the replicas in step (an insert taken by the other replica may still be on its way to the first): else
        # the move would name again the applications of parts the first replica never showed (one evaluation more)
        wait_until(lambda: parts(first) == parts(second), 60, "both replicas of shard 2 holding the same parts")
        followers.poll()
        first.stop()  # the replica the follower reads on shard 2
        named.clear()
        load(cluster_storage, apps[12:24])
        expected = {(a.cluster, a.app_id) for a in apps[12:24]}
        wait_until(lambda: named_all(expected), 60, "every application named with a replica stopped")
        assert named == expected
        assert followers.shards[1].replica == f"{second.host}:{second.tcp_port}"
    finally:
        followers.close()
        clickhouse_cluster.start()
        for node in clickhouse_cluster.all_nodes():
            on_node(node, "default", "SYSTEM START MERGES")


def _wait_passing(seconds: float, watch: Callable[[], None]) -> None:
    """Let ``seconds`` pass while calling ``watch`` every half second."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        watch()
        step = min(end, time.monotonic() + 0.5)
        wait_until(lambda s=step: time.monotonic() >= s, 1.0, "the next check")


def test_two_collectors_100000_events_replica_and_shard_stopped_30s_each(
    kafka_broker: KafkaService,
    kafka_topic: Callable[..., str],
    clickhouse_cluster: ClickHouseCluster,
    cluster_database: str,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic(partitions=4)
    # the collectors talk to shard 2's first replica; the replica stopped is the other one of shard 2, the shard
    # stopped is shard 1: the server the collectors talk to stays up, the cluster behind it loses a part
    url = clickhouse_cluster.url(cluster_database, shard=1, replica=0)
    settings = settings_for(bootstrap, topic, url, batch_rows=5_000, retry_backoff_max_seconds=2.0)
    members = [
        CollectorProcess(
            settings.model_copy(
                update={"collector": settings.collector.model_copy(update={"instance_id": f"collector-{i}"})}
            ),
            tmp_path / f"collector-{i}.log",
        )
        for i in range(2)
    ]
    lone_shard, replica = clickhouse_cluster.node(0), clickhouse_cluster.node(1, 1)
    ends: dict[int, int] = {}
    producer = threading.Thread(target=lambda: ends.update(produce(bootstrap, topic, events(N, apps=APPS), rate=RATE)))
    try:
        for member in members:
            member.start()

        def balanced() -> bool:
            counts = [m.metric("sparktap_collector_assigned_partitions") for m in members]
            return sum(counts) == 4 and min(counts) >= 1

        wait_until(balanced, 120, "two collectors sharing 4 partitions", interval=0.5)
        producer.start()

        def inserted() -> float:
            return sum(m.metric("sparktap_collector_inserted_rows_total") for m in members)

        wait_until(lambda: inserted() >= 5_000, 90, "the first rows inserted", interval=0.2)

        # --- one replica of shard 2 stopped for 30 s: inserts go on (the other replica takes them)
        at_stop = inserted()
        replica.stop()
        try:
            _wait_passing(OUTAGE_S, lambda: None)
            during_replica_outage = inserted() - at_stop
        finally:
            replica.start()
        assert during_replica_outage >= 10_000, during_replica_outage

        # --- shard 1 (its only replica) stopped for 30 s: inserts fail and are retried, consumption pauses
        rss_before = [m.rss_bytes() for m in members]
        samples_: list[list[dict[str, float]]] = [[], []]

        def watch() -> None:
            for i, m in enumerate(members):
                metrics = m.metrics()
                metrics["rss"] = m.rss_bytes()
                samples_[i].append(metrics)

        lone_shard.stop()
        try:
            _wait_passing(OUTAGE_S, watch)
        finally:
            lone_shard.start()
        for i in range(len(members)):
            last = samples_[i][-1]
            assert last["sparktap_collector_retries_total"] >= 3, (i, last)
            peak = max(s["rss"] for s in samples_[i])
            print(
                f"collector-{i}: RSS before {rss_before[i] / 2**20:.0f} MiB, peak with a shard away "  # noqa: T201
                f"{peak / 2**20:.0f} MiB"
            )
            assert peak < rss_before[i] + 256 * 2**20

        # --- everything drains: lag 0 (committed offsets), exact counts
        producer.join(300)
        assert sum(ends.values()) == N
        wait_committed(bootstrap, settings.kafka.group_id, topic, ends, timeout=240)
        for member in members:
            assert member.terminate(timeout=60) == 0
    finally:
        for member in members:
            member.close()
        producer.join(300)
        for node in clickhouse_cluster.all_nodes():
            node.start()

    storage = open_storage(settings.clickhouse.target())
    try:
        assert_integrity(integrity_report(storage), N)
        assert storage.query("SELECT count() AS n FROM task_end_dedup") == [{"n": N}]
    finally:
        storage.close()
    # every application's rows on exactly one shard
    apps_by_shard = [
        {
            str(a)
            for (a,) in on_node(
                clickhouse_cluster.node(s), cluster_database, "SELECT DISTINCT app_id FROM task_end_local"
            )
        }
        for s in range(2)
    ]
    assert len(apps_by_shard[0]) + len(apps_by_shard[1]) == APPS and not apps_by_shard[0] & apps_by_shard[1]
    keys = [
        on_node(
            clickhouse_cluster.node(s),
            cluster_database,
            "SELECT count(), uniqExact(app_id, app_attempt, seq) FROM task_end_dedup_local",
        )[0]
        for s in range(2)
    ]
    assert keys[0][0] + keys[1][0] == N and keys[0][1] + keys[1][1] == N

    # the replica that was away caught up: both replicas of shard 2 hold the same rows
    def same_rows() -> bool:
        sums = [
            on_node(
                clickhouse_cluster.node(1, r),
                cluster_database,
                "SELECT count(), sum(cityHash64(app_id, seq)) FROM task_end_dedup_local",
            )[0]
            for r in range(2)
        ]
        return sums[0] == sums[1] == (keys[1][0], sums[0][1])

    wait_until(same_rows, 120, "the replica that was stopped catching up", interval=0.5)
    log = [entry for m in members for entry in m.log_entries()]
    messages = {entry["msg"] for entry in log}
    assert "consumption paused until ClickHouse accepts the batch" in messages
    assert "ClickHouse accepts writes again" in messages
    retries = [e for e in log if e["msg"].startswith("cannot insert into ClickHouse; retrying with backoff")]
    assert retries and all(
        e["url"]
        == clickhouse_cluster.redacted_url(cluster_database).replace(
            f":{clickhouse_cluster.node(0).tcp_port}/", f":{clickhouse_cluster.node(1).tcp_port}/"
        )
        for e in retries
    )
    print({(e["code"], e["name"]) for e in retries}, retries[0]["error"])  # noqa: T201
    assert all(
        'with cluster="sparktap" this is often one shard (the address above) down' in e["error"] for e in retries
    )
    assert {e["code"] for e in retries} <= {210, 279, 209}
    secret = settings.clickhouse.target().password.get_secret_value()
    assert not any(secret in str(e) for e in log)

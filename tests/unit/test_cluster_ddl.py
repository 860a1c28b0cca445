"""Cluster mode without a server: the cluster= URL parameter, the DDL rendered ON CLUSTER (schemas/cluster.py) and the
settings a cluster storage sends (store/cluster.py)."""

from __future__ import annotations

import pytest

from sparktap.schemas.cluster import ClusterSchema, everywhere_engine
from sparktap.schemas.ddl import Schema
from sparktap.schemas.schema import render_ddl, schema_for
from sparktap.store import ServerStorage
from sparktap.store.cluster import CLUSTER_SETTINGS
from sparktap.store.target import parse_storage_url


def test_the_cluster_url_parameter_selects_cluster_mode_and_shows_in_the_redacted_url() -> None:
    target = parse_storage_url("clickhouse://u:s3cret@ch-0:9000/spark?cluster=events_2x2")
    assert target.cluster == "events_2x2"
    assert target.redacted == "clickhouse://u:***@ch-0:9000/spark?cluster=events_2x2"
    assert parse_storage_url("clickhouse://u:s3cret@ch-0:9000/spark").cluster is None
    with pytest.raises(ValueError, match="invalid cluster name 'a b'") as info:
        parse_storage_url("clickhouse://u:s3cret@ch-0:9000/spark?cluster=a%20b")
    assert "s3cret" not in str(info.value)


def test_one_node_rendering_is_unchanged_without_a_cluster() -> None:
    plain = render_ddl((18, 16, 1), "db")
    assert not any("ON CLUSTER" in s or "Replicated" in s or "Distributed" in s for s in plain)
    assert type(schema_for((18, 16, 1), "db")) is Schema


@pytest.mark.parametrize("version", [(18, 16, 1), (26, 9)])
def test_cluster_statements(version: tuple[int, ...]) -> None:
    schema = schema_for(version, "db", 30, "c1")
    assert isinstance(schema, ClusterSchema)
    statements = schema.statements()
    assert all(" ON CLUSTER `c1`" in s.splitlines()[0] for s in statements)
    assert statements[0] == "CREATE DATABASE IF NOT EXISTS `db` ON CLUSTER `c1`"
    assert "ReplicatedReplacingMergeTree('/clickhouse/tables/all/db/schema_migrations', '{replica}')" in statements[1]
    by_name = {s.split()[5]: s for s in statements[3:]}
    local = by_name["`db`.`task_end_local`"]
    assert "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/task_end_local', '{replica}')" in local
    assert "`event_time` DateTime" in local and "MATERIALIZED" in local
    assert ("TTL toDateTime(`event_time`) + INTERVAL 30 DAY" in local) == (version >= (20, 5))
    dist = by_name["`db`.`task_end`"]
    assert dist.endswith("ENGINE = Distributed(`c1`, `db`, `task_end_local`, cityHash64(`app_id`))")
    assert "MATERIALIZED" not in dist and "CODEC" not in dist and "TTL" not in dist
    assert "`event_time` DateTime" in dist and " ALIAS " in dist
    view = by_name["`db`.`task_end_dedup_local`"]
    assert view.startswith("CREATE VIEW IF NOT EXISTS `db`.`task_end_dedup_local` ON CLUSTER `c1` AS\nSELECT *")
    assert view.endswith("FROM `db`.`task_end_local` FINAL")
    dedup = by_name["`db`.`task_end_dedup`"]
    assert dedup.endswith("ENGINE = Distributed(`c1`, `db`, `task_end_dedup_local`)")
    assert " ALIAS " not in dedup and "MATERIALIZED" not in dedup
    tables = len(schema.tables)
    assert len(statements) == 4 + 4 * tables
    assert len(set(schema.object_names())) == 3 + 4 * tables
    assert "ReplicatedReplacingMergeTree('/clickhouse/tables/all/db/alert_silences', '{replica}')" in statements[2]
    assert "ReplicatedReplacingMergeTree('/clickhouse/tables/all/db/alert_silenced', '{replica}')" in statements[3]
    assert {"schema_migrations", "task_end", "task_end_local", "task_end_dedup", "task_end_dedup_local"} <= set(
        schema.object_names()
    )
    # local tables before their Distributed table; every view after every table
    names = [s.split("\n")[0] for s in statements]
    assert max(i for i, n in enumerate(names) if "VIEW" not in n and "_dedup" not in n) < min(
        i for i, n in enumerate(names) if "_dedup" in n
    )


def test_bookkeeping_tables_are_replicated_to_every_server() -> None:
    assert everywhere_engine(schema_for((18, 16, 1), "db", 30, "c1"), "stream_batches") == (
        "ReplicatedReplacingMergeTree('/clickhouse/tables/all/db/stream_batches', '{replica}')"
    )
    assert everywhere_engine(schema_for((18, 16, 1), "db"), "stream_batches") == "ReplacingMergeTree"


def test_cluster_migration_statements() -> None:
    schema = schema_for((18, 16, 1), "db", 30, "c1")
    assert isinstance(schema, ClusterSchema)
    spec = schema.tables["task_end"]
    assert schema.add_column(spec, spec.column("executor_id")) == (
        "ALTER TABLE `db`.`task_end_local` ON CLUSTER `c1` ADD COLUMN `executor_id` String"
    )
    assert schema.drop_views(spec) == [
        "DROP TABLE IF EXISTS `db`.`task_end_dedup` ON CLUSTER `c1`",
        "DROP TABLE IF EXISTS `db`.`task_end_dedup_local` ON CLUSTER `c1`",
    ]
    assert schema.drop_distributed(spec) == "DROP TABLE IF EXISTS `db`.`task_end` ON CLUSTER `c1`"


def test_a_cluster_storage_inserts_synchronously_and_reads_global_subqueries() -> None:
    cluster = ServerStorage(parse_storage_url("clickhouse://u:pw@127.0.0.1:1/db?cluster=c1"))
    single = ServerStorage(parse_storage_url("clickhouse://u:pw@127.0.0.1:1/db"))
    custom = ServerStorage(
        parse_storage_url("clickhouse://u:pw@127.0.0.1:1/db?cluster=c1"), settings={"insert_distributed_timeout": 5}
    )
    try:
        assert (
            cluster.settings
            == {"insert_distributed_sync": 1, "insert_distributed_timeout": 30, "distributed_product_mode": "global"}
            == CLUSTER_SETTINGS
        )
        assert single.settings == {}
        assert custom.settings["insert_distributed_timeout"] == 5
    finally:
        for storage in (cluster, single, custom):
            storage.close()


def test_the_cluster_setting_overrides_the_url_parameter() -> None:
    from sparktap.store.settings import ClickHouseSettings

    url = "clickhouse://u:pw@ch:9000/spark"
    assert ClickHouseSettings(url=url, cluster="analytics").target().cluster == "analytics"
    assert ClickHouseSettings(url=url + "?cluster=a").target().cluster == "a"
    assert ClickHouseSettings(url=url + "?cluster=a", cluster="b").target().cluster == "b"
    assert ClickHouseSettings(url=url).target().cluster is None
    with pytest.raises(ValueError, match="cluster"):
        ClickHouseSettings(url=url, cluster="a b")
    with pytest.raises(ValueError, match="cluster='c' needs a clickhouse:// URL"):
        ClickHouseSettings(url="chdb:///tmp/x", cluster="c")

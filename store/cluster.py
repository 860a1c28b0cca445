"""Cluster mode on a ClickHouse server: the settings inserts and reads need, and idempotent migrations ON CLUSTER.

Inserts go through the Distributed tables with ``insert_distributed_sync = 1``: the INSERT returns only after
every shard the block touches has written its part to a replica's disk (``internal_replication``: one replica
per shard, replication copies it to the others from ZooKeeper's log). So when the collector commits Kafka
offsets, each row is on disk on its shard — a later loss needs that replica's disk to die before replication.
``insert_quorum`` is not set: on 18.16 it is passed to every shard and a shard with fewer live replicas than
the quorum refuses every insert (a 1-replica shard always does for 2), which would stop ingest instead of
degrading it; see ``docs/cluster.md``. ``insert_distributed_timeout`` bounds a write to a stopped shard, so the
insert fails, the batch is retried with backoff and nothing is committed.

Reads: ``distributed_product_mode = 'global'`` lets an IN / JOIN subquery over a ``_dedup`` Distributed table
inside a query over another one run once on the server asked (as ``GLOBAL IN`` / ``GLOBAL JOIN``): the same
answer as on one node for any join key.

``ensure_schema`` skips the CREATE statements when the server asked already has every table and view
(``schema_in_place``). Migrations (no ``ADD COLUMN IF NOT EXISTS`` on 18.16): the columns every shard's local table
has are read with the ``cluster()`` table function; a column some shard lacks is added ON CLUSTER to the Replicated
local tables (a shard that already has it answers "already exists", which is fine), then the Distributed insert
table and both views are dropped and created again with the new columns (they hold no data).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sparktap.schemas.cluster import ClusterSchema, local_name
from sparktap.schemas.ddl import ColumnSpec, DerivedColumn, Schema, quote_literal
from sparktap.schemas.health_rollups import HEALTH_TABLES
from sparktap.store.errors import StorageError

if TYPE_CHECKING:
    from sparktap.store.protocol import Storage

log = logging.getLogger(__name__)

INSERT_TIMEOUT_S = 30
CLUSTER_SETTINGS: dict[str, Any] = {
    "insert_distributed_sync": 1,
    "insert_distributed_timeout": INSERT_TIMEOUT_S,
    "distributed_product_mode": "global",
}
_ALREADY_EXISTS = "already exists"


def shard_replicas(storage: Storage, cluster: str) -> dict[int, list[tuple[str, int]]]:
    """{shard number: its replicas' (host, port)}, as the server asked lists them (``system.clusters``, from its
    ``remote_servers``); StorageError when it has no such cluster."""
    rows = storage.query(
        "SELECT shard_num, host_name, port FROM system.clusters "  # noqa: S608 - a quoted literal
        f"WHERE cluster = {quote_literal(cluster)} ORDER BY shard_num, replica_num"
    )
    if not rows:
        raise StorageError(
            f'ClickHouse has no cluster cluster="{cluster}" url="{storage.redacted_url}" (system.clusters); '
            "check remote_servers on the servers or the cluster= parameter of SPARKTAP_CLICKHOUSE__URL"
        )
    shards: dict[int, list[tuple[str, int]]] = {}
    for row in rows:
        shards.setdefault(int(row["shard_num"]), []).append((str(row["host_name"]), int(row["port"])))
    return shards


def _columns_by_shard(storage: Storage, schema: ClusterSchema) -> tuple[int, dict[tuple[str, str], int]]:
    """(number of shards, {(table, column): how many shards have it})."""
    count = len(shard_replicas(storage, str(schema.cluster)))
    cluster = quote_literal(str(schema.cluster))
    rows = storage.query(
        f"SELECT table, name, count() AS shards FROM cluster({cluster}, system, columns) "  # noqa: S608
        f"WHERE database = {quote_literal(schema.database)} GROUP BY table, name"
    )
    return count, {(str(r["table"]), str(r["name"])): int(r["shards"]) for r in rows}


def schema_in_place(storage: Storage, schema: Schema) -> bool:
    """Whether the server asked has every table and view of the cluster schema (then the CREATE … ON CLUSTER
    statements are skipped: each waits for every server, up to ``distributed_ddl_task_timeout``, and a collector
    restarting while a replica is stopped must not wait for it). Columns are checked by ``migrate_cluster``."""
    if not isinstance(schema, ClusterSchema):
        return False
    try:
        rows = storage.query(
            f"SELECT name FROM system.tables WHERE database = {quote_literal(schema.database)}"  # noqa: S608
        )
    except StorageError:
        return False
    have = {str(r["name"]) for r in rows}
    return set(schema.object_names()) <= have


def migrate_cluster(storage: Storage, schema: Schema) -> None:
    """Add the columns a shard lacks and recreate what depends on them; every step ON CLUSTER and idempotent."""
    if not isinstance(schema, ClusterSchema):
        raise TypeError("migrate_cluster needs a ClusterSchema (a storage URL with cluster=)")
    shards, have = _columns_by_shard(storage, schema)
    for spec in schema.tables.values():
        local = local_name(spec.name)
        wanted: tuple[ColumnSpec | DerivedColumn, ...] = (*spec.columns, *spec.derived)
        missing_local = [c for c in wanted if have.get((local, c.name), 0) < shards]
        stale = missing_local or any(have.get((spec.name, c.name), 0) < shards for c in wanted)
        for col in missing_local:
            log.info("adding column %s.%s on cluster %s", local, col.name, schema.cluster)
            try:
                storage.command(schema.add_column(spec, col))
            except StorageError as exc:
                if _ALREADY_EXISTS not in str(exc):
                    raise
                log.info("column %s.%s was already on some shards: %s", local, col.name, exc.name or exc.code)
        if stale:
            log.info("recreating the Distributed table and views of %s on cluster %s", spec.name, schema.cluster)
            for statement in (*schema.drop_views(spec), schema.drop_distributed(spec)):
                storage.command(statement)
            storage.command(schema.create_table(spec))
            for statement in schema.view_statements(spec):
                storage.command(statement)
    if schema.features.ttl:
        _apply_retention(storage, schema)


def _apply_retention(storage: Storage, schema: ClusterSchema) -> None:
    want = f"toIntervalDay({schema.retention_days})"
    rows = storage.query(
        f"SELECT DISTINCT name, engine_full FROM cluster({quote_literal(str(schema.cluster))}, system, tables) "  # noqa: S608
        f"WHERE database = {quote_literal(schema.database)}"
    )
    changed: set[str] = set()
    for row in rows:
        name = str(row["name"])
        base = name.removesuffix("_local") if name.endswith("_local") else None
        tiered = base is not None and (base in schema.tables or base in HEALTH_TABLES)  # health: the events tier
        if not tiered or want in str(row["engine_full"]) or name in changed:
            continue
        changed.add(name)
        log.info("changing retention of %s to %d days on cluster %s", name, schema.retention_days, schema.cluster)
        storage.command(
            f"ALTER TABLE {schema.qualified(name)}{schema.on_cluster} MODIFY TTL "
            f"toDateTime(`event_time`) + INTERVAL {schema.retention_days} DAY"
        )

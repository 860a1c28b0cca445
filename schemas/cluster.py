"""Cluster mode of the DDL: the same logical tables, sharded and replicated over a ClickHouse cluster.

Selected by a cluster name (``clickhouse://…/db?cluster=<name>``, the ``remote_servers`` entry); every statement
runs ``ON CLUSTER <name>`` and is idempotent (``IF NOT EXISTS``), so applying it twice, or from two collectors at
once, is harmless. For each event table ``<t>``:

- ``<t>_local``: ``ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/<db>/<t>_local', '{replica}')`` — the
  ZooKeeper path conventional for ClickHouse, per shard, with the server's ``shard`` / ``replica`` macros; same
  columns, partitioning, sorting key and TTL as on one node;
- ``<t>``: ``Distributed(<cluster>, <db>, <t>_local, cityHash64(app_id))`` — the insert target. The sharding key
  puts all of an application's rows on one shard, so deduplication by (``app_id``, ``app_attempt``, ``seq``) per
  shard is exact. Its derived columns are ``ALIAS`` (a Distributed table refuses to forward a MATERIALIZED column
  on 18.16; the local table materializes ``event_time`` itself);
- ``<t>_dedup_local``: the view ``SELECT … FROM <t>_local FINAL`` on every server (FINAL per shard);
- ``<t>_dedup``: ``Distributed(<cluster>, <db>, <t>_dedup_local)`` over those views, so detection and dashboards
  read ``<t>_dedup`` exactly as on one node. ClickHouse pushes WHERE and the partial aggregation of a GROUP BY to
  the shards and merges on the server asked; IN / JOIN subqueries over another ``_dedup`` table need
  ``distributed_product_mode = 'global'`` (the storage sets it; set it in the Grafana user's profile too);
- ``schema_migrations``: ``ReplicatedReplacingMergeTree('/clickhouse/tables/all/<db>/schema_migrations',
  '{replica}')`` — one table replicated to every server (the ``replica`` macro is unique in the cluster).
"""

from __future__ import annotations

import dataclasses

from sparktap.schemas.ddl import (
    DEDUP_SUFFIX,
    MIGRATIONS_TABLE,
    SILENCED_TABLE,
    SILENCES_TABLE,
    ColumnSpec,
    DerivedColumn,
    Schema,
    TableSpec,
    quote_ident,
    quote_literal,
)

LOCAL_SUFFIX = "_local"
SHARDING_KEY = "cityHash64(`app_id`)"
ZK_ROOT = "/clickhouse/tables"


def local_name(table: str) -> str:
    """The replicated table (or per-server view) behind a Distributed table."""
    return table + LOCAL_SUFFIX


def everywhere_engine(schema: Schema, table: str) -> str:
    """The engine of a small bookkeeping table every server should hold in full (a ledger, the migrations): one
    ``ReplicatedReplacingMergeTree`` replicated to every server of the cluster, or ``ReplacingMergeTree`` on one node.
    Create it with ``CREATE TABLE … {schema.on_cluster}``."""
    if not schema.cluster:
        return "ReplacingMergeTree"
    path = f"{ZK_ROOT}/all/{schema.database}/{table}"
    return f"ReplicatedReplacingMergeTree({quote_literal(path)}, '{{replica}}')"


class ClusterSchema(Schema):
    """``Schema`` rendered for a cluster (``cluster`` is set): see the module docstring for the layout."""

    def _zk_path(self, table: str, shard: str = "{shard}") -> str:
        return f"{ZK_ROOT}/{shard}/{self.database}/{table}"

    def engine(self, spec: TableSpec | None) -> str:
        # called by Schema.create_table with the local spec (named ``<t>_local``) or None (schema_migrations)
        if spec is None:
            return everywhere_engine(self, "schema_migrations")
        return f"ReplicatedReplacingMergeTree({quote_literal(self._zk_path(spec.name))}, '{{replica}}')"

    def local_spec(self, spec: TableSpec) -> TableSpec:
        return dataclasses.replace(spec, name=local_name(spec.name))

    def create_local_table(self, spec: TableSpec) -> str:
        return super().create_table(self.local_spec(spec))

    def _distributed(self, name: str, columns: list[str], local: str, sharding_key: str = "") -> str:
        body = ",\n    ".join(columns)
        args = ", ".join([quote_ident(str(self.cluster)), quote_ident(self.database), quote_ident(local)])
        key = f", {sharding_key}" if sharding_key else ""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.qualified(name)}{self.on_cluster}\n(\n    {body}\n)\n"
            f"ENGINE = Distributed({args}{key})"
        )

    def create_table(self, spec: TableSpec) -> str:
        """The Distributed insert table ``<t>`` (create the local table first: ``create_local_table``)."""
        columns = [self.column_ddl(dataclasses.replace(c, codec="")) for c in spec.columns]
        columns += [f"{quote_ident(d.name)} {d.ch_type} ALIAS {d.expression}" for d in spec.derived]
        return self._distributed(spec.name, columns, local_name(spec.name), SHARDING_KEY)

    def create_local_view(self, spec: TableSpec) -> str:
        return (
            super()
            .create_view(self.local_spec(spec))
            .replace(
                f"CREATE VIEW IF NOT EXISTS {self.qualified(local_name(spec.name) + DEDUP_SUFFIX)}",
                f"CREATE VIEW IF NOT EXISTS {self.qualified(local_name(spec.dedup_view))}",
                1,
            )
        )

    def create_view(self, spec: TableSpec) -> str:
        """The Distributed ``<t>_dedup`` over the per-server views (create those first: ``create_local_view``)."""
        columns = [f"{quote_ident(c.name)} {c.ch_type}" for c in spec.columns]
        columns += [f"{quote_ident(d.name)} {d.ch_type}" for d in spec.derived]
        return self._distributed(spec.dedup_view, columns, local_name(spec.dedup_view))

    def view_statements(self, spec: TableSpec) -> list[str]:
        return [self.create_local_view(spec), self.create_view(spec)]

    def drop_views(self, spec: TableSpec) -> list[str]:
        """Drop both views of a table (a migration recreates them with the new columns)."""
        return [
            f"DROP TABLE IF EXISTS {self.qualified(name)}{self.on_cluster}"
            for name in (spec.dedup_view, local_name(spec.dedup_view))
        ]

    def drop_distributed(self, spec: TableSpec) -> str:
        """Drop the Distributed insert table (it holds no data: inserts are synchronous)."""
        return f"DROP TABLE IF EXISTS {self.qualified(spec.name)}{self.on_cluster}"

    def add_column(self, spec: TableSpec, col: ColumnSpec | DerivedColumn) -> str:
        """``ALTER TABLE <t>_local ON CLUSTER … ADD COLUMN`` (replicated: one replica per shard runs it)."""
        return f"ALTER TABLE {self.qualified(local_name(spec.name))}{self.on_cluster} ADD COLUMN {self.column_ddl(col)}"

    def bookkeeping_engine(self, table: str) -> str:
        return everywhere_engine(self, table)

    def object_names(self) -> list[str]:
        """Every table and view the statements create, on every server."""
        names = [MIGRATIONS_TABLE, SILENCES_TABLE, SILENCED_TABLE]
        for spec in self.tables.values():
            names += [local_name(spec.name), spec.name, local_name(spec.dedup_view), spec.dedup_view]
        return names

    def statements(self) -> list[str]:
        out = [f"CREATE DATABASE IF NOT EXISTS {quote_ident(self.database)}{self.on_cluster}", self.create_migrations()]
        out.append(self.create_silences())
        out.append(self.create_silenced())
        for spec in self.tables.values():
            out.append(self.create_local_table(spec))
            out.append(self.create_table(spec))
        for spec in self.tables.values():
            out.extend(self.view_statements(spec))
        return out

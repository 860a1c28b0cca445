"""Team isolation on a server without row-level security (clickhouse-server 18.16): one database per team.

18.16 has no row policy and ignores users.xml row filters, and a view cannot lend access to a database the
reader may not read. What it does have is ``allow_databases`` per user and materialized views. So for each team
reader the schema step keeps ``<db>_<team>``: the same tables and ``_dedup`` views as the sparktap database (same
schema, same migrations), filled by one materialized view per event table in the sparktap database,
``<table>_to_<team>``: ``SELECT <columns> FROM <table> WHERE cluster IN (<the team's clusters>)``, which runs on
every insert, with the inserter's rights. Rows already stored are copied once, when the view is created. The team's
reader may read only its database (``access.users_xml``); the stored findings (``findings``, written by the alerter)
are copied the same way (``findings_to_<team>``), and its Grafana datasource and dashboards name that
database (``sparktap grafana export --database <db>_<team>``).

Costs: the team's rows are stored twice. A view is recreated (and the table refilled) when the columns or the
clusters change; rows of a cluster removed from a team stay in its database until it is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sparktap.schemas.ddl import Schema, TableSpec, quote_ident
from sparktap.schemas.findings_table import findings_spec
from sparktap.store.access import Reader, cluster_filter, has_sql_access_control, policy_tables, reader_statements
from sparktap.store.protocol import Storage

log = logging.getLogger(__name__)


def team_database(database: str, reader: Reader) -> str:
    return f"{database}_{reader.name}"


def _view_name(spec: TableSpec, reader: Reader) -> str:
    return f"{spec.name}_to_{reader.name}"


def copy_select(schema: Schema, spec: TableSpec, reader: Reader, derived: bool = False) -> str:
    """The team's rows of a table: its stored columns (``derived``: and the MATERIALIZED ones, which 18.16 does not
    compute for a block a materialized view pushes into its target)."""
    parts = [quote_ident(c.name) for c in spec.columns]
    if derived:  # computed from the stored columns, as the table computes them
        parts += [f"{d.expression} AS {quote_ident(d.name)}" for d in spec.derived if d.kind == "MATERIALIZED"]
    columns = ", ".join(parts)
    where = cluster_filter(reader.clusters)  # quote_literal'd identifiers
    return f"SELECT {columns} FROM {schema.qualified(spec.name)} WHERE {where}"  # noqa: S608 - our identifiers


def _create_view(schema: Schema, spec: TableSpec, reader: Reader) -> str:
    target = f"{quote_ident(team_database(schema.database, reader))}.{quote_ident(spec.name)}"
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {schema.qualified(_view_name(spec, reader))} TO {target} AS "
        f"{copy_select(schema, spec, reader, derived=True)}"
    )


def _current(storage: Storage, schema: Schema, spec: TableSpec, reader: Reader) -> bool | None:
    """Whether the team's view exists with today's query (None: it does not exist)."""
    name = _view_name(spec, reader).replace("\\", "\\\\").replace("'", "\\'")
    db = schema.database.replace("\\", "\\\\").replace("'", "\\'")
    rows = storage.query(f"SELECT name FROM system.tables WHERE database = '{db}' AND name = '{name}'")  # noqa: S608
    if not rows:
        return None
    shown = storage.query(f"SHOW CREATE TABLE {schema.qualified(_view_name(spec, reader))}")
    text = " ".join(str(v) for row in shown for v in row.values())
    return all(f"`{c.name}`" in text or f" {c.name}," in text for c in spec.columns) and all(
        f"'{c}'" in text for c in reader.clusters
    )


def ensure_team_databases(storage: Storage, schema: Schema, readers: Sequence[Reader]) -> list[str]:
    """Create or update the team databases and their views (one server only); returns the team databases."""
    from sparktap.store.backends import open_storage

    teams = [r for r in readers if r.clusters]
    if not teams:
        return []
    if schema.cluster:
        log.warning("team databases need one server, not a cluster: use ClickHouse >= 20.4 row policies; skipped")
        return []
    out = []
    for reader in teams:
        database = team_database(schema.database, reader)
        team = open_storage(storage.target.model_copy(update={"database": database}))
        try:
            team.ensure_schema(schema.retention_days)
        finally:
            team.close()
        for spec in [*schema.tables.values(), findings_spec(schema)]:  # the stored findings too (the alerter's)
            state = _current(storage, schema, spec, reader)
            if state:
                continue
            if state is False:
                storage.command(f"DROP TABLE IF EXISTS {schema.qualified(_view_name(spec, reader))}")
            storage.command(_create_view(schema, spec, reader))
            columns = ", ".join(quote_ident(c.name) for c in spec.columns)
            target = f"{quote_ident(database)}.{quote_ident(spec.name)}"
            # rows stored before the view: copied once (a row inserted meanwhile may be copied twice; the
            # ReplacingMergeTree and the _dedup views keep it once)
            storage.command(f"INSERT INTO {target} ({columns}) {copy_select(schema, spec, reader)}")
        _ensure_rollup_views(storage, schema, reader)
        out.append(database)
    return out


def _ensure_rollup_views(storage: Storage, schema: Schema, reader: Reader) -> None:
    """The team's rollups (``schemas/rollups.py``), fed straight from the sparktap database's event tables: 18.16
    does not run the team database's own rollup views for a block a materialized view pushes into its event tables
    (no cascade), only for the one-off copy above. ``<view>_to_<team>``: the rollup view's SELECT, the team's
    clusters only; a row reaching the rollup both ways is kept once (identity key)."""
    from sparktap.schemas.rollups import rollups

    database = team_database(schema.database, reader)
    db = schema.database.replace("\\", "\\\\").replace("'", "\\'")
    have = {str(r["name"]) for r in storage.query(f"SELECT name FROM system.tables WHERE database = '{db}'")}  # noqa: S608
    for rollup in rollups(schema):
        for view, source in rollup.sources:
            name = f"{view}_to_{reader.name}"
            if _current_view(storage, schema, name, reader, have):
                continue
            select = f"SELECT {rollup.select(source)} FROM {schema.qualified(source)}"  # noqa: S608 - our identifiers
            storage.command(
                f"CREATE MATERIALIZED VIEW IF NOT EXISTS {schema.qualified(name)} "
                f"TO {quote_ident(database)}.{quote_ident(rollup.spec.name)} AS {select} "
                f"WHERE {cluster_filter(reader.clusters)}"
            )
    _ensure_health_views(storage, schema, reader, have)


def _current_view(storage: Storage, schema: Schema, name: str, reader: Reader, have: set[str]) -> bool:
    """Whether the team's feeding view ``name`` exists and filters on the team's clusters of now; one that filters on
    other clusters (the team's clusters changed) is dropped, to be created again."""
    if name not in have:
        return False
    shown = storage.query(f"SHOW CREATE TABLE {schema.qualified(name)}")
    text = " ".join(str(v) for row in shown for v in row.values())
    if all(f"'{c}'" in text for c in reader.clusters):
        return True
    storage.command(f"DROP TABLE IF EXISTS {schema.qualified(name)}")
    return False


def _ensure_health_views(storage: Storage, schema: Schema, reader: Reader, have: set[str]) -> None:
    """The team's pipeline-health rollup (``schemas/health_rollups.py``), fed from the sparktap database's event
    tables like the rollups above (the one-off copy into the team's event tables fills it through the team's own
    views; an event reaching it both ways sets the same bit)."""
    from sparktap.schemas import health_rollups as health

    database = team_database(schema.database, reader)
    for table in health.health_tables():
        for source in health.HEALTH_SOURCES:
            name = f"{health.view_name(table, source)}_to_{reader.name}"
            if _current_view(storage, schema, name, reader, have):
                continue
            select = health.select(schema, table, source, cluster_filter(reader.clusters))
            storage.command(
                f"CREATE MATERIALIZED VIEW IF NOT EXISTS {schema.qualified(name)} "
                f"TO {quote_ident(database)}.{quote_ident(table.name)} AS {select}"
            )


def ensure_readers(storage: Storage, schema: Schema, readers: Sequence[Reader]) -> bool:
    """The schema step for ``readers``: run ``reader_statements`` on a server with SQL access control; on one
    without (18.16) or on chDB (no users), log one line saying what to do instead. True when created."""
    if not readers:
        return False
    version = storage.version()
    if storage.target.kind != "clickhouse":
        log.warning("read-only users need a ClickHouse server: embedded chDB has no users; skipped")
        return False
    if not has_sql_access_control(version):
        ensure_team_databases(storage, schema, readers)
        log.warning(
            "clickhouse-server %s has no SQL user management: the read-only users were not created; install the "
            "users.d file of `python -m sparktap.store` on the server (docs/dashboards.md)",
            ".".join(map(str, version)),
        )
        return False
    for sql in reader_statements(schema.database, readers, policy_tables(schema), schema.on_cluster):
        storage.command(sql)
    return True

"""Views the collector adds next to the tables of ``schemas/ddl.py``, and the no-dedup copies of the negative control.

- ``seq_gaps``: per application attempt, the events received (distinct ``seq`` over every event table, the raw
  table included), the highest ``seq`` and ``missing = max_seq - received``. ``seq`` starts at 1 and grows by one
  for every event the listener accepted, so ``missing`` counts events lost between the listener and ClickHouse
  (drops after the last received event cannot show). Counting *distinct* ``seq`` makes it exact whether or not
  redelivered copies have been merged away yet.
- ``listener_drops``: per application attempt, the listener's own counters from its latest ``listener_health``
  reports (cumulative, so ``max`` is exact under redelivery): events accepted and dropped (queue full), Kafka
  delivery errors and events lost, relay spooling.

Both read only deduplication-safe aggregates; with the ``_dedup`` views of ``schemas/ddl.py`` (``FINAL``), every
view sparktap offers counts each event once. In cluster mode (``schemas/cluster.py``) both are created ON CLUSTER,
over the Distributed tables: every server answers them, for the whole cluster.

``<table>_plain`` copies (``collector.plain_copy``) are plain MergeTree tables that receive every insert as is —
no deduplication at all: the negative control of the integrity check (``integrity.py``).
"""

from __future__ import annotations

from sparktap.schemas.ddl import Schema, quote_ident
from sparktap.store.protocol import Storage

SEQ_GAPS_VIEW = "seq_gaps"
LISTENER_DROPS_VIEW = "listener_drops"
PLAIN_SUFFIX = "_plain"


def _union(schema: Schema, columns: str, suffix: str = "") -> str:
    return "\n    UNION ALL\n    ".join(
        f"SELECT {columns} FROM {schema.qualified(name + suffix)}"  # noqa: S608 - our own identifiers, quoted
        for name in sorted(schema.tables)
    )


def seq_gaps_sql(schema: Schema, suffix: str = "") -> str:
    """The SELECT of the ``seq_gaps`` view (over the tables, or their copies with ``suffix``)."""
    union = _union(schema, "cluster, app_id, app_attempt, seq", suffix)
    return (
        "SELECT cluster, app_id, app_attempt, count() AS received, max(seq) AS max_seq,\n"  # noqa: S608
        "       toInt64(max(seq)) - toInt64(count()) AS missing\n"
        "FROM (\n"
        "    SELECT DISTINCT cluster, app_id, app_attempt, seq FROM (\n"
        f"    {union}\n"
        "    )\n"
        ")\n"
        "GROUP BY cluster, app_id, app_attempt"
    )


def listener_drops_sql(schema: Schema) -> str:
    table = schema.qualified("listener_health")
    return (
        "SELECT cluster, app_id, app_attempt,\n"
        "       max(events_accepted) AS events_accepted, max(events_dropped) AS events_dropped,\n"
        "       max(kafka_delivery_errors) AS kafka_delivery_errors, max(kafka_events_lost) AS kafka_events_lost,\n"
        "       max(relay_spooled) AS relay_spooled, max(relay_restarts) AS relay_restarts,\n"
        "       argMax(dropped_by_type, seq) AS dropped_by_type, count() AS reports,\n"
        "       max(event_time) AS last_report_time\n"
        f"FROM {table}\n"
        "GROUP BY cluster, app_id, app_attempt"
    )


def view_statements(schema: Schema) -> dict[str, str]:
    """view name -> CREATE VIEW statement."""
    return {
        SEQ_GAPS_VIEW: (
            f"CREATE VIEW IF NOT EXISTS {schema.qualified(SEQ_GAPS_VIEW)}{schema.on_cluster} AS\n{seq_gaps_sql(schema)}"
        ),
        LISTENER_DROPS_VIEW: (
            f"CREATE VIEW IF NOT EXISTS {schema.qualified(LISTENER_DROPS_VIEW)}{schema.on_cluster} AS\n"
            f"{listener_drops_sql(schema)}"
        ),
    }


def _show_create(storage: Storage, qualified: str) -> str | None:
    rows = storage.query(f"SHOW CREATE TABLE {qualified}")
    if not rows:
        return None
    return str(next(iter(rows[0].values())))


def ensure_views(storage: Storage, schema: Schema) -> list[str]:
    """Create the collector's views; recreate one whose definition misses a table (a newer DDL added one).

    Returns the names of the views created or recreated. Safe to run from several collectors at once: a view is
    only dropped when it is out of date, and ``CREATE VIEW IF NOT EXISTS`` tolerates a concurrent creator.
    """
    database = schema.database.replace("\\", "\\\\").replace("'", "\\'")
    rows = storage.query(f"SELECT name FROM system.tables WHERE database = '{database}'")  # noqa: S608
    existing = {str(r["name"]) for r in rows}
    changed: list[str] = []
    for name, statement in view_statements(schema).items():
        qualified = schema.qualified(name)
        if name in existing:
            if name != SEQ_GAPS_VIEW:
                continue
            # one SELECT per table, joined by UNION ALL: a table count mismatch means a newer DDL added tables
            definition = (_show_create(storage, qualified) or "").upper()
            if definition.count("UNION ALL") + 1 == len(schema.tables):
                continue
            storage.command(f"DROP TABLE IF EXISTS {qualified}{schema.on_cluster}")
        storage.command(statement)
        changed.append(name)
    return changed


def ensure_plain_copies(storage: Storage, schema: Schema) -> list[str]:
    """Create ``<table>_plain`` for every table: same columns, plain MergeTree (no deduplication, no TTL)."""
    names = []
    for name in sorted(schema.tables):
        copy = name + PLAIN_SUFFIX
        storage.command(
            f"CREATE TABLE IF NOT EXISTS {schema.qualified(copy)} AS {schema.qualified(name)}\n"
            f"ENGINE = MergeTree ORDER BY ({quote_ident('app_id')}, {quote_ident('app_attempt')}, {quote_ident('seq')})"
        )
        names.append(copy)
    return names

"""Rollups: narrow per-stage and per-application summary tables, filled by materialized views at insert time.

The overview, cluster (fleet) and findings-over-time reads need one row per stage or per application, never one per
task. At fleet scale (10^8 ``task_end`` rows) ``task_end`` is kept shortest (``retention.tasks_days``) while these
summaries are kept for ``retention.stages_days`` / ``retention.apps_days``:

- ``stage_rollup``: one row per ``stage_completed`` event, with the columns the fleet panels read (the listener
  already summarises a stage's tasks in ``stage_completed``: counts, sums, maxima of task time, GC, shuffle, spill),
  filled by ``stage_rollup_mv`` from ``stage_completed``;
- ``app_rollup``: one row per ``app_start`` and per ``app_end`` event (name, user, start and end times), filled by
  ``app_rollup_start_mv`` and ``app_rollup_end_mv``;
- ``run_rollup``: the job-ordered index of runs the detection history reads (``detection/history.py``): one row per
  ``app_start``, ``app_end`` and ``stage_completed`` event with what the recurring-job rules compare (times, stage
  name, status, wall time, shuffle sums), ordered by ``(cluster, app_name, event_type, app_id, app_attempt,
  stage_id, stage_attempt, seq)`` with ``index_granularity`` 256, so the runs of a few jobs are a few small granules
  whatever their day and the store's size; filled by ``run_rollup_stage_mv``, ``run_rollup_start_mv`` and
  ``run_rollup_end_mv``; kept for ``retention.stages_days``;
- ``table_rollup``: one row per ``table_access`` event (a scan or write of a table or path), ordered by ``(cluster,
  catalog, table, location, day, …)`` so the days of one table are together; the per-table daily figures (writes,
  files, bytes, rows, average file size, reads, bytes read: ``TABLE_DAILY``) are sums over it at read time; filled by
  ``table_rollup_mv``; kept with the application summaries (``retention.apps_days``): a table's trend outlives the
  runs that wrote it.

**Duplicates.** A redelivered event is inserted again, and a materialized view sees every insert, so a summary that
*adds* rows at insert time (SummingMergeTree, ``sumState``) would count a redelivered stage twice. The rollups are
instead keyed by the event's identity, exactly like the event tables (``ReplacingMergeTree`` ordered by ``(cluster, day,
app_id, app_attempt, [stage_id, stage_attempt,] seq)``, ``run_rollup`` by the same identity in job order; every key
column is a value of the event, so both copies share the whole key) and read through their ``_dedup`` view (``FINAL``).
Sums are taken when reading, over one row per stage: the answer is the raw tables' deduplicated aggregate exactly,
before and after merges, on every server version from 18.16 (no AggregateFunction or SimpleAggregateFunction types
needed), on one node and on a cluster. Per-application totals are that read-time sum over the application's stages (tens
to hundreds of rows, against thousands of task rows).

**Cluster.** The same ``Schema`` machinery as the event tables renders them: ``<r>_local`` (Replicated), ``<r>``
(Distributed, sharded by ``cityHash64(app_id)`` like the sources, so an application's stage rows and their rollup rows
live on one shard), ``<r>_dedup_local`` + ``<r>_dedup``; the materialized views are created ON CLUSTER on the
``<source>_local`` tables and write to ``<r>_local`` (each shard summarises its own inserts).

**Backfill.** When a rollup table is created on a store that already has events, ``INSERT … SELECT`` from the source
fills it; rows inserted meanwhile may land twice, which the identity key makes harmless.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sparktap.schemas.ddl import ColumnSpec, Schema, TableSpec, quote_ident, quote_literal

STAGE_ROLLUP = "stage_rollup"
APP_ROLLUP = "app_rollup"
RUN_ROLLUP = "run_rollup"
TABLE_ROLLUP = "table_rollup"
ROLLUP_TABLES = (STAGE_ROLLUP, APP_ROLLUP, RUN_ROLLUP, TABLE_ROLLUP)
RUN_GRANULARITY = 256
"""``index_granularity`` of ``run_rollup``: a pass reads a few jobs' rows, so a small granule reads few others"""

_EVENT_KEY = ("cluster", "app_id", "app_attempt", "app_name", "seq", "event_time_ms")
"""The columns every event-level rollup row starts with: the application attempt, its event and its time."""
_STAGE_COLUMNS = (
    *_EVENT_KEY,
    "stage_id",
    "stage_attempt",
    "name",
    "job_id",
    "sql_execution_id",
    "status",
    "submission_time_ms",
    "completion_time_ms",
    "duration_ms",
    "num_tasks",
    "tasks_succeeded",
    "tasks_failed",
    "tasks_killed",
    "slots",
    "task_duration_ms_max",
    "task_duration_ms_sum",
    "run_time_ms_max",
    "run_time_ms_sum",
    "gc_time_ms_max",
    "gc_time_ms_sum",
    "input_bytes_sum",
    "shuffle_read_bytes_sum",
    "shuffle_read_remote_bytes_sum",
    "shuffle_write_bytes_sum",
    "memory_spill_bytes_sum",
    "disk_spill_bytes_sum",
    "input_records",
    "output_bytes",
    "output_records",
    "cpu_time_ns",
    "peak_execution_memory_max",
)
_APP_COLUMNS = ("cluster", "app_id", "app_attempt", "app_name", "seq", "event_type", "event_time_ms")
_APP_START_ONLY = ("user", "spark_version")
_APP_END_ONLY = ("duration_ms",)
_RUN_COLUMNS = (
    "cluster",
    "app_name",
    "app_id",
    "app_attempt",
    "seq",
    "event_type",
    "event_time_ms",
    "stage_id",
    "stage_attempt",
    "name",
    "status",
    "duration_ms",
    "shuffle_read_bytes_sum",
    "shuffle_write_bytes_sum",
)
_TABLE_COLUMNS = (
    *_EVENT_KEY,
    "execution_id",
    "node_id",
    "role",
    "catalog",
    "table",
    "format",
    "location",
    "write_mode",
    "files",
    "bytes",
    "rows",
    "partitions",
)
_TABLE_ORDER = ("cluster", "catalog", "table", "location", "toDate(event_time)", "app_id", "app_attempt", "seq")
TABLE_KEY = "if(`table` != '', `table`, `location`)"
"""SQL: what names a table in the per-table reads: its qualified name, else (a bare path) its location"""
COMPACTION_MODES = ("optimize", "rewrite", "compact", "rewrite_data_files", "rewrite_manifests", "zorder", "vacuum")
"""``write_mode`` values (lower-cased) of a write that compacts a table: Delta's OPTIMIZE, Iceberg's
``rewrite_data_files``, Hudi's compaction. The contract has no files-removed figure, so compaction is seen only as
such a write."""


SMALL_FILE_BYTES = 32 * 1024 * 1024
"""A write whose files average under this writes small files (``table_file_growth``'s default)"""


def table_daily(source: str, where: str = "1", small_file_bytes: int = SMALL_FILE_BYTES) -> str:
    """SQL: one row per (cluster, catalog, table key, format, day) of a ``table_rollup`` read ``source`` (its
    ``_dedup`` view or ``FINAL``): writes, files, bytes and rows written, average file size, the files written by
    writes averaging under ``small_file_bytes`` a file, reads and bytes read, compactions; ``where`` filters the rows
    first (our own SQL)."""
    written = "role = 'write'"
    small = f"{written} AND ifNull(bytes, 0) < ifNull(files, 0) * {int(small_file_bytes)}"
    return f"""SELECT cluster, catalog, {TABLE_KEY} AS table_key, format, toDate(event_time) AS day,
    countIf({written}) AS writes, sumIf(ifNull(files, 0), {written}) AS files_written,
    sumIf(ifNull(bytes, 0), {written}) AS bytes_written, sumIf(ifNull(rows, 0), {written}) AS rows_written,
    if(files_written > 0, bytes_written / files_written, 0.) AS avg_file_bytes,
    sumIf(ifNull(files, 0), {small}) AS small_files_written,
    countIf(role = 'read') AS reads, sumIf(ifNull(bytes, 0), role = 'read') AS bytes_read,
    countIf({written} AND lower(write_mode) IN ({", ".join(quote_literal(m) for m in COMPACTION_MODES)})) AS compactions
FROM {source}
WHERE {where}
GROUP BY cluster, catalog, table_key, format, day"""  # noqa: S608 - our own identifiers and literals


_RUN_ORDER = ("cluster", "app_name", "event_type", "app_id", "app_attempt", "stage_id", "stage_attempt", "seq")


@dataclass(frozen=True)
class Rollup:
    """A rollup table and the materialized views that fill it (one per source event table)."""

    spec: TableSpec
    sources: tuple[tuple[str, str], ...]
    """(materialized view name, source event table)"""
    tier: str
    """``stages`` or ``apps``: which retention setting applies (``table_rollup``: ``apps``)"""
    source_specs: tuple[TableSpec, ...] = ()
    """the source tables (this server version's), in the order of ``sources``"""
    granularity: int | None = None
    """``index_granularity`` of the table (None: the server's default, 8192)"""

    def select(self, source: str) -> str:
        """The SELECT list (columns of the rollup, in order) of the view reading ``source``."""
        (table,) = (t for t in self.source_specs if t.name == source)
        have = set(table.column_names)
        out = []
        for col in self.spec.columns:
            if col.name == "event_time":
                (time,) = (d for d in table.derived if d.name == "event_time")
                out.append(f"{time.expression} AS {quote_ident(col.name)}")
            elif col.name in have and table.column(col.name).ch_type == col.ch_type:
                out.append(quote_ident(col.name))
            else:
                out.append(f"{_default_sql(col)} AS {quote_ident(col.name)}")
        return ", ".join(out)


def _default_sql(col: ColumnSpec) -> str:
    value = "NULL" if col.nullable else quote_literal("" if "String" in col.ch_type else 0)
    return f"CAST({value} AS {col.ch_type})"


def _spec(
    schema: Schema,
    name: str,
    sources: tuple[str, ...],
    names: tuple[str, ...],
    keys: tuple[str, ...],
    order: tuple[str, ...] = (),
) -> TableSpec:
    """A rollup table: ``names`` taken from the source tables (this server version's types, the first source's where
    they differ; no DEFAULT: the views always give every column), the source's MATERIALIZED ``event_time``, the
    identity key of its events (``order``: in another order)."""
    by_name: dict[str, ColumnSpec] = {}
    for source in reversed(sources):
        by_name.update({c.name: c for c in schema.tables[source].columns})
    columns = tuple(dataclasses.replace(by_name[n], path=(n,), default=None) for n in names)
    base = schema.tables[sources[0]]
    # event_time: an ordinary column the views compute (18.16 refuses a view writing to a MATERIALIZED column)
    (time,) = (d for d in base.derived if d.name == "event_time")
    columns += (ColumnSpec("event_time", time.ch_type, ("event_time",), None, codec=time.codec),)
    order = order or ("cluster", "toDate(event_time)", "app_id", "app_attempt", *keys, "seq")
    return TableSpec(name, None, base.model, columns, (), order)


def rollups(schema: Schema) -> tuple[Rollup, ...]:
    """The rollups of a schema (column types for its server version)."""
    stage = _spec(schema, STAGE_ROLLUP, ("stage_completed",), _STAGE_COLUMNS, ("stage_id", "stage_attempt"))
    app = _spec(schema, APP_ROLLUP, ("app_start", "app_end"), _APP_COLUMNS + _APP_START_ONLY + _APP_END_ONLY, ())
    runs = _spec(schema, RUN_ROLLUP, ("stage_completed", "app_start", "app_end"), _RUN_COLUMNS, (), _RUN_ORDER)
    table = _spec(schema, TABLE_ROLLUP, ("table_access",), _TABLE_COLUMNS, (), _TABLE_ORDER)
    tables = schema.tables
    return (
        Rollup(stage, (("stage_rollup_mv", "stage_completed"),), "stages", (tables["stage_completed"],)),
        Rollup(
            app,
            (("app_rollup_start_mv", "app_start"), ("app_rollup_end_mv", "app_end")),
            "apps",
            (tables["app_start"], tables["app_end"]),
        ),
        Rollup(
            runs,
            (
                ("run_rollup_stage_mv", "stage_completed"),
                ("run_rollup_start_mv", "app_start"),
                ("run_rollup_end_mv", "app_end"),
            ),
            "stages",
            (tables["stage_completed"], tables["app_start"], tables["app_end"]),
            RUN_GRANULARITY,
        ),
        Rollup(table, (("table_rollup_mv", "table_access"),), "apps", (tables["table_access"],)),
    )


def tier_schema(schema: Schema, days: int) -> Schema:
    """The schema rendering a table with ``days`` of retention (its TTL, where the server has TTL)."""
    return dataclasses.replace(schema, retention_days=days)


def _mv(schema: Schema, name: str, target: str, source: str, select: str) -> str:
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {schema.qualified(name)}{schema.on_cluster}\n"
        f"TO {schema.qualified(target)}\n"
        f"AS SELECT {select}\nFROM {schema.qualified(source)}"  # noqa: S608 - our own identifiers, quoted
    )


def table_statements(schema: Schema, rollup: Rollup, days: int) -> list[str]:
    """CREATE the rollup's table(s) and dedup view(s), with ``days`` of retention."""
    tiered = tier_schema(schema, days)
    settings = f"\nSETTINGS index_granularity = {rollup.granularity}" if rollup.granularity else ""
    if schema.cluster:
        from sparktap.schemas.cluster import ClusterSchema

        assert isinstance(tiered, ClusterSchema)  # noqa: S101 - a cluster schema replaced stays one
        return [
            tiered.create_local_table(rollup.spec) + settings,
            tiered.create_table(rollup.spec),
            *tiered.view_statements(rollup.spec),
        ]
    return [tiered.create_table(rollup.spec) + settings, tiered.create_view(rollup.spec)]


def view_statements(schema: Schema, rollup: Rollup) -> list[str]:
    """CREATE the materialized views filling the rollup (on the local tables in cluster mode)."""
    out = []
    for name, source in rollup.sources:
        if schema.cluster:
            from sparktap.schemas.cluster import local_name

            out.append(
                _mv(schema, local_name(name), local_name(rollup.spec.name), local_name(source), rollup.select(source))
            )
        else:
            out.append(_mv(schema, name, rollup.spec.name, source, rollup.select(source)))
    return out


def backfill_statements(schema: Schema, rollup: Rollup) -> list[str]:
    """Fill the rollup from rows already stored (through the Distributed tables in cluster mode)."""
    columns = ", ".join(quote_ident(c.name) for c in rollup.spec.columns)
    return [
        f"INSERT INTO {schema.qualified(rollup.spec.name)} ({columns}) "  # noqa: S608 - our own identifiers
        f"SELECT {rollup.select(source)} FROM {schema.qualified(source)}"
        for _, source in rollup.sources
    ]


def object_names(schema: Schema) -> list[str]:
    """Every table and view the rollups create on a server."""
    from sparktap.schemas.cluster import local_name

    names: list[str] = []
    for rollup in rollups(schema):
        names += [rollup.spec.name, rollup.spec.dedup_view]
        views = [name for name, _ in rollup.sources]
        if schema.cluster:
            names += [local_name(rollup.spec.name), local_name(rollup.spec.dedup_view)]
            views = [local_name(v) for v in views]
        names += views
    return names

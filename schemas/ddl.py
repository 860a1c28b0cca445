"""ClickHouse DDL rendered from the event models, for the version of the server it will run on.

Layout (one database, everything created with ``IF NOT EXISTS``, so rendering and applying twice is harmless):

- one table per event type, named like the type (``task_end``, ``stage_completed`` …). No grouping: each type
  has its own columns and its own hot queries, and a table per type keeps every column typed and non-sparse.
  Every table is deduplicated on (``app_id``, ``app_attempt``, ``seq``), the identity of an event;
- ``raw_events``: the envelope of events whose type this version does not know, plus ``payload``, the whole
  message as compact JSON (docs/architecture.md: unknown event types are kept, never rejected);
- ``<table>_dedup`` views (suffix rather than a ``v_`` prefix, so each view sorts next to its table): the table
  ``FINAL``, i.e. one row per event even before background merges have removed redelivered copies. ``FINAL``
  works on every server version; ``LIMIT 1 BY`` would sort the whole table on every read;
- ``schema_migrations`` (``version``, ``applied_at``): the ``DDL_VERSION`` applied, written by the storage.

Columns come from the field specs of the pydantic models (``schemas/fields.py``, in declaration order):

- the ``Column`` annotation gives the type (``Count``/``Bytes``/``Millis``/``Nanos`` -> UInt64, ``EpochMillis``/
  ``Id`` -> Int64, ``Label`` -> LowCardinality(String)); otherwise int -> Int64, float -> Float64, bool -> UInt8,
  str -> String,
  a ``Literal`` of strings -> LowCardinality(String) (an enumeration), ``X | None`` -> Nullable(X),
  list[int] -> Array(Int64), list[str] -> Array(String);
- nested models are flattened with ``_`` (``task_duration_ms.p50`` -> ``task_duration_ms_p50``);
- ``dict`` fields -> Map(String, V) where the server has Map (>= 22.1), else String holding compact JSON with
  sorted keys; ``dict[str, Any]`` (the raw payload) is always JSON text;
- a list of models (``AqePlanUpdate.shuffle_reads``) -> parallel arrays, one per field of the element model
  (``shuffle_reads_node_id Array(Int64)``, ``shuffle_reads_skewed Array(UInt8)`` …): queryable with ARRAY JOIN
  on every version, unlike JSON text;
- the contract keeps times as integer epoch milliseconds (``*_ms``); derived ``DateTime64(3, 'UTC')`` columns
  (``DateTime('UTC')`` before 20.5, second precision) are added: ``event_time`` MATERIALIZED (stored: it is in
  the partition and sorting keys), the others (``emitted_at``, ``launch_time`` …) ALIAS (computed when read).
  Neither kind is returned by ``SELECT *``; the dedup views list them explicitly.

Tables are ``ReplacingMergeTree`` partitioned by month of ``event_time`` and ordered by
``(cluster, toDate(event_time), app_id, app_attempt, <table keys>, seq)``. Every key column before ``seq`` is a
value of the event itself, so two copies of one event always share the whole key: the key identifies exactly
(``app_id``, ``app_attempt``, ``seq``) while serving the dashboards' cluster / time / app / stage filters.
On >= 20.5: LowCardinality, codecs (DoubleDelta for ids, T64 for counters, ZSTD everywhere)
and a TTL of ``retention_days``; before 20.5 none of them (LowCardinality was experimental: plain String).

API: ``render_ddl(version, database, retention_days)`` -> statements; ``schema_for(...)`` -> ``Schema`` (tables,
statements, ``table_for(event_type)``); ``table_for(event_type, version)`` -> ``TableSpec`` with ``.name``,
``.columns`` (``ColumnSpec(name, ch_type, path, default, encoding, …)``), ``.derived``, ``.order_by``.
``schemas/rows.py`` turns event dicts into rows/columns of a ``TableSpec``.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from sparktap.schemas.events import EVENT_TYPES, Envelope, UnknownEvent
from sparktap.schemas.fields import Features, FieldSpec, fields_of, nullable_type

DDL_VERSION = 5
"""Version of the rendered layout, recorded in ``schema_migrations``; bump it whenever the DDL changes."""
LATEST_VERSION: tuple[int, ...] = (26, 9)
"""The server version assumed when none is known (chDB's ClickHouse)."""
RAW_TABLE = "raw_events"
MIGRATIONS_TABLE = "schema_migrations"
SILENCES_TABLE = "alert_silences"
"""The alerter's silences (``detection/silences.py``): append-only, a silence's end is the least ``ends_at_ms``."""
SILENCED_TABLE = "alert_silenced"
"""The silences' audit: one row each time a silence keeps a finding quiet (``SilenceStore.record_muted``)."""
DEDUP_SUFFIX = "_dedup"

RUN_FACT_GRANULARITY = 256
"""``index_granularity`` of the few-rows-per-application tables a recurring job's earlier runs are read from by
``app_id`` (``RUN_FACT_TABLES``): an event-driven pass reads a bounded number of earlier runs
(``detection/history.py``), spread over the window's days, so each costs one granule per table: 256 rows, not 8,192,
whatever the store's size."""
RUN_FACT_TABLES = frozenset({"app_start", "app_end", "executor_added", "executor_removed", "executor_metrics"})

# keys between (cluster, day, app_id, app_attempt) and seq, per table: what the dashboards filter on
_TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "job_start": ("job_id",),
    "job_end": ("job_id",),
    "sql_start": ("execution_id",),
    "sql_end": ("execution_id",),
    "stage_submitted": ("stage_id", "stage_attempt"),
    "stage_completed": ("stage_id", "stage_attempt"),
    "task_end": ("stage_id", "stage_attempt"),
    "aqe_plan_update": ("execution_id",),
    "aqe_shuffle_read": ("execution_id", "node_id"),
    "executor_added": ("executor_id",),
    "executor_removed": ("executor_id",),
    "operation": ("session_id", "operation_id"),
    "executor_metrics": ("executor_id",),
    RAW_TABLE: ("event_type",),
}
_TIME_COLUMN = "event_time"

Encoding = Literal["value", "json", "each", "each_json"]


@dataclass(frozen=True)
class ColumnSpec:
    """One insertable column and where its value is in an event dict.

    ``path`` is the key path from the event root (``("task_duration_ms", "p50")``). ``encoding``: ``value`` (as
    is), ``json`` (compact JSON text, sorted keys), ``each`` (``path[0]`` is a list of objects; the column is the
    array of ``path[1]`` over its elements, ``item_default`` when absent), ``each_json`` (the same, JSON text).
    ``default`` is the column value used when the field is missing (or null where the column is not Nullable).
    """

    name: str
    ch_type: str
    path: tuple[str, ...]
    default: Any = None
    encoding: Encoding = "value"
    item_default: Any = None
    codec: str = ""
    field: FieldSpec | None = dataclasses.field(default=None, compare=False, repr=False)
    """the field the column holds (``schemas/fields.py``); for ``each`` columns, the field of the list's element"""

    @property
    def nullable(self) -> bool:
        return "Nullable(" in self.ch_type and not self.ch_type.startswith("Array(")


@dataclass(frozen=True)
class DerivedColumn:
    """A column computed by the server (``MATERIALIZED`` or ``ALIAS``); never inserted."""

    name: str
    ch_type: str
    kind: Literal["MATERIALIZED", "ALIAS"]
    expression: str
    codec: str = ""


@dataclass(frozen=True)
class TableSpec:
    """A table: its insertable columns in order, derived columns and sorting key."""

    name: str
    event_type: str | None
    model: type[BaseModel]
    columns: tuple[ColumnSpec, ...]
    derived: tuple[DerivedColumn, ...]
    order_by: tuple[str, ...]
    granularity: int | None = None
    """``index_granularity`` (None: the server's default, 8192)"""

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def dedup_view(self) -> str:
        return self.name + DEDUP_SUFFIX

    def column(self, name: str) -> ColumnSpec:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(f"table {self.name!r} has no column {name!r}")


def quote_ident(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def quote_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


# ----------------------------------------------------------------------------------------------- columns


def _codec(name: str, ch_type: str, features: Features) -> str:
    if not features.codecs:
        return ""
    # Measured on 200,000 task_end rows shaped like a real job, after OPTIMIZE FINAL (bytes per row):
    # seq/ids DoubleDelta+ZSTD 0.02 (Delta+ZSTD 0.39, ZSTD 1.03); epoch ms ZSTD 2.04 (T64+ZSTD 2.10,
    # DoubleDelta+ZSTD 2.31); counters T64+ZSTD (cpu_time_ns 4.11 vs ZSTD 4.59, duration_ms 1.54 vs 1.81).
    if ch_type in ("Int64", "UInt64"):
        if name.endswith("_ms") and ch_type == "Int64":
            return "CODEC(ZSTD(1))"  # epoch milliseconds
        if name == "seq" or name.endswith("_id") or name in ("stage_attempt", "attempt", "index"):
            return "CODEC(DoubleDelta, ZSTD(1))"  # ids: ascending runs in sorting order
        return "CODEC(T64, ZSTD(1))"  # counters, sizes, durations: small values in wide integers
    return "CODEC(ZSTD(1))"


def _json_text(value: Any) -> str:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _columns(
    model: type[BaseModel], features: Features, prefix: str = "", path: tuple[str, ...] = ()
) -> list[ColumnSpec]:
    """The columns of a model's fields (``schemas/fields.py`` gives each field's kind and column type)."""
    cols: list[ColumnSpec] = []
    for spec in fields_of(model):
        name, fpath = prefix + spec.name, (*path, spec.name)
        if spec.kind == "model":
            assert spec.model is not None  # noqa: S101 - set for every nested model
            if spec.nullable:
                raise TypeError(f"{model.__name__}.{spec.name}: optional nested models are not supported")
            cols.extend(_columns(spec.model, features, name + "_", fpath))
        elif spec.kind == "list" and spec.item is not None and spec.item.model is not None:
            cols.extend(_each_columns(spec.item.model, features, name + "_", fpath))
        elif spec.stored_as_json(features):
            text = _json_text(spec.default if spec.default is not None else {})
            cols.append(
                ColumnSpec(name, "String", fpath, text, "json", codec=_codec(name, "String", features), field=spec)
            )
        else:
            ch = spec.clickhouse_type(features)
            if spec.kind == "dict":
                value = {} if spec.required else spec.default
            elif spec.kind == "list":
                value = list(spec.default or [])
            else:
                value = None if spec.required else spec.default
                if value is None and not spec.nullable:
                    value = spec.column_zero()
            cols.append(ColumnSpec(name, ch, fpath, value, codec=_codec(name, ch, features), field=spec))
    return cols


def _each_columns(item: type[BaseModel], features: Features, prefix: str, path: tuple[str, ...]) -> list[ColumnSpec]:
    """Parallel arrays for a list of models: one Array column per (scalar or dict) field of the element model."""
    cols: list[ColumnSpec] = []
    codec = "CODEC(ZSTD(1))" if features.codecs else ""
    for col in _columns(item, features):
        if len(col.path) != 1 or col.encoding != "value" or col.ch_type.startswith("Array("):
            if col.encoding == "json" and len(col.path) == 1:
                cols.append(
                    ColumnSpec(
                        prefix + col.name,
                        "Array(String)",
                        (*path, col.path[0]),
                        [],
                        "each_json",
                        col.default,
                        codec,
                        field=col.field,
                    )
                )
                continue
            raise TypeError(f"{item.__name__}.{col.name}: lists of nested structures are not supported")
        cols.append(
            ColumnSpec(
                prefix + col.name,
                f"Array({col.ch_type})",
                (*path, col.path[0]),
                [],
                "each",
                col.default,
                codec,
                field=col.field,
            )
        )
    return cols


def _time_expr(column: str, features: Features) -> tuple[str, str]:
    """(type, expression) of the DateTime column derived from an epoch-milliseconds column."""
    if features.datetime64:
        return "DateTime64(3, 'UTC')", f"fromUnixTimestamp64Milli({quote_ident(column)}, 'UTC')"
    return "DateTime('UTC')", f"toDateTime(intDiv({quote_ident(column)}, 1000), 'UTC')"


def _derived(columns: tuple[ColumnSpec, ...], features: Features) -> tuple[DerivedColumn, ...]:
    out: list[DerivedColumn] = []
    for col in columns:
        base = col.ch_type.removeprefix("Nullable(").rstrip(")")
        if len(col.path) != 1 or base != "Int64" or not col.name.endswith("_ms"):
            continue
        ch, expr = _time_expr(col.name, features)
        name = col.name.removesuffix("_ms")
        if name == _TIME_COLUMN:
            codec = "CODEC(ZSTD(1))" if features.codecs else ""
            out.append(DerivedColumn(name, ch, "MATERIALIZED", expr, codec))
        else:
            out.append(DerivedColumn(name, nullable_type(ch) if col.nullable else ch, "ALIAS", expr))
    out.sort(key=lambda d: d.kind != "MATERIALIZED")  # stable: event_time first, then the others in field order
    return tuple(out)


def _table(name: str, event_type: str | None, model: type[BaseModel], features: Features) -> TableSpec:
    columns = tuple(_columns(model, features))
    if event_type is None:  # the raw table's payload is the whole message, as JSON text
        columns = tuple(
            dataclasses.replace(c, ch_type="String", default="{}", encoding="json") if c.name == "payload" else c
            for c in columns
        )
    keys = ("cluster", f"toDate({_TIME_COLUMN})", "app_id", "app_attempt", *_TABLE_KEYS.get(name, ()), "seq")
    granularity = RUN_FACT_GRANULARITY if name in RUN_FACT_TABLES else None
    return TableSpec(name, event_type, model, columns, _derived(columns, features), keys, granularity)


# ----------------------------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class Schema:
    """Everything sparktap creates in one database, for one server version."""

    version: tuple[int, ...]
    database: str
    retention_days: int
    features: Features
    tables: dict[str, TableSpec]
    cluster: str | None = None
    """Cluster mode (``schemas/cluster.py``: ``ClusterSchema``): ON CLUSTER, Replicated local + Distributed tables."""

    @property
    def on_cluster(self) -> str:
        """`` ON CLUSTER `name` `` in cluster mode, else ''."""
        return f" ON CLUSTER {quote_ident(self.cluster)}" if self.cluster else ""

    def engine(self, spec: TableSpec | None) -> str:
        """The engine of an event table (``spec``) or of ``schema_migrations`` (None)."""
        return "ReplacingMergeTree"

    def table_for(self, event_type: str) -> TableSpec:
        """The table of an event type; ``raw_events`` for a type this version does not know."""
        return self.tables.get(event_type) or self.tables[RAW_TABLE]

    def qualified(self, table: str) -> str:
        return f"{quote_ident(self.database)}.{quote_ident(table)}"

    def column_ddl(self, col: ColumnSpec | DerivedColumn) -> str:
        parts = [quote_ident(col.name), col.ch_type]
        if isinstance(col, DerivedColumn):
            parts += [col.kind, col.expression]
        elif not isinstance(col.default, list | dict) and col.default not in (None, 0, "", False):
            parts += ["DEFAULT", quote_literal(col.default)]
        if col.codec:
            parts.append(col.codec)
        return " ".join(parts)

    def create_table(self, spec: TableSpec) -> str:
        all_columns: list[ColumnSpec | DerivedColumn] = [*spec.columns, *spec.derived]
        body = ",\n    ".join(self.column_ddl(c) for c in all_columns)
        order = ", ".join(k if "(" in k else quote_ident(k) for k in spec.order_by)
        lines = [
            f"CREATE TABLE IF NOT EXISTS {self.qualified(spec.name)}{self.on_cluster}\n(\n    {body}\n)",
            f"ENGINE = {self.engine(spec)}",
            f"PARTITION BY toYYYYMM({quote_ident(_TIME_COLUMN)})",
            f"ORDER BY ({order})",
        ]
        if self.features.ttl:
            lines.append(f"TTL toDateTime({quote_ident(_TIME_COLUMN)}) + INTERVAL {self.retention_days} DAY")
        if spec.granularity:
            lines.append(f"SETTINGS index_granularity = {spec.granularity}")
        return "\n".join(lines)

    def create_view(self, spec: TableSpec) -> str:
        extra = "".join(f", {quote_ident(d.name)}" for d in spec.derived)
        return (
            f"CREATE VIEW IF NOT EXISTS {self.qualified(spec.dedup_view)}{self.on_cluster} AS\n"
            f"SELECT *{extra} FROM {self.qualified(spec.name)} FINAL"
        )

    def create_migrations(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.qualified(MIGRATIONS_TABLE)}{self.on_cluster}\n"
            "(\n    `version` UInt32,\n    `applied_at` DateTime('UTC') DEFAULT now()\n)\n"
            f"ENGINE = {self.engine(None)}\nORDER BY (`version`)"
        )

    def bookkeeping_engine(self, table: str) -> str:
        """The engine of a small table every server holds in full (``alert_silences``)."""
        return "ReplacingMergeTree"

    def create_silences(self) -> str:
        """The alerter's silences (``detection/silences.py``), shared by every alerter replica and the dashboards."""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.qualified(SILENCES_TABLE)}{self.on_cluster}\n(\n    `id` String,\n"
            "    `rule` String,\n    `app_name` String,\n    `cluster` String,\n    `team` String,\n"
            "    `user` String,\n    `starts_at_ms` Int64,\n    `ends_at_ms` Int64,\n    `created_at_ms` Int64,\n"
            f"    `created_by` String,\n    `reason` String\n)\nENGINE = {self.bookkeeping_engine(SILENCES_TABLE)}\n"
            "ORDER BY (`id`, `ends_at_ms`)"
        )

    def create_silenced(self) -> str:
        """The silences' audit (``detection/silences.py``): which silence kept which finding quiet, and when."""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.qualified(SILENCED_TABLE)}{self.on_cluster}\n(\n"
            "    `silence_id` String,\n    `finding_key` String,\n    `rule` String,\n    `cluster` String,\n"
            "    `app_id` String,\n    `app_name` String,\n    `severity` String,\n    `muted_at_ms` Int64\n)\n"
            f"ENGINE = {self.bookkeeping_engine(SILENCED_TABLE)}\n"
            "ORDER BY (`silence_id`, `finding_key`, `muted_at_ms`)"
        )

    def statements(self) -> list[str]:
        out = [f"CREATE DATABASE IF NOT EXISTS {quote_ident(self.database)}{self.on_cluster}", self.create_migrations()]
        out.append(self.create_silences())
        out.append(self.create_silenced())
        for spec in self.tables.values():
            out.append(self.create_table(spec))
        for spec in self.tables.values():
            out.append(self.create_view(spec))
        return out

    def object_names(self) -> list[str]:
        """Every table and view ``statements`` creates."""
        names = [MIGRATIONS_TABLE, SILENCES_TABLE, SILENCED_TABLE]
        for spec in self.tables.values():
            names += [spec.name, spec.dedup_view]
        return names


@functools.lru_cache(maxsize=64)
def tables_for(version: tuple[int, ...]) -> dict[str, TableSpec]:
    features = Features.for_version(version)
    tables = {et: _table(et, et, model, features) for et, model in EVENT_TYPES.items()}
    tables[RAW_TABLE] = _table(RAW_TABLE, None, UnknownEvent, features)
    return tables


def table_for(event_type: str, version: tuple[int, ...] = LATEST_VERSION) -> TableSpec:
    """The table (name, columns with their event paths) an event type is stored in."""
    tables = tables_for(tuple(version))
    return tables.get(event_type) or tables[RAW_TABLE]


def known_model(event_type: str) -> type[Envelope] | None:
    return EVENT_TYPES.get(event_type)

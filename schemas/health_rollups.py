"""The pipeline-health rollup: which sequence numbers each application stored, per event table and time, exact under
redelivered events, for the overview's "Events missing (sequence gaps)" and "Events stored by the collector" panels
(``dashboards/health_panels.py``), which otherwise count the rows of 15 ``_dedup`` views (``FINAL``), ``task_end``'s
included.

**Shape.** One row per (cluster, application, attempt, event table, time, block of 64 sequence numbers) holding the
OR of ``1 << (seq % 64)`` over the block's events (``seq_mask``, ``AggregateFunction(groupBitOr, UInt64)`` in an
``AggregatingMergeTree``: the state is the 64-bit value itself). A redelivered event sets a bit already set, so the
rollup is idempotent: the number of distinct events stored is the popcount of the masks, the highest sequence number
is ``64 * seq_block`` + the highest set bit, exactly the raw ``_dedup`` answers, before and after merges, on every
server from 18.16 (which has ``groupBitOr`` and AggregateFunction states, no ``bitCount``: the popcount is the
portable SWAR sum below). Four tables, the same columns, four time grains:

- ``health_rollup``: the event's **minute**, ordered by ``(cluster, day, app_id, …)``: the events-stored panel's
  whole minutes;
- ``health_rollup_hours``: the event's **hour**, the same order: what the sequence-gap panel reads (every row of the
  applications started in the range: the same bits as the minute table in ~3x fewer rows) and the events-stored
  panel's whole hours (an interval of whole hours); filled on an existing store from the minute table;
- ``health_rollup_5m``: the event's **5 minutes**, ordered by ``(cluster, event_table, event_time, …)``: the
  events-stored panel's whole 5 minutes (an interval of whole 5 minutes; 3.8 M rows against the minute table's 7.0 M
  at 100 M task rows, and a range of time or tables narrows its read by the sorting key); filled on an existing store
  from the minute table;
- ``health_rollup_edges``: the event's **second** (``event_time``) and ``subsecond`` (1 when the event's time has
  milliseconds: chDB stores ``event_time`` with them, and ``$__timeFilter``'s upper bound ``event_time <= $__toTime``
  keeps ``t.000`` and not ``t.500``), ordered by ``(cluster, event_table, event_time, …)``: the partial minutes at
  the two ends of a range and the ``app_start`` rows that say which applications started in it.

Identity: two raw rows of one table are one stored event when they share ``(cluster, app_id, app_attempt, seq)``
and their minute (the listener numbers an application attempt's events once, so a redelivered copy is the only other
row with its sequence number; a second event with the same number in the same table and minute would be counted once).

**Size.** The minute table holds about one row per application, table and minute (a block of 64 numbers), the hour
table one per application, table, hour and block, the 5-minute table one per application, table, 5 minutes and
block, the edge table about one per application, table and second: at
1,000 tasks per application see ``docs/benchmarks.md`` ("Fleet scale", bytes per task row).

**Retention.** The tier of the events summarised: rows of ``task_end`` at ``tasks`` (7 days), all others at
``events`` (``retention_days``, 30): the TTL is ``retention_days`` like the event tables', and ``sparktap retention
apply`` deletes ``task_end``'s rows older than the task tier (``store/retention.py``). The minute table keeps a
whole minute on either side of a cutoff.

**Cluster.** ``<t>_local`` (``ReplicatedAggregatingMergeTree``) and the Distributed ``<t>`` (sharded by
``cityHash64(app_id)``, like the sources: an application's rows are on its events' shard); the materialized views are
created ON CLUSTER on the ``<source>_local`` tables. Reads merge the states through the Distributed table.

**Backfill.** A table created on a store with events is filled by ``INSERT … SELECT … GROUP BY`` from each source
(``max_bytes_before_external_group_by`` 1 GB: a large store's keys spill to disk); an event inserted meanwhile may be
summarised twice, which the OR makes harmless.
"""

# ruff: noqa: S608 - SQL assembled from our own identifiers, quoted

from __future__ import annotations

from dataclasses import dataclass

from sparktap.schemas.ddl import Schema, quote_ident, quote_literal

HEALTH_ROLLUP = "health_rollup"
HEALTH_EDGES = "health_rollup_edges"
HEALTH_HOURS = "health_rollup_hours"
HEALTH_FIVE = "health_rollup_5m"
HEALTH_TABLES = (HEALTH_ROLLUP, HEALTH_EDGES, HEALTH_HOURS, HEALTH_FIVE)
HEALTH_SOURCES = (
    "app_start",
    "app_end",
    "job_start",
    "job_end",
    "sql_start",
    "sql_end",
    "stage_submitted",
    "stage_completed",
    "task_end",
    "aqe_plan_update",
    "aqe_shuffle_read",
    "executor_added",
    "executor_removed",
    "listener_health",
    "raw_events",
)
"""every event table: the sequence-gap panel counts all of them, the events-stored panel some"""
_ZK_ROOT = "/clickhouse/tables"
_SPILL = "SETTINGS max_bytes_before_external_group_by = 1000000000"


@dataclass(frozen=True)
class HealthTable:
    name: str
    grain: str
    """``minute``, ``five_minutes`` or ``hour`` (the event's time floored to it), or ``second`` (the edge table, with
    ``subsecond``)"""

    @property
    def edges(self) -> bool:
        return self.grain == "second"

    def floor(self, second: str) -> str:
        """``second`` (a DateTime expression) floored to the grain"""
        if self.edges:
            return second
        return {"minute": "toStartOfMinute", "five_minutes": "toStartOfFiveMinute", "hour": "toStartOfHour"}[
            self.grain
        ] + f"({second})"

    def order_by(self) -> str:
        keys: tuple[str, ...]
        if self.edges:
            keys = ("cluster", "event_table", "event_time", "subsecond", "app_id", "app_attempt", "seq_block")
        elif self.grain == "five_minutes":  # read by time range and table only (a PREWHERE on them skips granules)
            keys = ("cluster", "event_table", "event_time", "app_id", "app_attempt", "seq_block")
        else:
            keys = ("cluster", "toDate(event_time)", "app_id", "app_attempt", "event_table", "event_time", "seq_block")
        return ", ".join(k if "(" in k else quote_ident(k) for k in keys)


def health_tables() -> tuple[HealthTable, ...]:
    """The minute table, the edge table, the hour table, the 5-minute table: in the order they are created and
    backfilled (the hour and 5-minute tables' backfills read the minute table)."""
    return (
        HealthTable(HEALTH_ROLLUP, "minute"),
        HealthTable(HEALTH_EDGES, "second"),
        HealthTable(HEALTH_HOURS, "hour"),
        HealthTable(HEALTH_FIVE, "five_minutes"),
    )


def _columns(schema: Schema, table: HealthTable) -> list[tuple[str, str]]:
    task = schema.tables["task_end"]
    text = task.column("cluster").ch_type  # LowCardinality(String) where the server has it
    cols = [
        ("cluster", text),
        ("app_id", task.column("app_id").ch_type),
        ("app_attempt", task.column("app_attempt").ch_type),
        ("event_table", text),
        ("event_time", "DateTime('UTC')"),
    ]
    if table.edges:
        cols.append(("subsecond", "UInt8"))
    return [*cols, ("seq_block", "Int64"), ("seq_mask", "AggregateFunction(groupBitOr, UInt64)")]


def _local(name: str) -> str:
    return name + "_local"


def _engine(schema: Schema, name: str) -> str:
    if not schema.cluster:
        return "AggregatingMergeTree"
    path = f"{_ZK_ROOT}/{{shard}}/{schema.database}/{name}"
    return f"ReplicatedAggregatingMergeTree({quote_literal(path)}, '{{replica}}')"


def table_statements(schema: Schema) -> list[str]:
    """CREATE the tables (local + Distributed on a cluster); TTL ``retention_days`` where the server has TTL."""
    out = []
    for table in health_tables():
        columns = _columns(schema, table)
        body = ",\n    ".join(f"{quote_ident(n)} {t}" for n, t in columns)
        name = _local(table.name) if schema.cluster else table.name
        lines = [
            f"CREATE TABLE IF NOT EXISTS {schema.qualified(name)}{schema.on_cluster}\n(\n    {body}\n)",
            f"ENGINE = {_engine(schema, name)}",
            "PARTITION BY toYYYYMM(`event_time`)",
            f"ORDER BY ({table.order_by()})",
        ]
        if schema.features.ttl:
            lines.append(f"TTL `event_time` + INTERVAL {schema.retention_days} DAY")
        out.append("\n".join(lines))
        if schema.cluster:
            args = ", ".join(quote_ident(x) for x in (schema.cluster, schema.database, _local(table.name)))
            out.append(
                f"CREATE TABLE IF NOT EXISTS {schema.qualified(table.name)}{schema.on_cluster}\n(\n    {body}\n)\n"
                f"ENGINE = Distributed({args}, cityHash64(`app_id`))"
            )
    return out


def select(schema: Schema, table: HealthTable, source: str, where: str = "") -> str:
    """The aggregating SELECT of one source table's rows (``where``: those only) into ``table``'s columns (a
    view's, or the backfill's)."""
    time = table.floor("toDateTime(intDiv(`event_time_ms`, 1000), 'UTC')")
    text = dict(_columns(schema, table))["event_table"]
    parts = [
        "`cluster`",
        "`app_id`",
        "`app_attempt`",
        f"CAST({quote_literal(source)} AS {text}) AS `event_table`",
        f"{time} AS `event_time`",
    ]
    if table.edges:
        # 1: the event's time has milliseconds past its second (kept by chDB's DateTime64 event_time; 18.16's
        # event_time is whole seconds, so 0 there, as its $__timeFilter sees it)
        frac = "`event_time_ms` % 1000 != 0" if schema.features.datetime64 else "0"
        parts.append(f"toUInt8({frac}) AS `subsecond`")
    parts += [
        "intDiv(`seq`, 64) AS `seq_block`",
        "groupBitOrState(bitShiftLeft(toUInt64(1), toUInt8(`seq` % 64))) AS `seq_mask`",
    ]
    keys = [p.rsplit(" AS ", 1)[-1] for p in parts[:-1]]
    source_name = _local(source) if schema.cluster else source
    return (
        f"SELECT {', '.join(parts)}\nFROM {schema.qualified(source_name)}\n"
        f"WHERE `seq` >= 0{f' AND {where}' if where else ''}\nGROUP BY {', '.join(keys)}"
    )


def view_name(table: HealthTable, source: str) -> str:
    return f"{table.name}_{source}_mv"


def view_statements(schema: Schema) -> list[str]:
    """The materialized views: one per source table and health table (on the local tables of a cluster)."""
    out = []
    for table in health_tables():
        target = _local(table.name) if schema.cluster else table.name
        for source in HEALTH_SOURCES:
            name = view_name(table, source)
            name = _local(name) if schema.cluster else name
            out.append(
                f"CREATE MATERIALIZED VIEW IF NOT EXISTS {schema.qualified(name)}{schema.on_cluster}\n"
                f"TO {schema.qualified(target)}\nAS {select(schema, table, source)}"
            )
    return out


def backfill_statements(schema: Schema, table: HealthTable) -> list[str]:
    """Fill ``table`` from the events already stored (on a cluster from the Distributed source tables into the
    Distributed rollup table, which puts each application's rows on its shard); the hour table from the minute table
    (``health_tables()`` fills that first)."""
    columns = ", ".join(quote_ident(n) for n, _ in _columns(schema, table))
    if table.grain in ("hour", "five_minutes"):  # from the minute table (created and filled first): the same bits
        keys = "`cluster`, `app_id`, `app_attempt`, `event_table`, `t`, `seq_block`"
        return [
            f"INSERT INTO {schema.qualified(table.name)} ({columns})\n"
            f"SELECT {keys}, groupBitOrMergeState(`seq_mask`)\n"
            f"FROM (SELECT {keys.replace('`t`', table.floor('`event_time`') + ' AS `t`')}, `seq_mask` "
            f"FROM {schema.qualified(HEALTH_ROLLUP)})\nGROUP BY {keys}\n{_SPILL}"
        ]
    out = []
    for source in HEALTH_SOURCES:
        text = select(schema, table, source)
        if schema.cluster:  # read every shard through the Distributed source table
            text = text.replace(schema.qualified(_local(source)), schema.qualified(source), 1)
        # a store's whole history in one GROUP BY: past 1 GB of keys it spills to disk instead of failing
        out.append(f"INSERT INTO {schema.qualified(table.name)} ({columns}) {text}\n{_SPILL}")
    return out


def object_names(schema: Schema) -> list[str]:
    """Every table and view the health rollup creates on a server."""
    names = []
    for table in health_tables():
        views = [view_name(table, s) for s in HEALTH_SOURCES]
        names += [table.name]
        if schema.cluster:
            names += [_local(table.name), *(_local(v) for v in views)]
        else:
            names += views
    return names


# ------------------------------------------------------------------------------------------------- reading


_M1, _M2, _M4, _H = 6148914691236517205, 3689348814741910323, 1085102592571150095, 72340172838076673


def popcount(x: str, name: str, native: bool = False) -> list[str]:
    """SELECT expressions ending with ``name``: the number of set bits of the UInt64 column ``x`` (SWAR, in UInt64
    without subtraction; 18.16 has no ``bitCount``); intermediate aliases ``_<name>_1`` … keep the SQL linear.
    ``native``: ``bitCount`` (servers from 20.x)."""
    if native:
        return [f"bitCount({x}) AS {name}"]
    a, b, c = (f"_{name}_{i}" for i in (1, 2, 3))
    return [
        f"plus(bitAnd({x}, {_M1}), bitAnd(bitShiftRight({x}, 1), {_M1})) AS {a}",
        f"plus(bitAnd({a}, {_M2}), bitAnd(bitShiftRight({a}, 2), {_M2})) AS {b}",
        f"bitAnd(plus({b}, bitShiftRight({b}, 4)), {_M4}) AS {c}",
        f"bitShiftRight(multiply({c}, {_H}), 56) AS {name}",
    ]


def highest_bit(x: str, name: str, native: bool = False) -> list[str]:
    """SELECT expressions ending with ``name``: the position of the highest set bit of the non-zero UInt64 column
    ``x`` (``x`` smeared to every lower bit, its popcount minus one), as Int64."""
    out, s = [], x
    for shift in (1, 2, 4, 8, 16, 32):
        out.append(f"bitOr({s}, bitShiftRight({s}, {shift})) AS _{name}_s{shift}")
        s = f"_{name}_s{shift}"
    return [*out, *popcount(s, f"_{name}_n", native), f"toInt64(_{name}_n) - 1 AS {name}"]

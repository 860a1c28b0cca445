"""Kafka message values -> columns per table, fast; bad messages isolated with the reason for the dead-letter topic.

    decoder = Decoder(schema, max_message_bytes=1_048_576)
    decoded = decoder.decode([msg.value() for msg in messages])
    decoded.tables["task_end"].columns   # {"seq": [...], ...}: what Storage.insert_columns takes
    decoded.tables["task_end"].indices   # which input message each row came from
    decoded.rejects                      # [Reject(index, kind, reason)]

The path of one chunk:

0. with ``arrow=True`` (chDB storage), ``task_end`` messages go first through the C reader into Arrow columns
   (``arrowpath.py``); whatever it does not take goes on to step 1;
1. size and emptiness checks, then ``orjson.loads`` per value (not JSON / not an object -> rejected);
2. events are grouped by ``event_type``; a known type with fast rules (``checks.py``) is checked per event
   (presence, nulls, nested objects), flattened column by column (``schemas.rows.columnizer``) and checked per
   column (types, ranges, enumerations);
3. everything else — unknown event types (they go to the raw table), events that failed a fast check, types
   without fast rules — goes through ``schemas.parse.parse_event``, the contract: an ``EventError`` rejects the
   message with its reason; an accepted event is flattened from the validated model, and its integers are checked
   against the column ranges (pydantic does not know that ClickHouse stops at 2**64).

Every string a user controls (``FieldSpec.text``: names and free text) is stored clean (``scrub.py``, promise 25):
the fast path and the Arrow path take an event only when each such value is clean already; the slow path cleans
what the contract accepted (capped with a marker, control characters removed, redacted) and keeps the event.

Nothing rejected here, and nothing pydantic would reject, reaches ClickHouse.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import orjson
import pyarrow.compute as pc

from sparktap import native
from sparktap.collector.arrowpath import ARROW_TYPES, C_READER, ArrowReader, concat, is_arrow, string_array, take
from sparktap.collector.checks import ColumnRule, TableRules, compile_rules, range_rules
from sparktap.collector.scrub import bad_values, scrub
from sparktap.schemas.ddl import RAW_TABLE, Schema, TableSpec
from sparktap.schemas.events import UnknownEvent
from sparktap.schemas.fields import typed_scalar
from sparktap.schemas.parse import TOO_DEEP, EventError, parse_event, too_deep
from sparktap.schemas.rows import columnizer
from sparktap.schemas.types import UserText

log = logging.getLogger(__name__)

RejectKind = Literal[
    "empty",
    "too_large",
    "not_json",
    "invalid",
    "unsupported_version",
    "event_time_out_of_range",
    "rejected_by_clickhouse",
]
REJECT_KINDS: tuple[RejectKind, ...] = (
    "empty",
    "too_large",
    "not_json",
    "invalid",
    "unsupported_version",
    "event_time_out_of_range",
    "rejected_by_clickhouse",
)
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Reject:
    """A message that goes to the dead-letter topic: ``index`` into the decoded chunk, a kind and a safe reason."""

    index: int
    kind: RejectKind
    reason: str


@dataclass
class TableChunk:
    """Rows for one table, column-oriented, and the input index of each row."""

    columns: dict[str, list[Any]]
    indices: list[int]

    @property
    def rows(self) -> int:
        return len(self.indices)

    def extend(self, columns: Mapping[str, Any], indices: Sequence[int]) -> None:
        for name, values in columns.items():
            self.columns[name] = concat(self.columns[name], values)
        self.indices.extend(indices)


@dataclass
class Decoded:
    """The result of decoding one chunk of messages."""

    tables: dict[str, TableChunk] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)
    validated: int = 0
    """events that went through pydantic (the slow path), accepted or not"""

    @property
    def rows(self) -> int:
        return sum(chunk.rows for chunk in self.tables.values())

    def add(self, table: str, columns: dict[str, Any], indices: Sequence[int]) -> None:
        if not indices:
            return
        chunk = self.tables.get(table)
        if chunk is None:
            self.tables[table] = TableChunk(columns, list(indices))
        else:
            chunk.extend(columns, indices)


def _without(columns: Mapping[str, list[Any]], drop: set[int]) -> dict[str, list[Any]]:
    return {name: [v for i, v in enumerate(values) if i not in drop] for name, values in columns.items()}


def _unclean_rows(columns: Mapping[str, Any], marked: Sequence[tuple[str, UserText]]) -> list[int]:
    """Rows of an Arrow piece holding a string a user controls that is not clean (``scrub.py``), sorted: each
    column's distinct values are checked once, and only a column with a bad one is looked at row by row."""
    bad: set[int] = set()
    for name, spec in marked:
        column = columns[name]
        if column.null_count == len(column):
            continue
        found = bad_values(pc.unique(column.drop_null()).to_pylist(), spec)
        if found:
            hits = pc.is_in(column, value_set=string_array(sorted(found)).cast(column.type))
            bad.update(j for j, hit in enumerate(hits.to_pylist()) if hit)
    return sorted(bad)


def reject_kind(reason: str) -> RejectKind:
    return "unsupported_version" if reason.startswith("unsupported schema_version") else "invalid"


@functools.cache
def _warn_no_c_reader() -> None:
    """One log line per process when the C reader is not used (the Python path decodes everything then)."""
    log.warning(
        "the collector's C reader is not used (%s): task_end is decoded on the Python path", native.unavailable()
    )


ColumnsFunction = Callable[[Sequence[Mapping[str, Any]]], dict[str, list[Any]]]


class _Columnizers(dict[str, ColumnsFunction]):
    """Table name -> its columnar function (``columnizer``), generated when a table first needs it: compiling all
    of them at start cost ~20 ms of CPU per process, most for tables a collector never sees (task_end goes
    through the C reader)."""

    def __init__(self, tables: Mapping[str, TableSpec]) -> None:
        super().__init__()
        self._tables = tables

    def __missing__(self, name: str) -> ColumnsFunction:
        function = self[name] = columnizer(self._tables[name])
        return function


class Decoder:
    """Decodes chunks of message values for one schema (a server version's table layout)."""

    def __init__(
        self,
        schema: Schema,
        max_message_bytes: int = 1_048_576,
        *,
        arrow: bool = False,
        max_future_skew_seconds: float = 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``arrow``: read task_end through the C reader into Arrow columns (``arrowpath.py``), for a storage
        that inserts Arrow (chDB); otherwise every column is a Python list.

        Events whose ``event_time_ms`` is older than the schema's retention, or more than
        ``max_future_skew_seconds`` ahead of ``clock()``, are rejected as ``event_time_out_of_range``: tables are
        partitioned by month of ``event_time``, so such rows would be dropped by the TTL at once, or spread one
        insert over more partitions than ClickHouse accepts (100), or never expire."""
        self.schema = schema
        self.max_message_bytes = max_message_bytes
        self.max_age_ms = schema.retention_days * DAY_MS
        self.max_future_ms = int(max_future_skew_seconds * 1000)
        self._clock = clock
        self._rules: dict[str, TableRules] = {}
        self._columnize = _Columnizers(schema.tables)
        self._ranges: dict[str, tuple[ColumnRule, ...]] = {}
        for name, spec in schema.tables.items():
            self._ranges[name] = range_rules(spec)
            if spec.event_type is not None:
                rules = compile_rules(spec)
                if rules.fast:
                    self._rules[spec.event_type] = rules
        self.raw_table: TableSpec = schema.tables[RAW_TABLE]
        self._arrow: ArrowReader | None = None
        self._arrow_text: tuple[tuple[str, UserText], ...] = ()
        if not C_READER:
            _warn_no_c_reader()
        if arrow and C_READER:
            for event_type in ARROW_TYPES:
                arrow_rules = self._rules.get(event_type)
                if arrow_rules is not None and arrow_rules.flat_defaults is not None:
                    self._arrow = ArrowReader(arrow_rules.table, arrow_rules, max_message_bytes)
                    self._arrow_text = tuple(
                        (c.name, c.field.text)
                        for c in arrow_rules.table.columns
                        if c.field is not None and c.field.text is not None
                    )

    @property
    def slow_types(self) -> dict[str, str]:
        """Known event types validated by pydantic only, with the reason (for the startup log)."""
        out = {}
        for spec in self.schema.tables.values():
            if spec.event_type is not None and spec.event_type not in self._rules:
                out[spec.event_type] = compile_rules(spec).why_slow
        return out

    def decode(self, values: Sequence[bytes | None]) -> Decoded:
        """Never raises for a message's content: an exception decoding the chunk is retried message by message,
        and a message that raises on its own is rejected (``invalid``) with the exception's type as the reason."""
        try:
            out = self._decode(values)
        except Exception:  # noqa: BLE001 - confined to the chunk: find the message that causes it
            out = Decoded()
            for i, value in enumerate(values):
                try:
                    one = self._decode([value])
                except Exception as exc:  # noqa: BLE001 - confined to this message
                    out.rejects.append(
                        Reject(
                            i,
                            "invalid",
                            f"cannot decode the message: {type(exc).__name__} "
                            "in the collector (a bug: please report it with the dead letter)",
                        )
                    )
                    continue
                out.validated += one.validated
                out.rejects.extend(Reject(i, r.kind, r.reason) for r in one.rejects)
                for name, chunk in one.tables.items():
                    out.add(name, chunk.columns, [i] * chunk.rows)
        self._time_window(out)
        return out

    def _decode(self, values: Sequence[bytes | None]) -> Decoded:
        out = Decoded()
        arrow = self._arrow
        if arrow is None:
            self._python(list(enumerate(values)), out)
            return out
        pieces, left = arrow.read(values)
        for columns, indices in pieces:
            bad = _unclean_rows(columns, self._arrow_text)
            if bad:  # the Python path cleans them (slow path), the rest of the piece stays Arrow
                drop = set(bad)
                keep = [j for j in range(len(indices)) if j not in drop]
                left.extend(indices[j] for j in bad)
                columns = {name: take(column, keep) for name, column in columns.items()}
                indices = [indices[j] for j in keep]
            out.add(arrow.table.name, columns, indices)
        if left:
            left.sort()
            self._python([(i, values[i]) for i in left], out)
        return out

    def window(self) -> tuple[int, int, str]:
        """(lowest, highest) ``event_time_ms`` accepted now, and the reason given for a time outside them."""
        now = int(self._clock() * 1000)
        reason = (
            f"event_time_ms: outside the accepted window (older than retention_days="
            f"{self.schema.retention_days}, or more than {self.max_future_ms // 1000} s ahead of the "
            "collector's clock; see SPARKTAP_COLLECTOR__MAX_FUTURE_SKEW_SECONDS)"
        )
        return now - self.max_age_ms, now + self.max_future_ms, reason

    def _time_window(self, out: Decoded) -> None:
        """Move the rows whose ``event_time_ms`` is outside [now - retention, now + skew] to the rejects."""
        lo, hi, reason = self.window()
        moved = False
        for name, chunk in list(out.tables.items()):
            times = chunk.columns.get("event_time_ms")
            if times is None or not chunk.rows:
                continue
            if is_arrow(times):
                typ = cast(Any, times).type
                low, high = typed_scalar(lo, typ), typed_scalar(hi, typ)  # built from bytes: no pandas import
                inside = pc.and_(pc.greater_equal(times, low), pc.less_equal(times, high))
                if pc.all(inside).as_py():
                    continue
                bad = [j for j, ok in enumerate(inside.to_pylist()) if not ok]
            else:
                bad = [j for j, t in enumerate(times) if not (isinstance(t, int) and lo <= t <= hi)]
                if not bad:
                    continue
            moved = True
            drop = set(bad)
            keep = [j for j in range(chunk.rows) if j not in drop]
            out.rejects.extend(Reject(chunk.indices[j], "event_time_out_of_range", reason) for j in bad)
            if not keep:
                del out.tables[name]
                continue
            chunk.columns = {c: take(v, keep) for c, v in chunk.columns.items()}
            chunk.indices = [chunk.indices[j] for j in keep]
        if moved:
            out.rejects.sort(key=lambda r: r.index)

    def _python(self, items: Sequence[tuple[int, bytes | None]], out: Decoded) -> None:
        rejects = out.rejects
        groups: dict[str, tuple[list[dict[str, Any]], list[int]]] = {}
        slow: list[tuple[int, dict[str, Any]]] = []
        rules = self._rules
        limit = self.max_message_bytes
        loads = orjson.loads
        for i, value in items:
            if not value:
                rejects.append(Reject(i, "empty", "empty message: no value"))
                continue
            if len(value) > limit:
                rejects.append(
                    Reject(i, "too_large", f"message too large: {len(value)} bytes > max_message_bytes={limit}")
                )
                continue
            try:
                obj = loads(value)
            except orjson.JSONDecodeError as exc:  # its message names the position and the rule, not the value
                rejects.append(Reject(i, "not_json", f"not JSON: {exc}"))
                continue
            if type(obj) is not dict:
                rejects.append(Reject(i, "not_json", f"not a JSON object: got {type(obj).__name__}"))
                continue
            if too_deep(obj):  # what the contract refuses (parse_event), the fast path refuses too
                rejects.append(Reject(i, "invalid", TOO_DEEP))
                continue
            event_type = obj.get("event_type")
            if type(event_type) is str and event_type in rules:
                group = groups.get(event_type)
                if group is None:
                    groups[event_type] = ([obj], [i])
                else:
                    group[0].append(obj)
                    group[1].append(i)
            else:
                slow.append((i, obj))
        for event_type, (events, indices) in groups.items():
            self._fast(rules[event_type], events, indices, out, slow)
        if slow:
            self._slow(slow, out)
            out.rejects.sort(key=lambda r: r.index)  # dead letters in the order of their offsets

    def _fast(
        self,
        rules: TableRules,
        events: list[dict[str, Any]],
        indices: list[int],
        out: Decoded,
        slow: list[tuple[int, dict[str, Any]]],
    ) -> None:
        good, bad = rules.split(events)
        if bad:
            slow.extend((indices[b], events[b]) for b in bad)
            dropped = set(bad)
            indices = [idx for j, idx in enumerate(indices) if j not in dropped]
        if not good:
            return
        try:
            columns = rules.flatten(good) or self._columnize[rules.table.name](good)
        except (AttributeError, TypeError):  # a shape the rules did not foresee: let pydantic judge each event
            slow.extend(zip(indices, good, strict=True))
            return
        failed = rules.check_columns(columns)
        if failed:
            slow.extend((indices[j], good[j]) for j in sorted(failed))
            columns = _without(columns, set(failed))
            indices = [idx for j, idx in enumerate(indices) if j not in failed]
        out.add(rules.table.name, columns, indices)

    def _slow(self, items: list[tuple[int, dict[str, Any]]], out: Decoded) -> None:
        by_table: dict[str, tuple[list[dict[str, Any]], list[int]]] = {}
        for index, obj in items:
            out.validated += 1
            try:
                event = parse_event(obj)
            except EventError as exc:
                out.rejects.append(Reject(index, reject_kind(exc.reason), exc.reason))
                continue
            if isinstance(event, UnknownEvent):
                table = self.raw_table.name
                source = scrub(UnknownEvent, event.model_dump(exclude={"payload"}))
                source["payload"] = obj
            else:
                table = self.schema.table_for(event.event_type).name
                source = scrub(type(event), event.model_dump())
            try:  # flattened alone first: whatever fails here is this message's, and goes no further
                self._columnize[table]([source])
            except Exception as exc:  # noqa: BLE001 - confined to this message
                out.rejects.append(
                    Reject(index, "invalid", f"cannot flatten the event into table {table}: {type(exc).__name__}")
                )
                continue
            bucket = by_table.setdefault(table, ([], []))
            bucket[0].append(source)
            bucket[1].append(index)
        for table, (sources, indices) in by_table.items():
            columns = self._columnize[table](sources)
            failed: dict[int, str] = {}
            for rule in self._ranges[table]:
                for j in rule.check(columns[rule.name]) or ():
                    failed.setdefault(j, rule.reason)
            if failed:
                for j, reason in sorted(failed.items()):
                    out.rejects.append(Reject(indices[j], "invalid", reason))
                columns = _without(columns, set(failed))
                indices = [idx for j, idx in enumerate(indices) if j not in failed]
            out.add(table, columns, indices)

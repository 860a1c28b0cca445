"""Event dict -> row dict for its table (``schemas/ddl.py``), fast.

``flatten(event, table)`` and ``columns(events, table)`` are the reference: they walk the ``ColumnSpec`` paths
one by one. ``flattener(table)`` and ``columnizer(table)`` return the fast path, a function generated once per table
(one dict display, no per-row loops over columns, no pydantic), which gives identical rows (tests/unit/test_rows.py).
``RowBuilder`` picks the table from ``event_type`` and sends unknown types to the raw table.

The generated code stays because it pays (bench/field_spec_codegen.py, docs/benchmarks.md): ``columnizer``, on the
collector's decode path for every table that is not flat and in the streaming sink, is faster than closures built
from the same specs and than ``columns``, and ``flattener`` faster than ``flatten``.

Both accept a decoded event dict, validated or not: a missing field, or ``null`` where the column is not
Nullable, takes the model's default (the zero of the column type for a required field: validation is the
caller's job); unknown fields are ignored; dict fields become compact JSON text with sorted keys where the
column is a String.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from sparktap.schemas.ddl import LATEST_VERSION, RAW_TABLE, ColumnSpec, TableSpec, table_for
from sparktap.schemas.events import EVENT_TYPES, Envelope

Row = dict[str, Any]
RowFunction = Callable[[Mapping[str, Any]], Row]
Columns = dict[str, list[Any]]
ColumnsFunction = Callable[[Sequence[Mapping[str, Any]]], Columns]

_EMPTY: Mapping[str, Any] = {}
_MISSING = object()
_ENVELOPE_FIELDS = tuple(Envelope.model_fields)


def json_text(value: Any) -> str:
    """Compact JSON with sorted keys: the text stored in String columns holding dicts."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


# ----------------------------------------------------------------------------------------------- reference


def _or_default(value: Any, col: ColumnSpec, default: Any) -> Any:
    if value is None:
        return None if col.nullable else _fresh(default)
    return value


def _fresh(value: Any) -> Any:
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


def _column_value(event: Mapping[str, Any], col: ColumnSpec) -> Any:
    if col.encoding in ("each", "each_json"):
        items = event.get(col.path[0]) or ()
        out = []
        for item in items:
            value = item.get(col.path[1])
            if value is None:
                out.append(_fresh(col.item_default))
            else:
                out.append(json_text(value) if col.encoding == "each_json" else value)
        return out
    node: Any = event
    for key in col.path[:-1]:
        node = node.get(key) or _EMPTY
    if col.path[-1] not in node:
        return _fresh(col.default)
    value = node[col.path[-1]]
    if col.encoding == "json" and value is not None:
        return json_text(value)
    return _or_default(value, col, col.default)


def flatten(event: Mapping[str, Any], table: TableSpec) -> Row:
    """The row of ``table`` for one event dict (reference implementation; see ``flattener`` for speed)."""
    return {col.name: _column_value(event, col) for col in table.columns}


def columns(events: Sequence[Mapping[str, Any]], table: TableSpec) -> Columns:
    """The columns of ``table`` for a batch of event dicts (reference implementation; see ``columnizer``)."""
    return {col.name: [_column_value(event, col) for event in events] for col in table.columns}


# ----------------------------------------------------------------------------------------------- fast path


class _Source:
    """Accumulates the source of a generated flattener and the constants it refers to."""

    def __init__(self) -> None:
        self.consts: dict[str, Any] = {"_json": json_text, "_EMPTY": _EMPTY, "_fresh": _fresh, "_MISSING": _MISSING}

    def literal(self, value: Any) -> str:
        """An expression producing ``value`` afresh (mutable defaults are never shared between rows)."""
        if value is None or isinstance(value, bool | int | float | str):
            return repr(value)
        if value == [] and isinstance(value, list):
            return "[]"
        if value == {} and isinstance(value, dict):
            return "{}"
        name = f"_c{len(self.consts)}"
        self.consts[name] = value
        return f"_fresh({name})"


def _value_expr(src: _Source, getter: str, key: str, col: ColumnSpec, default: Any, json: bool) -> str:
    fetched = f"{getter}({key!r})"
    use = "_json(_v)" if json else "_v"
    if col.nullable and not json:
        if default is None:
            return fetched
        # missing -> the default, an explicit null stays null (as in the reference)
        return f"(_v if (_v := {getter}({key!r}, _MISSING)) is not _MISSING else {src.literal(default)})"
    return f"({use} if (_v := {fetched}) is not None else {src.literal(default)})"


def _each_item(src: _Source, col: ColumnSpec) -> str:
    """The value of one item ``_it`` of an ``each`` column's list (JSON text for ``each_json``), else its default."""
    use = "_json(_v)" if col.encoding == "each_json" else "_v"
    return f"({use} if (_v := _it.get({col.path[1]!r})) is not None else {src.literal(col.item_default)})"


def _generate(table: TableSpec) -> tuple[str, dict[str, Any]]:
    src = _Source()
    prologue: list[str] = []
    parents: dict[tuple[str, ...], str] = {}
    items: list[str] = []
    for col in table.columns:
        if col.encoding in ("each", "each_json"):
            expr = f"[{_each_item(src, col)} for _it in (_g({col.path[0]!r}) or ())]"
        elif len(col.path) == 1:
            expr = _value_expr(src, "_g", col.path[0], col, col.default, col.encoding == "json")
        else:
            parent = col.path[:-1]
            if parent not in parents:
                var = f"_n{len(parents)}"
                parents[parent] = var
                chain = "e"
                for key in parent:
                    chain = f"({chain}.get({key!r}) or _EMPTY)"
                prologue.append(f"    {var} = {chain}")
            expr = _value_expr(src, f"{parents[parent]}.get", col.path[-1], col, col.default, col.encoding == "json")
        items.append(f"        {col.name!r}: {expr},")
    body = "\n".join(["def _flatten(e):", "    _g = e.get", *prologue, "    return {", *items, "    }", ""])
    return body, src.consts


def _generate_columnar(table: TableSpec) -> tuple[str, dict[str, Any]]:
    """Like ``_generate``, but one list comprehension per column over a batch of events."""
    src = _Source()
    items: list[str] = []
    for col in table.columns:
        if col.encoding in ("each", "each_json"):
            expr = f"[[{_each_item(src, col)} for _it in (e.get({col.path[0]!r}) or ())] for e in events]"
        else:
            chain = "e"
            for key in col.path[:-1]:
                chain = f"({chain}.get({key!r}) or _EMPTY)"
            value = _value_expr(src, f"{chain}.get", col.path[-1], col, col.default, col.encoding == "json")
            expr = f"[{value} for e in events]"
        items.append(f"        {col.name!r}: {expr},")
    body = "\n".join(["def _columns(events):", "    return {", *items, "    }", ""])
    return body, src.consts


_CACHE: dict[int, tuple[TableSpec, RowFunction]] = {}
_COLUMNAR_CACHE: dict[int, tuple[TableSpec, ColumnsFunction]] = {}


def flattener(table: TableSpec) -> RowFunction:
    """The fast row function of a table (generated once, then cached)."""
    cached = _CACHE.get(id(table))
    if cached is not None and cached[0] is table:
        return cached[1]
    source, namespace = _generate(table)
    # The source is generated from our own column names, quoted with repr(); no outside text reaches it.
    code = compile(source, f"<sparktap flattener {table.name}>", "exec")
    exec(code, namespace)  # noqa: S102
    function: RowFunction = namespace["_flatten"]
    _CACHE[id(table)] = (table, function)
    return function


def columnizer(table: TableSpec) -> ColumnsFunction:
    """The fast columnar function of a table: a batch of event dicts -> ``{column: [values…]}``, in column order,
    the same values ``flatten`` gives row by row. Feeds ``Storage.insert_columns`` without building row dicts."""
    cached = _COLUMNAR_CACHE.get(id(table))
    if cached is not None and cached[0] is table:
        return cached[1]
    source, namespace = _generate_columnar(table)
    code = compile(source, f"<sparktap columnizer {table.name}>", "exec")
    exec(code, namespace)  # noqa: S102 - generated from our own column names, see flattener()
    function: ColumnsFunction = namespace["_columns"]
    _COLUMNAR_CACHE[id(table)] = (table, function)
    return function


def flattener_source(table: TableSpec) -> str:
    """The generated source of a table's fast path (for debugging and tests)."""
    return _generate(table)[0]


# ----------------------------------------------------------------------------------------------- routing


class RowBuilder:
    """Routes event dicts to their tables and flattens them: ``table_name, row = builder.build(event)``."""

    def __init__(self, version: tuple[int, ...] = LATEST_VERSION) -> None:
        self.version = tuple(version)
        self._by_type: dict[str, tuple[str, RowFunction]] = {}
        for event_type in EVENT_TYPES:
            spec = table_for(event_type, self.version)
            self._by_type[event_type] = (spec.name, flattener(spec))
        self.raw_table = table_for(RAW_TABLE, self.version)
        self._raw = flattener(self.raw_table)

    def table(self, event_type: str) -> TableSpec:
        return table_for(event_type, self.version)

    def build(self, event: Mapping[str, Any]) -> tuple[str, Row]:
        """(table name, row) of one decoded event; an unknown ``event_type`` goes to the raw table whole."""
        route = self._by_type.get(event.get("event_type"))  # type: ignore[arg-type]
        if route is None:
            return self.raw_table.name, self.raw_row(event)
        return route[0], route[1](event)

    def raw_row(self, event: Mapping[str, Any]) -> Row:
        """The raw-table row of any event dict: its envelope plus the whole dict as ``payload``."""
        wrapped = {k: event[k] for k in _ENVELOPE_FIELDS if k in event}
        wrapped["payload"] = event
        return self._raw(wrapped)

    def group(self, events: Iterable[Mapping[str, Any]]) -> dict[str, list[Row]]:
        """Rows per table, in input order within each table."""
        out: dict[str, list[Row]] = {}
        for event in events:
            name, row = self.build(event)
            bucket = out.get(name)
            if bucket is None:
                out[name] = [row]
            else:
                bucket.append(row)
        return out

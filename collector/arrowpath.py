"""The Arrow path: ``task_end`` messages parsed straight into Arrow columns by the collector's C reader
(``_flatjson.c``), validated with vectorized compute, and handed to chDB as they are (no Python objects per value).

It is an optimisation of the fast path in ``decode.py`` for the event that makes up ~95 % of the volume, used for
the embedded chDB storage (which inserts Arrow). It accepts a strict subset of what the Python fast path accepts.
Per message, the C reader takes only (everything else goes to the Python path, which judges it on its own):

- one flat JSON object whose fields each appear once, no ``null`` in a known field (so an Arrow null always means "field
  missing", never an explicit null pydantic might reject), every required field present; unknown keys with scalar
  values (a newer minor version's fields) are skipped, as the model ignores them;
- values of the right JSON type: integers as plain JSON integers (not ``"5"``, ``true``, ``2.0`` or ``1e3``) within
  the model's bounds and the column type's range, booleans as ``true``/``false``, strings without escapes and in
  valid UTF-8, enumerations holding one of their values.

Then, per chunk and vectorized, the same contract checks as before run again over the Arrow columns (required
fields, bounds, enumerations): a failure there sends the chunk's rows back to the Python path in halves. Missing
optional fields get their defaults, as ``schemas.rows`` gives them (tests/unit/test_collector_decode.py checks the
rows are identical): an int or bool column's default is written by the C reader itself (no null, no ``fill_null``
pass: the listener leaves out every zero count), a string column's is filled here.
"""

from __future__ import annotations

import array
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparktap import native
from sparktap.collector.checks import TableRules, checkable
from sparktap.schemas.ddl import TableSpec
from sparktap.schemas.events import SCHEMA_VERSION
from sparktap.schemas.fields import INT64, FieldSpec, arrow_type_of, typed_scalar

if native.unavailable() is None:
    from sparktap.native._flatjson import Reader

    C_READER = True
else:  # switched off, or not compiled (no C compiler at install): decode.py takes the Python path
    C_READER = False

ARROW_TYPES = ("task_end",)
"""event types read through Arrow (the volume); the others take the Python fast path"""
MIN_SPLIT = 64
"""a chunk whose contract checks fail is halved down to this size; smaller pieces go to the Python path"""
_KIND_INT, _KIND_BOOL, _KIND_STR = 0, 1, 2


def string_array(values: Sequence[str]) -> pa.Array:
    """A string array built from its buffers (no pandas import: see ``typed_scalar``)."""
    encoded = [v.encode() for v in values]
    ends = [0]
    for item in encoded:
        ends.append(ends[-1] + len(item))
    offsets = b"".join(e.to_bytes(4, "little") for e in ends)
    return pa.Array.from_buffers(
        pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def is_arrow(values: Any) -> bool:
    return isinstance(values, pa.Array | pa.ChunkedArray)


def as_list(values: Any) -> list[Any]:
    """A column as a Python list, whichever form it has."""
    return values.to_pylist() if is_arrow(values) else list(values)


def concat(left: Any, right: Any) -> Any:
    """Two pieces of one column, in order: lists stay lists, anything with Arrow becomes a chunked array (no copy:
    a batch grows chunk by chunk, and copying the column at each chunk would cost O(rows²))."""
    if isinstance(left, list) and isinstance(right, list):
        left.extend(right)
        return left
    typ = left.type if is_arrow(left) else right.type
    parts = [p if is_arrow(p) else pa.array(p, type=typ) for p in (left, right)]
    return pa.chunked_array([c for p in parts for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])], typ)


def take(values: Any, keep: Sequence[int]) -> Any:
    """The values at ``keep`` (in order), whichever form the column has."""
    if is_arrow(values):  # the indices from their bytes: no pandas import (see typed_scalar)
        indices = array.array("q", keep)
        return values.take(pa.Array.from_buffers(pa.int64(), len(indices), [None, pa.py_buffer(indices.tobytes())]))
    return [values[i] for i in keep]


@functools.cache
def _choices(choices: tuple[str, ...], typ: pa.DataType) -> pa.Array:
    return string_array(choices).cast(typ)


_MATCHED: dict[str, set[str]] = {}
"""pattern -> values it matched already (each set bounded by ``_MATCHED_MAX``)"""
_MATCHED_MAX = 16_384
_MATCHED_DISTINCT = 1_024


def _all_match(distinct: pa.Array, pattern: str) -> bool:
    """Whether every value of ``distinct`` (a string array) matches ``pattern`` (RE2, as pyarrow's compute does).

    Identifiers repeat from chunk to chunk (clusters, applications, executors), and ``match_substring_regex``
    compiles its RE2 program on every call (more than the bounds and enumeration checks together cost): the values
    matched already are remembered per pattern, and only new ones go to the regular
    expression. A chunk with more than ``_MATCHED_DISTINCT`` distinct values is matched whole."""
    if len(distinct) > _MATCHED_DISTINCT:
        return bool(pc.all(pc.match_substring_regex(distinct, pattern)).as_py())
    known = _MATCHED.setdefault(pattern, set())
    new = [v for v in distinct.to_pylist() if v not in known]
    if not new:
        return True
    if not pc.all(pc.match_substring_regex(string_array(new), pattern)).as_py():
        return False
    if len(known) + len(new) > _MATCHED_MAX:
        known.clear()
    known.update(new)
    return True


class ArrowReader:
    """Reads messages of one flat table into validated Arrow columns."""

    def __init__(self, table: TableSpec, rules: TableRules, max_message_bytes: int) -> None:
        if rules.flat_defaults is None or table.event_type is None:
            raise ValueError(f"table {table.name} is not flat: the Arrow path cannot read it")
        unstored = sorted(set(table.model.model_fields) - {c.name for c in table.columns})
        if unstored:  # the reader skips unknown keys unchecked: every field the model checks must be a column
            raise ValueError(f"table {table.name} has no column for {unstored}: the Arrow path cannot read it")
        self.table = table
        self._columns: list[tuple[str, Any, int]] = []  # (name, Arrow type, C kind)
        self._checks: list[tuple[str, FieldSpec, bool, Any]] = []  # (name, field, required, fill scalar or None)
        spec = []
        for col in table.columns:
            assert col.field is not None  # noqa: S101 - every column of a flat table holds one field
            ftype = checkable(col.field)
            if col.name == "schema_version":
                ftype = dataclasses.replace(ftype, hi=SCHEMA_VERSION)
            required = ftype.required or col.name == "event_type"  # the discriminator: never defaulted
            typ = arrow_type_of(col.ch_type)
            lo, hi = INT64
            choices: tuple[bytes, ...] | None = None
            if pa.types.is_integer(typ) and ftype.kind == "int":
                kind = _KIND_INT
                lo, hi = ftype.int_range()
                lo, hi = max(lo, INT64[0]), min(hi, INT64[1])  # what the reader parses: UInt64 stops at 2**63 - 1
            elif pa.types.is_boolean(typ) and ftype.kind == "bool":
                kind = _KIND_BOOL
            elif pa.types.is_string(typ) and ftype.kind in ("str", "enum"):
                kind = _KIND_STR
                if ftype.kind == "enum":
                    choices = tuple(sorted(c.encode() for c in ftype.choices))
            else:
                raise ValueError(
                    f"column {table.name}.{col.name} ({col.ch_type}) is not an int, bool or string "
                    "column: the Arrow path cannot read it"
                )
            # an int or bool default within the checked bounds (``int_range`` holds the model's) is written by the
            # reader itself (no null, no fill_null pass): the listener leaves out every zero count, so most task_end
            # rows miss some; any other default is filled in Arrow (``_arrays``)
            c_fill = None
            if col.default is not None and kind != _KIND_STR and not required and lo <= int(col.default) <= hi:
                c_fill = int(col.default)
            fill = None if col.default is None or c_fill is not None else typed_scalar(col.default, typ)
            self._checks.append((col.name, ftype, required, fill))
            self._columns.append((col.name, typ, kind))
            spec.append((col.name.encode(), kind, required, lo, hi, choices, c_fill))
        self.spec = spec
        """the C reader's field list: (name, kind, required, lo, hi, choices, fill) per column (the fuzz target uses
        it)"""
        self._reader = Reader(spec, max_message_bytes)

    def read(self, values: Sequence[bytes | None]) -> tuple[list[tuple[dict[str, Any], list[int]]], list[int]]:
        """The messages this path takes, as pieces of (columns, positions in ``values``), and the positions of the
        messages it leaves to the Python path (in order)."""
        rows, raw, skipped = self._reader.read(values)
        if not skipped:
            taken = list(range(len(values)))
        else:
            left = set(skipped)
            taken = [i for i in range(len(values)) if i not in left]
        pieces: list[tuple[dict[str, Any], list[int]]] = []
        self._accept(values, taken, (rows, raw), pieces, skipped)
        skipped.sort()  # the halving may have added positions
        return pieces, skipped

    def _accept(
        self,
        values: Sequence[bytes | None],
        taken: list[int],
        parsed: tuple[int, list[Any]] | None,
        pieces: list[tuple[dict[str, Any], list[int]]],
        skipped: list[int],
    ) -> None:
        """Check ``taken`` (every message of it parses); when the checks fail, halve it down to ``MIN_SPLIT``, so
        one odd message sends only its neighbours to the Python path."""
        if not taken:
            return
        if parsed is None:
            rows, raw, again = self._reader.read([values[i] for i in taken])
            if again:  # cannot happen (the reader is deterministic); if it did, rows and positions would not match
                skipped.extend(taken)
                return
            parsed = (rows, raw)
        columns = self._arrays(*parsed)
        if columns is not None:
            pieces.append((columns, taken))
        elif len(taken) > MIN_SPLIT:
            middle = len(taken) // 2
            self._accept(values, taken[:middle], None, pieces, skipped)
            self._accept(values, taken[middle:], None, pieces, skipped)
        else:
            skipped.extend(taken)

    def _arrays(self, rows: int, raw: list[tuple[bytes, bytes | None, int, bytes]]) -> dict[str, Any] | None:
        """The C reader's buffers as checked Arrow columns with defaults filled, or None when a check fails."""
        columns: dict[str, Any] = {}
        for (name, typ, kind), (data, offsets, nulls, validity), (_, ftype, required, default) in zip(
            self._columns, raw, self._checks, strict=True
        ):
            valid = pa.py_buffer(validity) if nulls else None
            if kind == _KIND_STR:
                column = pa.Array.from_buffers(
                    pa.string(), rows, [valid, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
                )
            elif kind == _KIND_INT:
                if typ.bit_width == 64:  # int64 or uint64: the same bits, since the reader kept uint64 >= 0
                    column = pa.Array.from_buffers(typ, rows, [valid, pa.py_buffer(data)], null_count=nulls)
                else:
                    column = pa.Array.from_buffers(pa.int64(), rows, [valid, pa.py_buffer(data)], null_count=nulls)
                    column = column.cast(typ)  # within range: the reader checked it
            else:
                column = pa.Array.from_buffers(pa.uint8(), rows, [valid, pa.py_buffer(data)], null_count=nulls)
                column = column.cast(pa.bool_())
            checked = self._check(column, ftype, required)
            if checked is None:
                return None
            columns[name] = checked if default is None or not checked.null_count else pc.fill_null(checked, default)
        return columns

    @staticmethod
    def _check(column: pa.Array, ftype: FieldSpec, required: bool) -> pa.Array | None:
        if required and column.null_count:
            return None
        if column.null_count == len(column):
            return column
        if ftype.kind == "int" and (ftype.lo is not None or ftype.hi is not None):
            bounds: Mapping[str, Any] = pc.min_max(column).as_py()
            if ftype.lo is not None and bounds["min"] < ftype.lo:
                return None
            if ftype.hi is not None and bounds["max"] > ftype.hi:
                return None
        elif ftype.kind == "str" and ftype.pattern is not None:
            # identifiers repeat: each distinct value is matched once. RE2's ``$`` (not multi-line) is the end of
            # the text, as in pydantic: a trailing newline fails
            if not _all_match(pc.unique(column.drop_null()), ftype.pattern):
                return None
        elif ftype.kind == "enum":
            valid = pc.is_in(column.drop_null(), value_set=_choices(tuple(sorted(ftype.choices)), column.type))
            if not pc.all(valid).as_py():
                return None
        return column

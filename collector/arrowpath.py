"""The Arrow path: ``task_end`` messages parsed straight into Arrow columns by Arrow's JSON reader (C++), validated
with vectorized compute, and handed to chDB as they are (no Python objects per value at all).

It is an optimisation of the fast path in ``decode.py`` for the event that makes up ~95 % of the volume, used for
the embedded chDB storage (which inserts Arrow). It accepts a strict subset of what the Python fast path accepts:

- only messages that carry ``"event_type":"task_end"`` verbatim and no ``null`` anywhere (so an Arrow null
  always means "field missing", never an explicit null pydantic might reject), one row each (a message with a line
  break inside could only add rows, so the row count catches it);
- Arrow's reader with an explicit schema refuses a value of the wrong JSON type (``"5"``, ``true``, ``2.0`` and
  ``1e3`` for an integer), out of the column type's range, invalid UTF-8/surrogates and duplicate keys;
- then, vectorized: the top-level ``event_type`` is ``task_end`` on every row, required fields are present, the
  models' bounds hold (``seq >= 1``, ``schema_version`` a known major …), enumerations hold one of their values.

Any failure sends the whole chunk of candidates back to the Python path, which judges every message on its own.
Missing optional fields get their defaults, as ``schemas.rows`` gives them (tests/unit/test_collector_decode.py
checks the rows are identical).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from sparktap.collector.checks import FieldType, TableRules, field_type
from sparktap.collector.storage.embedded import arrow_type
from sparktap.schemas.ddl import TableSpec
from sparktap.schemas.events import SCHEMA_VERSION

ARROW_TYPES = ("task_end",)
"""event types read through Arrow (the volume); the others take the Python fast path"""


def is_arrow(values: Any) -> bool:
    return isinstance(values, pa.Array | pa.ChunkedArray)


def as_list(values: Any) -> list[Any]:
    """A column as a Python list, whichever form it has."""
    return values.to_pylist() if is_arrow(values) else list(values)


def concat(left: Any, right: Any) -> Any:
    """Two pieces of one column, in order: lists stay lists, anything with Arrow becomes one Arrow array."""
    if isinstance(left, list) and isinstance(right, list):
        left.extend(right)
        return left
    typ = left.type if is_arrow(left) else right.type
    parts = [p if is_arrow(p) else pa.array(p, type=typ) for p in (left, right)]
    return pa.concat_arrays([c for p in parts for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])])


def take(values: Any, keep: Sequence[int]) -> Any:
    """The values at ``keep`` (in order), whichever form the column has."""
    if is_arrow(values):
        return values.take(pa.array(keep, type=pa.int64()))
    return [values[i] for i in keep]


class ArrowReader:
    """Reads candidate messages of one flat table into validated Arrow columns."""

    def __init__(self, table: TableSpec, rules: TableRules) -> None:
        if rules.flat_defaults is None or table.event_type is None:
            raise ValueError(f"table {table.name} is not flat: the Arrow path cannot read it")
        self.table = table
        self.marker = f'"event_type":"{table.event_type}"'.encode()
        self.schema = pa.schema([pa.field(c.name, arrow_type(c.ch_type)) for c in table.columns])
        self._parse = pj.ParseOptions(explicit_schema=self.schema, unexpected_field_behavior="ignore")
        self._read = pj.ReadOptions(use_threads=False, block_size=1 << 24)
        self._checks: list[tuple[str, FieldType, bool, Any]] = []
        for col in table.columns:
            info = table.model.model_fields[col.name]
            ftype = field_type(info.annotation, info.metadata)
            if col.name == "schema_version":
                ftype = FieldType("int", ftype.nullable, ftype.lo, SCHEMA_VERSION)
            required = info.is_required() or col.name == "event_type"  # the discriminator: never defaulted
            self._checks.append((col.name, ftype, required, col.default))

    def candidate(self, value: bytes) -> bool:
        """Worth trying: the marker, and no ``null`` (an Arrow null must mean "missing"). Line breaks need no check:
        ``read`` requires exactly one row per message, and a message can only add rows, never remove one."""
        return self.marker in value and b"null" not in value

    def read(self, values: Sequence[bytes]) -> dict[str, Any] | None:
        """Columns of ``values`` (one row each, in order), or None when anything is off (use the Python path)."""
        try:
            table = pj.read_json(io.BytesIO(b"\n".join(values)), read_options=self._read,
                                 parse_options=self._parse)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
            return None
        if table.num_rows != len(values):
            return None
        columns: dict[str, Any] = {}
        for name, ftype, required, default in self._checks:
            column = table.column(name).combine_chunks()
            checked = self._check(column, ftype, required)
            if checked is None:
                return None
            columns[name] = checked if default is None or not checked.null_count else pc.fill_null(checked, default)
        return columns

    @staticmethod
    def _check(column: pa.Array, ftype: FieldType, required: bool) -> pa.Array | None:
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
        elif ftype.kind == "enum":
            valid = pc.is_in(column.drop_null(), value_set=pa.array(sorted(ftype.choices), type=column.type))
            if not pc.all(valid).as_py():
                return None
        elif ftype.kind not in ("int", "str", "bool"):
            return None  # not a flat table after all
        return column

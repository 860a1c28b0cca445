"""Fast validation of decoded events, compiled once per table from the field specs (``schemas/fields.py``) and the
table layout.

The per-message pydantic model is the contract (``schemas.parse.parse_event``). Running it on every message costs
more than the rest of the pipeline together, so the collector checks a batch *column by column* instead and sends
only the events that fail here through pydantic (which may still accept them after lax coercion, e.g. ``"5"`` for
an int, or reject them with the reason that goes to the dead-letter topic).

What the fast path accepts is a strict subset of what pydantic accepts, and the row built from it is the row the
validated model would give (proved by tests/unit/test_collector_decode.py against ``parse_event`` on thousands of
mutated events). Per event:

- every required field is present and no field pydantic would reject as ``null`` is ``null`` (nested models too);
- nested models (``Quantiles``, ``LocalityHistogram``) are JSON objects, dict fields are objects of the right
  value type, and lists hold the right element type;

per column (C-level ``set(map(type, column))``, ``min`` and ``max`` over the whole batch):

- integers are exactly ``int`` (not ``bool``, float or string) inside the model's bounds (``ge``…) *and* the column
  type's range (``Int64``/``UInt64``: pydantic accepts any size, ClickHouse does not);
- strings are ``str``, booleans ``bool``, enumerations (``Literal``) one of their values;
- a string a user controls (a name or free text: ``FieldSpec.text``) is clean by the listener's own path (capped,
  no control character, nothing the redaction patterns mask: ``collector/scrub.py``, one check per distinct value);
  an event holding one that is not goes to the slow path, where it is cleaned, never dropped;
- ``schema_version`` is a major this reader understands.

A table whose model has something this module does not know how to check cheaply (a list of models, a float, a
custom validator) is marked ``fast=False``: all its events go through pydantic. Pydantic-accepted rows are then
checked against the column ranges as well, so nothing out of range ever reaches ClickHouse.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from sparktap.collector.scrub import bad_values, clean_enough, clean_keys_enough
from sparktap.schemas.ddl import ColumnSpec, TableSpec
from sparktap.schemas.events import SCHEMA_VERSION
from sparktap.schemas.fields import INT64, FieldSpec, fields_of
from sparktap.schemas.types import IDENTIFIER_RULE, UserText

E = TypeVar("E", bound=Mapping[str, Any])
"""an event as decoded from JSON (a dict), or any mapping of its fields"""

_NONE = type(None)
_INT: set[type] = {int}
_STR: set[type] = {str}
_BOOL: set[type] = {bool}

BadIndices = list[int] | None
"""Indices of the values that failed a check, or None when all passed (the common case: no list is built)."""


class Unsupported(Exception):  # noqa: N818 - internal signal: compile_rules and range_rules catch it
    """A field this module cannot check cheaply: its table goes through pydantic."""


# ----------------------------------------------------------------------------------------------- field specs


def checkable(spec: FieldSpec) -> FieldSpec:
    """The spec, when this module can check its values cheaply; Unsupported (with the reason) when it cannot."""
    if spec.unchecked:
        raise Unsupported(f"constraint {spec.unchecked[0]!r}")
    if spec.kind == "float":
        raise Unsupported(f"annotation {spec.annotation!r}")
    if spec.kind in ("list", "dict"):
        assert spec.item is not None  # noqa: S101 - set for lists and dicts
        item = checkable(spec.item) if spec.item.kind != "model" else spec.item
        allowed = ("int", "str", "bool") if spec.kind == "list" else ("int", "str", "bool", "any")
        if item.kind not in allowed or item.nullable:
            raise Unsupported(f"{spec.kind} of {item.annotation!r}")
    return spec


# ----------------------------------------------------------------------------------------------- value checks


def value_ok(value: Any, ftype: FieldSpec, lo: int = INT64[0], hi: int = INT64[1]) -> bool:
    """Whether one present value passes the fast check (the per-element fallback of the column checks)."""
    if value is None:
        return ftype.nullable
    kind = ftype.kind
    if kind == "int":
        return type(value) is int and lo <= value <= hi
    if kind == "str":
        if type(value) is not str:
            return False
        if ftype.text is not None:
            return clean_enough(value, ftype.text)
        return ftype.pattern is None or _matcher(ftype.pattern)(value) is not None
    if kind == "bool":
        return type(value) is bool
    if kind == "enum":
        return type(value) is str and value in ftype.choices
    if kind == "any":
        return True
    if kind == "list":
        assert ftype.item is not None  # noqa: S101 - set for lists
        return type(value) is list and all(value_ok(v, ftype.item, *INT64) for v in value)
    if kind == "dict":
        assert ftype.item is not None  # noqa: S101 - set for dicts
        # a user's tag or property name is free text too (the slow path's scrub cleans keys: collector/scrub.py)
        return (
            type(value) is dict
            and clean_keys_enough(value)
            and all(value_ok(v, ftype.item, *INT64) for v in value.values())
        )
    return False


def _int_column(lo: int, hi: int, nullable: bool) -> Callable[[list[Any]], BadIndices]:
    def check(col: list[Any]) -> BadIndices:
        values = [v for v in col if v is not None] if nullable else col
        if not values:
            return None
        if set(map(type, values)) == _INT and min(values) >= lo and max(values) <= hi:
            return None
        return [i for i, v in enumerate(col) if not ((v is None and nullable) or (type(v) is int and lo <= v <= hi))]

    return check


def _typed_column(allowed: set[type]) -> Callable[[list[Any]], BadIndices]:
    def check(col: list[Any]) -> BadIndices:
        if set(map(type, col)) <= allowed:
            return None
        return [i for i, v in enumerate(col) if type(v) not in allowed]

    return check


@functools.cache
def _matcher(pattern: str) -> Callable[[str], re.Match[str] | None]:
    """The whole-string matcher of a field's pattern (``fullmatch``: ``$`` must not accept a trailing newline)."""
    return re.compile(pattern).fullmatch


def _pattern_column(pattern: str, nullable: bool) -> Callable[[list[Any]], BadIndices]:
    """Strings matching ``pattern``: each distinct value is matched once (identifiers repeat across a batch)."""
    match = _matcher(pattern)

    def ok(v: Any) -> bool:
        return (type(v) is str and match(v) is not None) or (nullable and v is None)

    def check(col: list[Any]) -> BadIndices:
        try:
            distinct = set(col)
        except TypeError:  # an unhashable value (a list, an object): check each one
            bad = [i for i, v in enumerate(col) if not ok(v)]
            return bad or None
        bad_values = {v for v in distinct if not ok(v)}
        if not bad_values:
            return None
        return [i for i, v in enumerate(col) if type(v) is not str or v in bad_values]

    return check


def _text_column(spec: UserText, nullable: bool) -> Callable[[list[Any]], BadIndices]:
    """Strings a user controls, each distinct value clean (``collector/scrub.py``; names repeat across a batch)."""

    def ok(v: Any) -> bool:
        return (type(v) is str and clean_enough(v, spec)) or (nullable and v is None)

    def check(col: list[Any]) -> BadIndices:
        try:
            distinct = set(col)
        except TypeError:  # an unhashable value (a list, an object): check each one
            bad = [i for i, v in enumerate(col) if not ok(v)]
            return bad or None
        found = bad_values(distinct, spec)
        if not found and (nullable or None not in distinct):
            return None
        return [i for i, v in enumerate(col) if not ok(v)]

    return check


def pattern_reason(where: str, pattern: str) -> str:
    """The dead-letter reason of a string failing its field's pattern (the identifier rule, in words)."""
    if pattern.lstrip("^").startswith("(?:"):
        return f"invalid event: {where}: not an identifier or empty ({IDENTIFIER_RULE})"
    return f"invalid event: {where}: not an identifier ({IDENTIFIER_RULE})"


def _enum_column(choices: frozenset[str], nullable: bool) -> Callable[[list[Any]], BadIndices]:
    allowed = set(choices) | ({None} if nullable else set())

    def check(col: list[Any]) -> BadIndices:
        if set(map(type, col)) <= ({str, _NONE} if nullable else _STR) and set(col) <= allowed:
            return None
        return [i for i, v in enumerate(col) if not ((v is None and nullable) or (type(v) is str and v in choices))]

    return check


def _each_column(ftype: FieldSpec, lo: int, hi: int) -> Callable[[list[Any]], BadIndices]:
    def check(col: list[Any]) -> BadIndices:
        bad = [i for i, v in enumerate(col) if not value_ok(v, ftype, lo, hi)]
        return bad or None

    return check


# ----------------------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class ObjectRule:
    """Presence and null rules of one JSON object level (the event, or a nested model inside it)."""

    required: frozenset[str]
    nullable: tuple[str, ...]
    nested: tuple[tuple[str, bool, ObjectRule], ...] = ()

    def nulls_ok(self, obj: Mapping[str, Any]) -> bool:
        """Every null is one of the nullable fields (an unknown field's null sends the event to pydantic too)."""
        return list(obj.values()).count(None) == sum(obj.get(k, 0) is None for k in self.nullable)

    def ok(self, obj: Mapping[str, Any]) -> bool:
        if not (obj.keys() >= self.required):
            return False
        if None in obj.values() and not self.nulls_ok(obj):
            return False
        for key, required, rule in self.nested:
            value = obj.get(key)
            if value is None:
                if required:
                    return False
                continue
            if type(value) is not dict or not rule.ok(value):
                return False
        return True

    def bad(self, events: Sequence[Mapping[str, Any]]) -> list[int]:
        """Indices of the events failing ``ok()``. Interpreted: the ``exec``-generated comprehension this replaced
        was no faster (bench/field_spec_codegen.py: 1.00x on task_end, 0.91x on stage_completed; docs/benchmarks.md).
        A level without nested models is checked inline, with no call per event."""
        required, nulls_ok = self.required, self.nulls_ok
        if self.nested:
            ok = self.ok
            return [i for i, e in enumerate(events) if not ok(e)]
        return [
            i for i, e in enumerate(events) if not (e.keys() >= required and (None not in e.values() or nulls_ok(e)))
        ]


@dataclass(frozen=True)
class ColumnRule:
    """A check over one inserted column (``columnizer`` output)."""

    name: str
    check: Callable[[list[Any]], BadIndices]
    reason: str


@dataclass(frozen=True)
class SourceRule:
    """A check over the raw values of a top-level field whose column holds a transformed value (dicts as JSON)."""

    key: str
    ftype: FieldSpec
    reason: str


@dataclass(frozen=True)
class TableRules:
    """Everything the fast path checks for one table. ``fast=False``: every event goes through pydantic."""

    table: TableSpec
    fast: bool
    objects: ObjectRule
    columns: tuple[ColumnRule, ...]
    sources: tuple[SourceRule, ...]
    why_slow: str = ""
    flat_defaults: dict[str, Any] | None = None
    """for a table of top-level scalar columns only: column -> value when the field is missing (see ``flatten``)"""

    def __post_init__(self) -> None:
        if self.flat_defaults is not None:
            object.__setattr__(self, "_getter", operator.itemgetter(*self.flat_defaults))

    def flatten(self, events: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]] | None:
        """Columns of events that passed ``split``, for flat tables (None: use ``schemas.rows.columnizer``).

        After ``split`` a field is either present with its value or missing (nulls only where the column is
        Nullable), so ``{**defaults, **event}`` holds exactly the row ``columnizer`` builds; the merge, the
        itemgetter and the transposition all run in C, about 4x faster than the generated comprehensions."""
        defaults = self.flat_defaults
        if defaults is None:
            return None
        if not events:
            return {name: [] for name in defaults}
        getter = self._getter  # type: ignore[attr-defined]
        rows = [getter({**defaults, **e}) for e in events]
        return dict(zip(defaults, map(list, zip(*rows, strict=True)), strict=True))

    def split(self, events: Sequence[E]) -> tuple[list[E], list[int]]:
        """(events passing the per-event and source rules, indices of the others)."""
        bad = self.objects.bad(events) if self.fast else []
        for rule in self.sources:
            for i, e in enumerate(events):
                value = e.get(rule.key)
                if value is not None and not value_ok(value, rule.ftype):
                    bad.append(i)
        if not bad:
            return list(events), []
        drop = set(bad)
        return [e for i, e in enumerate(events) if i not in drop], sorted(drop)

    def check_columns(self, columns: Mapping[str, list[Any]]) -> dict[int, str]:
        """Row index -> reason, for the rows whose values fail a column rule (empty: all passed)."""
        bad: dict[int, str] = {}
        for rule in self.columns:
            found = rule.check(columns[rule.name])
            if found:
                for i in found:
                    bad.setdefault(i, rule.reason)
        return bad


def _model_has_validators(model: type[BaseModel]) -> bool:
    decorators = model.__pydantic_decorators__
    return bool(
        decorators.field_validators
        or decorators.model_validators
        or decorators.validators
        or decorators.root_validators
    )


def _object_rule(model: type[BaseModel]) -> ObjectRule:
    if _model_has_validators(model):
        raise Unsupported(f"{model.__name__} has custom validators")
    required: set[str] = set()
    nullable: list[str] = []
    nested: list[tuple[str, bool, ObjectRule]] = []
    for spec in fields_of(model):
        if spec.alias and spec.alias != spec.name:
            raise Unsupported(f"{model.__name__}.{spec.name} has an alias")
        checkable(spec)
        if spec.required:
            required.add(spec.name)
        if spec.nullable:
            nullable.append(spec.name)
        if spec.kind == "model":
            assert spec.model is not None  # noqa: S101 - set for nested models
            nested.append((spec.name, spec.required, _object_rule(spec.model)))
    return ObjectRule(frozenset(required), tuple(nullable), tuple(nested))


def _field_of(col: ColumnSpec, known_major: bool = True) -> FieldSpec:
    """The checkable spec of a column's field (``known_major``: ``schema_version`` is a major this reader knows)."""
    if col.field is None:
        raise Unsupported(f"column {col.name} has no field spec")
    spec = checkable(col.field)
    if known_major and col.path == ("schema_version",):
        spec = dataclasses.replace(spec, hi=SCHEMA_VERSION)
    return spec


def _column_rule(col: ColumnSpec, ftype: FieldSpec) -> ColumnRule | SourceRule | None:
    where = ".".join(col.path)
    if col.encoding != "value":
        if len(col.path) == 1 and col.encoding == "json" and ftype.kind in ("dict", "any"):
            return SourceRule(col.path[0], ftype, f"invalid event: {where}: not an object of the expected values")
        raise Unsupported(f"column {col.name} encoded as {col.encoding}")
    if ftype.kind == "int":
        lo, hi = ftype.int_range()
        return ColumnRule(
            col.name, _int_column(lo, hi, ftype.nullable), f"invalid event: {where}: not an integer in [{lo}, {hi}]"
        )
    if ftype.kind == "str" and ftype.pattern is not None:
        return ColumnRule(
            col.name, _pattern_column(ftype.pattern, ftype.nullable), pattern_reason(where, ftype.pattern)
        )
    if ftype.kind == "str" and ftype.text is not None:
        return ColumnRule(
            col.name,
            _text_column(ftype.text, ftype.nullable),
            f"invalid event: {where}: not a string, or not clean ({ftype.text.kind}: collector/scrub.py)",
        )
    if ftype.kind == "str":
        return ColumnRule(
            col.name, _typed_column({str, _NONE} if ftype.nullable else _STR), f"invalid event: {where}: not a string"
        )
    if ftype.kind == "bool":
        return ColumnRule(
            col.name,
            _typed_column({bool, _NONE} if ftype.nullable else _BOOL),
            f"invalid event: {where}: not a boolean",
        )
    if ftype.kind == "enum":
        return ColumnRule(
            col.name,
            _enum_column(ftype.choices, ftype.nullable),
            f"invalid event: {where}: not one of {sorted(ftype.choices)}",
        )
    if ftype.kind in ("list", "dict") and ftype.item is not None:
        container = "a list" if ftype.kind == "list" else "an object"
        if ftype.item.kind == "int":
            lo, hi = ftype.item.int_range()
            what = f"{container} of integers in [{lo}, {hi}]"
        else:
            lo, hi = INT64
            what = f"{container} of {ftype.item.kind} values"
        return ColumnRule(col.name, _each_column(ftype, lo, hi), f"invalid event: {where}: not {what}")
    raise Unsupported(f"column {col.name} of kind {ftype.kind}")


def compile_rules(table: TableSpec) -> TableRules:
    """The fast-path rules of a table (``fast=False`` with the reason when some field cannot be checked cheaply)."""
    model = table.model
    try:
        objects = _object_rule(model)
        columns: list[ColumnRule] = []
        sources: list[SourceRule] = []
        for col in table.columns:
            if col.path == ("event_type",):
                continue  # the batch is grouped by event_type: it is the table's own type
            rule = _column_rule(col, _field_of(col))
            if isinstance(rule, ColumnRule):
                columns.append(rule)
            elif isinstance(rule, SourceRule):
                sources.append(rule)
    except (Unsupported, KeyError) as exc:
        empty = ObjectRule(frozenset(), ())
        return TableRules(table, False, empty, (), (), why_slow=str(exc))
    flat = all(
        len(c.path) == 1
        and c.encoding == "value"
        and isinstance(c.default, str | int | bool | None)
        and not c.ch_type.startswith(("Array(", "Map("))
        for c in table.columns
    )
    defaults = {c.name: c.default for c in table.columns} if flat else None
    if defaults is not None and any(c.name != c.path[0] for c in table.columns):
        defaults = None  # the merge looks columns up by field name
    return TableRules(table, True, objects, tuple(columns), tuple(sources), flat_defaults=defaults)


def range_rules(table: TableSpec) -> tuple[ColumnRule, ...]:
    """Column range checks for rows built from pydantic-validated events (any table, fast or not).

    Pydantic checks types and the model's bounds, but not the column type's range: an integer beyond Int64/UInt64
    would make the whole insert fail. Only plain-valued integer columns need it (arrays are Int64 in both).
    """
    rules: list[ColumnRule] = []
    for col in table.columns:
        if col.encoding != "value":
            continue
        try:
            ftype = _field_of(col, known_major=False)
        except Unsupported:
            continue
        if ftype.kind == "int" or (ftype.kind == "list" and ftype.item is not None and ftype.item.kind == "int"):
            rule = _column_rule(col, ftype)
            if isinstance(rule, ColumnRule):
                rules.append(rule)
    return tuple(rules)

"""One spec per event field: the event contract read once from the pydantic models, for every reader of it.

``fields_of(model)`` gives a ``FieldSpec`` per field, in declaration order: its ``kind`` (``int``, ``float``,
``str``, ``bool``, ``enum``, ``model``, ``list``, ``dict``, ``any``), whether it is ``nullable`` (``X | None``) and
``required``, the model's ``default``, integer bounds (``lo``/``hi`` from ``ge``/``gt``/``le``/``lt``), the
enumeration's ``choices`` (a ``Literal`` of strings), the ``Column`` hint (``schemas/types.py``), the nested
model's fields (``children``) or the element of a list / the value of a dict (``item``).

Each spec maps itself to the other type systems, in this module only:

- ``clickhouse_type(version)``: the column type for a server version (``Nullable``, ``LowCardinality`` where the
  server has it, ``Array``, ``Map`` from 22.1, else compact JSON text in a ``String``);
- ``arrow_type(version)``: the pyarrow type that column is inserted from (``arrow_type_of``, the one ClickHouse ->
  Arrow mapping, used by the chDB backend for the types its server reports);
- ``spark_type()``: the Spark SQL type of the streaming source's typed columns;
- ``int_range()``: the model's bounds intersected with the column type's range (pydantic accepts any size of int,
  ClickHouse does not).

Readers: ``schemas/ddl.py`` (columns and their types), ``collector/checks.py`` and ``collector/arrowpath.py`` (the
fast validation), ``collector/streaming/parser.py`` (the Spark schema), ``store/embedded.py`` (Arrow
types). pyarrow and pyspark are imported only by the methods that return their types.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from sparktap.schemas.types import TEXT, Column, UserText

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType

Kind = Literal["int", "float", "str", "bool", "enum", "model", "list", "dict", "any"]

INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)
INT_RANGES = {
    "Int64": INT64, "UInt64": UINT64, "Int32": (-(2**31), 2**31 - 1), "UInt32": (0, 2**32 - 1),
    "Int16": (-(2**15), 2**15 - 1), "UInt16": (0, 2**16 - 1), "Int8": (-(2**7), 2**7 - 1), "UInt8": (0, 2**8 - 1),
}  # fmt: skip
"""value range of each ClickHouse integer type"""
_LOW_CARDINALITY = Column("String", low_cardinality=True)


@dataclass(frozen=True)
class Features:
    """What a server version supports."""

    low_cardinality: bool
    datetime64: bool
    codecs: bool
    ttl: bool
    map: bool

    @classmethod
    def for_version(cls, version: tuple[int, ...]) -> Features:
        modern = tuple(version[:2]) >= (20, 5)  # DateTime64 came in 20.1, fromUnixTimestamp64Milli in 20.5
        return cls(modern, modern, modern, modern, map=tuple(version[:2]) >= (22, 1))


@dataclass(frozen=True)
class FieldSpec:
    """One field of an event model (or the element of a list / the value of a dict field: ``name`` is then "")."""

    name: str
    kind: Kind
    nullable: bool = False
    required: bool = False
    default: Any = field(default=None, compare=False)
    """the model's default (a factory called) when not ``required``"""
    lo: int | None = None
    hi: int | None = None
    column: Column | None = None
    choices: frozenset[str] = frozenset()
    model: type[BaseModel] | None = None
    item: FieldSpec | None = None
    alias: str | None = None
    pattern: str | None = None
    """a string field's regular expression (``Field(pattern=…)``: the identifiers of ``schemas/types.py``)"""
    text: UserText | None = None
    """a string a user controls (``schemas/types.py``): ``Label`` fields are names, every other plain ``str`` (a
    field, a list's element, a dict's value) free text; None for identifiers (a pattern), enumerations, non-strings"""
    unchecked: tuple[Any, ...] = ()
    """constraints beyond bounds (``multiple_of``, lengths …): pydantic checks them, the fast path cannot"""
    annotation: Any = field(default=None, compare=False, repr=False)
    """the annotation the spec was read from (for messages)"""

    @property
    def children(self) -> tuple[FieldSpec, ...]:
        """The fields of a nested model (empty for other kinds)."""
        return fields_of(self.model) if self.model is not None else ()

    # ------------------------------------------------------------------------------------------- ClickHouse

    def stored_as_json(self, version: tuple[int, ...] | Features) -> bool:
        """A dict kept as compact JSON text (sorted keys) in a String: ``dict[str, Any]``, or no Map on the server."""
        return self.kind == "dict" and (self.item is None or self.item.kind == "any" or not _features(version).map)

    def clickhouse_type(self, version: tuple[int, ...] | Features) -> str:
        """The column type of this field on a server version (a nested model has none: it is flattened)."""
        features = _features(version)
        if self.kind == "list" and self.item is not None and self.item.kind != "model":
            base = f"Array({self.item.clickhouse_type(features)})"
        elif self.kind == "dict":
            if self.stored_as_json(features):
                return "String"
            assert self.item is not None  # noqa: S101 - set for every dict
            base = f"Map(String, {self.item.clickhouse_type(features)})"
        else:
            base = self._scalar_type(features)
        return nullable_type(base) if self.nullable and self.kind not in ("list", "dict") else base

    def _scalar_type(self, features: Features) -> str:
        if self.column is not None:
            if self.column.low_cardinality:
                return "LowCardinality(String)" if features.low_cardinality else "String"
            return self.column.type
        if self.kind == "enum":
            return "LowCardinality(String)" if features.low_cardinality else "String"
        scalar = {"bool": "UInt8", "int": "Int64", "float": "Float64", "str": "String"}.get(self.kind)
        if scalar is None:
            raise TypeError(f"no ClickHouse type for {self.annotation!r}")
        return scalar

    def column_zero(self) -> Any:
        """The value of the (non-Nullable) column when a required field is missing: the zero of its type."""
        if self.column is not None:
            return "" if self.column.type == "String" else 0
        return {"bool": False, "int": 0, "float": 0.0}.get(self.kind, "")

    def int_range(self) -> tuple[int, int]:
        """The accepted integers: the model's bounds intersected with the column type's range."""
        col_lo, col_hi = INT_RANGES.get(self.column.type if self.column is not None else "Int64", INT64)
        lo = col_lo if self.lo is None else max(col_lo, self.lo)
        hi = col_hi if self.hi is None else min(col_hi, self.hi)
        return lo, hi

    # ------------------------------------------------------------------------------------------- Arrow, Spark

    def arrow_type(self, version: tuple[int, ...] | Features) -> Any:
        """The pyarrow type the column of this field is inserted from on a server version."""
        return arrow_type_of(self.clickhouse_type(version))

    def spark_type(self) -> DataType:
        """The Spark SQL type of this field (nullable or not: Spark's struct fields are all nullable here)."""
        from pyspark.sql import types as T  # noqa: N812 - the conventional alias

        simple = {"bool": T.BooleanType, "int": T.LongType, "float": T.DoubleType, "str": T.StringType,
                  "enum": T.StringType, "any": T.StringType}  # fmt: skip
        if self.kind in simple:
            return simple[self.kind]()
        if self.kind == "model":
            return T.StructType([T.StructField(c.name, c.spark_type()) for c in self.children])
        assert self.item is not None  # noqa: S101 - set for lists and dicts
        if self.kind == "list":
            return T.ArrayType(self.item.spark_type())
        if self.item.kind == "any":
            return T.StringType()  # arbitrary JSON: compact text
        return T.MapType(T.StringType(), self.item.spark_type())


def _features(version: tuple[int, ...] | Features) -> Features:
    return version if isinstance(version, Features) else Features.for_version(tuple(version))


def nullable_type(ch_type: str) -> str:
    """``Nullable(T)``; inside ``LowCardinality`` where the type has it."""
    if ch_type.startswith("LowCardinality("):
        return f"LowCardinality(Nullable({ch_type[len('LowCardinality(') : -1]}))"
    return f"Nullable({ch_type})"


# ----------------------------------------------------------------------------------------------- reading models


@dataclass
class _Constraints:
    lo: int | None = None
    hi: int | None = None
    column: Column | None = None
    pattern: str | None = None
    text: UserText | None = None
    unchecked: list[Any] = field(default_factory=list)


def _is_pattern(item: Any) -> bool:
    """pydantic's ``Field(pattern=…)`` metadata (``_PydanticGeneralMetadata`` holding only ``pattern``)."""
    return isinstance(item, annotated_types.BaseMetadata) and set(getattr(item, "__dict__", {})) == {"pattern"}


def _constraints(metadata: typing.Iterable[Any], out: _Constraints | None = None) -> _Constraints:
    out = _Constraints() if out is None else out
    for item in metadata:
        if isinstance(item, FieldInfo):
            _constraints(item.metadata, out)
        elif _is_pattern(item):
            out.pattern = str(item.pattern)
        elif isinstance(item, Column):
            out.column = item
        elif isinstance(item, UserText):
            out.text = item
        elif isinstance(item, annotated_types.Ge):
            out.lo = int(item.ge)  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Gt):
            out.lo = int(item.gt) + 1  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Le):
            out.hi = int(item.le)  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Lt):
            out.hi = int(item.lt) - 1  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.BaseMetadata):
            out.unchecked.append(item)
    return out


def field_spec(
    name: str,
    annotation: Any,
    metadata: typing.Iterable[Any] = (),
    *,
    required: bool = False,
    default: Any = None,
    alias: str | None = None,
) -> FieldSpec:
    """The spec of one annotation (with its pydantic metadata); TypeError for what no column can hold."""
    nullable = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(annotation)) != 2:
            raise TypeError(f"unsupported union {annotation!r}: only X | None maps to a column")
        annotation, nullable = args[0], True
    meta = list(metadata)
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = typing.get_args(annotation)
        meta.extend(extra)
    found = _constraints(meta)
    lo, hi, column, unchecked = found.lo, found.hi, found.column, tuple(found.unchecked)
    if found.pattern is not None and annotation is not str:
        unchecked += (found.pattern,)  # a pattern on something other than a plain string: pydantic's to check
    if name == "event_type" and column is None:
        column = _LOW_CARDINALITY  # the discriminator: a handful of values
    common: dict[str, Any] = {
        "nullable": nullable,
        "required": required,
        "default": default,
        "alias": alias,
        "unchecked": unchecked,
        "annotation": annotation,
    }
    origin = typing.get_origin(annotation)
    simple: dict[Any, Kind] = {bool: "bool", int: "int", float: "float", str: "str", Any: "any"}
    if annotation in simple:
        kind = simple[annotation]
        return FieldSpec(
            name,
            kind,
            lo=lo if kind == "int" else None,
            hi=hi if kind == "int" else None,
            column=column,
            pattern=found.pattern if kind == "str" else None,
            text=(found.text or TEXT) if kind == "str" and found.pattern is None and name != "event_type" else None,
            **common,
        )
    if origin is Literal and all(isinstance(c, str) for c in typing.get_args(annotation)):
        return FieldSpec(name, "enum", column=column, choices=frozenset(typing.get_args(annotation)), **common)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return FieldSpec(name, "model", model=annotation, **common)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return FieldSpec(name, "list", item=field_spec("", item), **common)
    if origin is dict:
        key, value = typing.get_args(annotation)
        if key is not str:
            raise TypeError(f"unsupported dict key {key!r}: only dict[str, V] maps to a column")
        return FieldSpec(name, "dict", item=field_spec("", value), **common)
    raise TypeError(f"no column type for {annotation!r}")


@functools.cache
def fields_of(model: type[BaseModel]) -> tuple[FieldSpec, ...]:
    """The specs of a model's fields, in declaration order (read once per model)."""
    out = []
    for name, info in model.model_fields.items():
        required = info.is_required()
        default = None if required else info.get_default(call_default_factory=True)
        out.append(
            field_spec(name, info.annotation, info.metadata, required=required, default=default, alias=info.alias)
        )
    return tuple(out)


def spec_at(model: type[BaseModel], path: tuple[str, ...]) -> FieldSpec:
    """The spec of the field at a key path (``("task_duration_ms", "p50")``); KeyError when there is none."""
    specs = {s.name: s for s in fields_of(model)}
    spec = specs[path[0]]
    if len(path) == 1:
        return spec
    if spec.model is None:
        raise KeyError(path)
    return spec_at(spec.model, path[1:])


# ----------------------------------------------------------------------------------------------- Arrow types

_WRAPPER_RE = re.compile(r"^(LowCardinality|Nullable)\((.*)\)$")


def unwrap(ch_type: str) -> str:
    """The type inside ``LowCardinality(...)`` / ``Nullable(...)``."""
    while match := _WRAPPER_RE.match(ch_type):
        ch_type = match.group(2)
    return ch_type


def split_args(inner: str) -> list[str]:
    """Top-level comma-separated arguments of a type (``String, Array(Int64)``)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(inner[start:i].strip())
            start = i + 1
    out.append(inner[start:].strip())
    return out


def arrow_type_of(ch_type: str) -> Any:
    """The pyarrow type a ClickHouse column is inserted from (the types ``clickhouse_type`` renders, and the
    others a server reports for its tables)."""
    import pyarrow as pa

    base = unwrap(ch_type)
    simple = {
        "Int8": pa.int8(), "Int16": pa.int16(), "Int32": pa.int32(), "Int64": pa.int64(),
        "UInt16": pa.uint16(), "UInt32": pa.uint32(), "UInt64": pa.uint64(),
        "UInt8": pa.bool_(), "Bool": pa.bool_(),  # UInt8 columns hold the models' booleans
        "Float32": pa.float32(), "Float64": pa.float64(), "String": pa.string(),
    }  # fmt: skip
    if base in simple:
        return simple[base]
    if base.startswith("Array(") and base.endswith(")"):
        return pa.list_(arrow_type_of(base[6:-1]))
    if base.startswith("Map(") and base.endswith(")"):
        key, value = split_args(base[4:-1])
        return pa.map_(arrow_type_of(key), arrow_type_of(value))
    if base.startswith("DateTime"):
        return pa.timestamp("ms", tz="UTC")
    raise ValueError(f"no Arrow type for ClickHouse type {ch_type!r}")


def typed_scalar(value: Any, typ: pa.DataType) -> pa.Scalar:
    """``value`` (an int, bool or str) as an Arrow scalar of ``typ``, built from its bytes: ``pa.scalar`` and
    ``pa.array`` of Python objects make pyarrow import pandas on first use, which the fast paths (the collector's
    decode, the store's Native encoder) otherwise never need."""
    import pyarrow as pa

    if pa.types.is_string(typ):
        data = str(value).encode()
        offsets = (0).to_bytes(4, "little") + len(data).to_bytes(4, "little")
        return pa.Array.from_buffers(typ, 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])[0]
    if pa.types.is_boolean(typ):
        return pa.Array.from_buffers(typ, 1, [None, pa.py_buffer(bytes([1 if value else 0]))])[0]
    if pa.types.is_integer(typ):
        try:
            raw = int(value).to_bytes(typ.bit_width // 8, "little", signed=pa.types.is_signed_integer(typ))
        except OverflowError:  # out of the type's range: let pyarrow say so
            return pa.scalar(value, type=typ)
        return pa.Array.from_buffers(typ, 1, [None, pa.py_buffer(raw)])[0]
    return pa.scalar(value, type=typ)

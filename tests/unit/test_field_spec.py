"""The field specs (``schemas/fields.py``) are the single source of the contract's types: the rendered DDL, the
fast checks, the Arrow path and the streaming source's Spark schema all agree with them, for every event family
and server version, and a field added to a model shows up in every one of them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

import pyarrow as pa
import pytest
from pydantic import BaseModel
from pyspark.sql import types as T  # noqa: N812

from sparktap.collector.arrowpath import C_READER, ArrowReader
from sparktap.collector.checks import compile_rules, range_rules
from sparktap.collector.streaming import parser
from sparktap.schemas.ddl import RAW_TABLE, table_for
from sparktap.schemas.events import EVENT_TYPES, SCHEMA_VERSION, Envelope, TaskEnd, UnknownEvent
from sparktap.schemas.fields import FieldSpec, arrow_type_of, fields_of
from sparktap.schemas.schema import render_ddl
from sparktap.schemas.types import IDENTIFIER_PATTERN, IDENTIFIER_RULE, NAME, OPTIONAL_IDENTIFIER_PATTERN, TEXT, Bytes

VERSIONS = [(26, 9), (22, 1), (21, 8, 3), (18, 16, 1)]
FAMILIES = [*EVENT_TYPES, RAW_TABLE]
ENVELOPE = tuple(Envelope.model_fields)


def _model(family: str) -> type[BaseModel]:
    return UnknownEvent if family == RAW_TABLE else EVENT_TYPES[family]


def _expected_columns(model: type[BaseModel], version: tuple[int, ...], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(column, ClickHouse type) of a model, walked from the specs alone."""
    for spec in fields_of(model):
        name = prefix + spec.name
        if spec.model is not None:
            yield from _expected_columns(spec.model, version, name + "_")
        elif spec.item is not None and spec.item.model is not None:
            for child in fields_of(spec.item.model):
                yield f"{name}_{child.name}", f"Array({child.clickhouse_type(version)})"
        else:
            yield name, spec.clickhouse_type(version)


def _ddl_columns(version: tuple[int, ...], table: str) -> list[tuple[str, str]]:
    """(column, type) of the insertable columns of a table, read back from the rendered CREATE TABLE text."""
    (statement,) = [s for s in render_ddl(version, "db") if s.startswith(f"CREATE TABLE IF NOT EXISTS `db`.`{table}`")]
    body = statement.split("\n(\n", 1)[1].split("\n)\n", 1)[0]
    out = []
    for line in body.split(",\n"):
        match = re.fullmatch(r"\s*`([^`]+)` (.+?)(?: (MATERIALIZED|ALIAS|DEFAULT|CODEC)\b.*)?", line)
        assert match is not None, line
        if match.group(3) not in ("MATERIALIZED", "ALIAS"):
            out.append((match.group(1), match.group(2)))
    return out


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("family", FAMILIES)
def test_every_rendered_column_is_the_spec_of_its_field(family: str, version: tuple[int, ...]) -> None:
    expected = list(_expected_columns(_model(family), version))
    assert _ddl_columns(version, family) == expected
    table = table_for(family, version)
    assert [(c.name, c.ch_type) for c in table.columns] == expected
    assert all(c.field is not None for c in table.columns)


@pytest.mark.parametrize("family", list(EVENT_TYPES))
def test_every_check_is_the_spec_of_its_field(family: str) -> None:
    model = EVENT_TYPES[family]
    rules = compile_rules(table_for(family))
    specs = fields_of(model)
    if not rules.fast:
        assert any(s.kind == "float" or (s.item is not None and s.item.model is not None) for s in specs)
        return
    assert rules.objects.required == frozenset(s.name for s in specs if s.required)
    assert rules.objects.nullable == tuple(s.name for s in specs if s.nullable)
    reasons = {r.name: r.reason for r in rules.columns}
    for col in table_for(family).columns:
        spec = col.field
        assert spec is not None
        where = ".".join(col.path)
        if col.name == "event_type":
            assert col.name not in reasons  # the batch is grouped by it
        elif spec.kind == "int":
            lo, hi = spec.int_range()
            hi = SCHEMA_VERSION if col.name == "schema_version" else hi
            assert reasons[col.name] == f"invalid event: {where}: not an integer in [{lo}, {hi}]"
        elif spec.kind == "enum":
            assert reasons[col.name] == f"invalid event: {where}: not one of {sorted(spec.choices)}"
        elif spec.kind == "str" and spec.pattern is not None:
            empty = " or empty" if spec.pattern == OPTIONAL_IDENTIFIER_PATTERN else ""
            assert spec.pattern in (IDENTIFIER_PATTERN, OPTIONAL_IDENTIFIER_PATTERN)
            assert reasons[col.name] == f"invalid event: {where}: not an identifier{empty} ({IDENTIFIER_RULE})"
        elif spec.kind == "str" and spec.text is not None:  # a name or free text: collector/scrub.py
            clean = f"not a string, or not clean ({spec.text.kind}: collector/scrub.py)"
            assert reasons[col.name] == f"invalid event: {where}: {clean}"
        elif spec.kind in ("str", "bool"):
            assert reasons[col.name] == f"invalid event: {where}: not a {'string' if spec.kind == 'str' else 'boolean'}"
    ints = {
        c.name
        for c in table_for(family).columns
        if c.encoding == "value"
        and c.field is not None
        and "int" in (c.field.kind, c.field.item.kind if c.field.kind == "list" and c.field.item else None)
    }
    assert {r.name for r in range_rules(table_for(family))} == ints


@pytest.mark.parametrize("family", list(EVENT_TYPES))
def test_the_streaming_schema_is_the_spec_of_every_field(family: str) -> None:
    schema = parser.spark_schema("events")
    body = schema[family].dataType
    assert isinstance(body, T.StructType)
    specs = [s for s in fields_of(EVENT_TYPES[family]) if s.name not in ENVELOPE]
    assert [(f.name, f.dataType) for f in body.fields] == [(s.name, s.spark_type()) for s in specs]
    assert [(f.name, f.dataType) for f in schema.fields if f.name in ENVELOPE] == [
        (s.name, s.spark_type()) for s in fields_of(Envelope)
    ]


@pytest.mark.parametrize("version", [(26, 9), (18, 16, 1)], ids=lambda v: ".".join(map(str, v)))
def test_the_arrow_path_reads_the_spec(version: tuple[int, ...]) -> None:
    table = table_for("task_end", version)
    assert [arrow_type_of(c.ch_type) for c in table.columns] == [
        c.field.arrow_type(version) for c in table.columns if c.field is not None
    ]
    if not C_READER:
        pytest.skip("the C reader is not compiled")
    reader = ArrowReader(table, compile_rules(table), 1 << 20)
    by_name = {s.name: s for s in fields_of(TaskEnd)}
    defaults = {c.name: c.default for c in table.columns}
    for name, kind, required, lo, hi, choices, fill in reader.spec:
        spec = by_name[name.decode()]
        # the reader writes an optional int or bool column's default itself; a string's is filled in Arrow
        want_fill = defaults[spec.name] if kind in (0, 1) and not required else None
        assert fill == (None if want_fill is None else int(want_fill)), spec.name
        assert required == (spec.required or spec.name == "event_type")
        if kind == 0:  # an integer column
            spec_lo, spec_hi = spec.int_range()
            spec_hi = SCHEMA_VERSION if spec.name == "schema_version" else spec_hi
            assert (lo, hi) == (spec_lo, min(spec_hi, 2**63 - 1))
        assert choices == (tuple(sorted(c.encode() for c in spec.choices)) if spec.kind == "enum" else None)


def test_spec_types_of_one_field_of_each_kind() -> None:
    by_name = {s.name: s for s in fields_of(TaskEnd)}
    failure_class, speculative, cpu = by_name["failure_class"], by_name["speculative"], by_name["cpu_time_ns"]
    assert failure_class == FieldSpec("failure_class", "str", nullable=True, column=failure_class.column, text=NAME)
    assert failure_class.clickhouse_type((26, 9)) == "LowCardinality(Nullable(String))"
    assert failure_class.clickhouse_type((18, 16, 1)) == "Nullable(String)"
    assert speculative.clickhouse_type((26, 9)) == "UInt8"
    assert speculative.arrow_type((26, 9)) == pa.bool_()
    assert speculative.spark_type() == T.BooleanType()
    assert (cpu.kind, cpu.lo, cpu.hi, cpu.int_range()) == ("int", 0, None, (0, 2**64 - 1))
    assert cpu.arrow_type((26, 9)) == pa.uint64()
    props = {s.name: s for s in fields_of(EVENT_TYPES["app_start"])}["properties"]
    assert props.clickhouse_type((22, 1)) == "Map(String, String)"
    assert props.clickhouse_type((21, 8)) == "String"
    assert props.spark_type() == T.MapType(T.StringType(), T.StringType())


class _TaskEndPlus(TaskEnd):
    """task_end with two fields a later minor version might add."""

    extra_bytes: Bytes = 0
    tier: Literal["hot", "cold"] | None = None


def test_a_new_field_shows_up_in_the_ddl_the_checks_and_the_spark_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    version = (26, 9, 4242)  # a version of its own: the tables of this test are cached under it only
    monkeypatch.setitem(EVENT_TYPES, "task_end", _TaskEndPlus)
    parser.spark_schema.cache_clear()
    parser.arrow_schema.cache_clear()
    try:
        assert _ddl_columns(version, "task_end")[-2:] == [
            ("extra_bytes", "UInt64"),
            ("tier", "LowCardinality(Nullable(String))"),
        ]
        reasons = {r.name: r.reason for r in compile_rules(table_for("task_end", version)).columns}
        assert reasons["extra_bytes"] == "invalid event: extra_bytes: not an integer in [0, 18446744073709551615]"
        assert reasons["tier"] == "invalid event: tier: not one of ['cold', 'hot']"
        body = parser.spark_schema("events")["task_end"].dataType
        assert isinstance(body, T.StructType)
        assert [(f.name, f.dataType) for f in body.fields[-2:]] == [
            ("extra_bytes", T.LongType()),
            ("tier", T.StringType()),
        ]
    finally:
        parser.spark_schema.cache_clear()
        parser.arrow_schema.cache_clear()


def test_every_string_a_user_controls_is_marked_a_name_or_free_text() -> None:
    """Labels are names, every other plain string (a field, a list's element, a dict's value) free text; identifiers,
    enumerations and the discriminator are neither (promise 25: the collector caps and redacts what is marked)."""
    specs = {s.name: s for s in fields_of(EVENT_TYPES["job_start"])}
    assert (specs["user_id"].text, specs["app_name"].text, specs["description"].text) == (NAME, NAME, TEXT)
    assert specs["job_tags"].text is None and specs["job_tags"].item is not None and specs["job_tags"].item.text == TEXT
    assert (specs["cluster"].text, specs["app_id"].text, specs["event_type"].text, specs["job_id"].text) == (None,) * 4
    operation = {s.name: s for s in fields_of(EVENT_TYPES["operation"])}
    assert operation["statement"].text == TEXT and operation["session_id"].text == NAME

"""The executor telemetry contract (schema minor 1): executor_metrics, the new executor_added / executor_removed
fields and app_start.tags, as columns on a modern server (chDB) and on 18.16, and as parsed events."""

from __future__ import annotations

import orjson
import pytest

from sparktap.schemas import SCHEMA_MINOR, EventError, parse_event
from sparktap.schemas.ddl import table_for
from sparktap.schemas.examples import example_event
from sparktap.schemas.rows import RowBuilder
from sparktap.schemas.schema import render_ddl

MODERN = (26, 9, 2, 1)
OLD = (18, 16, 1)
PEAKS = [
    "jvm_heap_memory", "jvm_off_heap_memory", "on_heap_execution_memory", "off_heap_execution_memory",
    "on_heap_storage_memory", "off_heap_storage_memory", "on_heap_unified_memory", "off_heap_unified_memory",
    "direct_pool_memory", "mapped_pool_memory", "process_tree_jvm_rss_memory", "process_tree_python_rss_memory",
    "process_tree_other_rss_memory", "minor_gc_count", "minor_gc_time", "major_gc_count", "major_gc_time",
    "total_gc_time",
]  # fmt: skip


def test_schema_minor_is_bumped_for_the_additive_fields() -> None:
    assert SCHEMA_MINOR >= 1  # 1 added these fields; 2 added table_access (tests/unit/test_schemas.py)


@pytest.mark.parametrize("version", [MODERN, OLD])
def test_executor_metrics_columns(version: tuple[int, ...]) -> None:
    types = {c.name: c.ch_type for c in table_for("executor_metrics", version).columns}
    lc = "LowCardinality(String)" if version == MODERN else "String"
    assert types["executor_id"] == lc
    assert types["stage_id"] == "Nullable(Int64)"
    assert types["stage_attempt"] == "Nullable(Int64)"
    assert types["updates"] == "UInt64"
    assert [name for name in types if name in PEAKS] == PEAKS
    assert {types[name] for name in PEAKS} == {"UInt64"}
    dedup = [s for s in render_ddl(version, "db") if s.startswith("CREATE VIEW IF NOT EXISTS `db`.`executor_metrics_")]
    assert len(dedup) == 1 and "FINAL" in dedup[0]


@pytest.mark.parametrize("version", [MODERN, OLD])
def test_executor_added_removed_and_tags_columns(version: tuple[int, ...]) -> None:
    added = {c.name: c.ch_type for c in table_for("executor_added", version).columns}
    for name in ("memory_mb", "memory_overhead_mb", "pyspark_memory_mb"):
        assert added[name] == "Nullable(UInt64)"
    assert added["resource_profile_id"] == "Nullable(Int64)"
    removed = {c.name: c.ch_type for c in table_for("executor_removed", version).columns}
    assert removed["removal_class"] == ("LowCardinality(String)" if version == MODERN else "String")
    tags = {c.name: c.ch_type for c in table_for("app_start", version).columns}["tags"]
    assert tags == ("Map(String, String)" if version == MODERN else "String")  # 18.16: JSON text


def test_lifetime_summary_has_null_stage_fields_and_old_events_still_parse() -> None:
    lifetime = example_event("executor_metrics", stage_id=None, stage_attempt=None, executor_id="driver")
    table, row = RowBuilder(MODERN).build(lifetime.model_dump())
    assert table == "executor_metrics"
    assert row["stage_id"] is None and row["stage_attempt"] is None and row["executor_id"] == "driver"
    assert row["jvm_heap_memory"] == 412_000_000
    # a minor-0 producer: no new fields, defaults filled
    old = orjson.loads(example_event("executor_removed").model_dump_json())
    del old["removal_class"]
    old["schema_minor"] = 0
    parsed = parse_event(orjson.dumps(old))
    assert parsed.removal_class == "other"  # type: ignore[union-attr]
    added = orjson.loads(example_event("executor_added").model_dump_json())
    for name in ("memory_mb", "memory_overhead_mb", "pyspark_memory_mb", "resource_profile_id"):
        del added[name]
    assert parse_event(orjson.dumps(added)).memory_mb is None  # type: ignore[union-attr]
    start = orjson.loads(example_event("app_start").model_dump_json())
    del start["tags"]
    assert parse_event(orjson.dumps(start)).tags == {}  # type: ignore[union-attr]


def test_an_unknown_removal_class_is_refused() -> None:
    bad = orjson.loads(example_event("executor_removed").model_dump_json())
    bad["removal_class"] = "evicted"
    with pytest.raises(EventError, match="removal_class"):
        parse_event(orjson.dumps(bad))

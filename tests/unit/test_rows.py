"""Event dict -> row: the generated fast paths give exactly the reference rows, with the models' defaults."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sparktap.schemas.ddl import RAW_TABLE, table_for
from sparktap.schemas.events import EVENT_TYPES
from sparktap.schemas.examples import example_event
from sparktap.schemas.parse import parse_event
from sparktap.schemas.rows import RowBuilder, columnizer, flatten, flattener, flattener_source, json_text

MODERN = (26, 9)
OLD = (18, 16, 1)
VERSIONS = pytest.mark.parametrize("version", [MODERN, OLD], ids=["26.9", "18.16"])


def _required_only(event_type: str) -> dict[str, Any]:
    """The example event reduced to its required fields (what a terse producer may send)."""
    model = EVENT_TYPES[event_type]
    full = example_event(event_type).model_dump()
    keep = {name for name, info in model.model_fields.items() if info.is_required()} | {"event_type"}
    return {k: v for k, v in full.items() if k in keep}


@VERSIONS
@pytest.mark.parametrize("event_type", list(EVENT_TYPES))
def test_fast_paths_equal_the_reference(event_type: str, version: tuple[int, ...]) -> None:
    table = table_for(event_type, version)
    dumped = example_event(event_type).model_dump()
    reference = flatten(dumped, table)
    assert list(reference) == list(table.column_names)
    assert flattener(table)(dumped) == reference
    assert columnizer(table)([dumped, dumped]) == {name: [value, value] for name, value in reference.items()}
    # the same from the JSON text the listener sends (tuples/lists, no pydantic objects)
    decoded = orjson.loads(example_event(event_type).model_dump_json())
    assert flattener(table)(decoded) == reference


@VERSIONS
@pytest.mark.parametrize("event_type", list(EVENT_TYPES))
def test_missing_optional_fields_take_the_model_defaults(event_type: str, version: tuple[int, ...]) -> None:
    table = table_for(event_type, version)
    terse = _required_only(event_type)
    expected = flatten(EVENT_TYPES[event_type].model_validate(terse).model_dump(), table)
    assert flatten(terse, table) == expected
    assert flattener(table)(terse) == expected
    assert columnizer(table)([terse]) == {k: [v] for k, v in expected.items()}


def test_task_end_row_values() -> None:
    table = table_for("task_end")
    row = flattener(table)(_required_only("task_end"))
    assert row["schema_version"] == 1
    assert row["event_type"] == "task_end"
    assert row["stage_attempt"] == 0
    assert row["speculative"] is False
    assert row["failure_class"] is None
    assert row["run_time_ms"] == 0
    assert row["app_attempt"] == ""  # optional in the envelope, dropped by _required_only


def test_nested_models_are_flattened_with_underscores() -> None:
    row = flattener(table_for("stage_completed"))(example_event("stage_completed").model_dump())
    assert row["task_duration_ms_min"] == 10
    assert row["task_duration_ms_p50"] == 20
    assert row["task_duration_ms_sum"] == 400
    assert row["locality_process_local"] == 3
    assert row["locality_node_local"] == 1
    assert "task_duration_ms" not in row
    # a missing nested object gives zeros, not an error
    terse = {k: v for k, v in example_event("stage_completed").model_dump().items() if k != "locality"}
    assert flattener(table_for("stage_completed"))(terse)["locality_any"] == 0


def test_list_of_models_becomes_parallel_arrays() -> None:
    event = example_event("aqe_plan_update").model_dump()
    event["shuffle_reads"].append({"node_id": 9, "skewed": True})
    modern = flattener(table_for("aqe_plan_update", MODERN))(event)
    assert modern["shuffle_reads_node_id"] == [4, 9]
    assert modern["shuffle_reads_local"] == [True, False]
    assert modern["shuffle_reads_skewed"] == [False, True]
    assert modern["shuffle_reads_description"] == ["AQEShuffleRead local", ""]
    assert modern["shuffle_reads_metric_accumulators"] == [
        {"number of partitions": 901, "partition data size": 902},
        {},
    ]
    old = flattener(table_for("aqe_plan_update", OLD))(event)
    assert old["shuffle_reads_metric_accumulators"] == [
        '{"number of partitions":901,"partition data size":902}',
        "{}",
    ]
    assert old == flatten(event, table_for("aqe_plan_update", OLD))


def test_dicts_are_maps_or_sorted_json_text() -> None:
    event = example_event("app_start", properties={"b": "2", "a": "1"}).model_dump()
    assert flattener(table_for("app_start", MODERN))(event)["properties"] == {"b": "2", "a": "1"}
    assert flattener(table_for("app_start", OLD))(event)["properties"] == '{"a":"1","b":"2"}'
    assert json_text({"b": 1, "a": [1, {"d": 0, "c": None}]}) == '{"a":[1,{"c":null,"d":0}],"b":1}'


def test_nulls_and_unknown_fields() -> None:
    table = table_for("task_end")
    event = example_event("task_end").model_dump()
    event.update({"run_time_ms": None, "failure_class": None, "a_field_from_the_future": 1})
    row = flattener(table)(event)
    assert row["run_time_ms"] == 0  # null where the column is not Nullable: the model's default
    assert row["failure_class"] is None  # Nullable keeps the null
    assert "a_field_from_the_future" not in row
    assert row == flatten(event, table)


def test_mutable_defaults_are_never_shared_between_rows() -> None:
    table = table_for("job_start")
    terse = _required_only("job_start")
    first, second = flattener(table)(terse), flattener(table)(terse)
    assert first["stage_ids"] == [] and first["stage_ids"] is not second["stage_ids"]
    columns = columnizer(table)([terse, terse])
    assert columns["stage_ids"][0] is not columns["stage_ids"][1]


def test_row_builder_routes_known_and_unknown_types() -> None:
    builder = RowBuilder(MODERN)
    event = example_event("task_end").model_dump()
    assert builder.build(event) == ("task_end", flattener(table_for("task_end"))(event))
    future = {**example_event("job_end").model_dump(), "event_type": "gpu_kernel", "kernel": "gemm", "ms": 3}
    table, row = builder.build(future)
    assert table == RAW_TABLE
    assert row["event_type"] == "gpu_kernel"
    assert row["seq"] == 1
    assert row["cluster"] == "prod-eu"
    assert orjson.loads(row["payload"]) == future
    # the same row as flattening the UnknownEvent the parser makes of that message
    parsed = parse_event(orjson.dumps(future))
    assert flatten(parsed.model_dump(), table_for(RAW_TABLE)) == row


def test_row_builder_groups_by_table() -> None:
    builder = RowBuilder(OLD)
    events = [example_event("task_end", seq=i).model_dump() for i in (1, 2)]
    events.insert(1, example_event("job_end", seq=3).model_dump())
    groups = builder.group(events)
    assert list(groups) == ["task_end", "job_end"]
    assert [r["seq"] for r in groups["task_end"]] == [1, 2]
    assert [r["seq"] for r in groups["job_end"]] == [3]


def test_flatteners_are_generated_once_per_table() -> None:
    table = table_for("task_end")
    assert flattener(table) is flattener(table)
    assert columnizer(table) is columnizer(table)
    source = flattener_source(table)
    assert source.startswith("def _flatten(e):\n")
    assert "'peak_execution_memory': " in source

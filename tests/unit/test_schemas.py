"""The event contract: exported JSON Schema in sync, discriminated parsing, compatibility rules."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import orjson
import pytest

from sparktap.schemas import EVENT_TYPES, SCHEMA_VERSION, EventError, UnknownEvent, parse_event
from sparktap.schemas.examples import example_event
from sparktap.schemas.jsonschema_export import SCHEMA_DIR, render, stale

ARCHITECTURE_FAMILIES = {
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
    "executor_metrics",
    "listener_health",
    "sql_plan_stats",
    "table_access",
    "streaming_query_start",
    "streaming_query_progress",
    "streaming_query_end",
    "operation",
}


def test_every_family_in_the_architecture_has_a_model() -> None:
    assert set(EVENT_TYPES) == ARCHITECTURE_FAMILIES


def test_checked_in_json_schema_matches_the_models() -> None:
    assert stale() == [], "run `make schemas` and commit schemas/jsonschema/"
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.json")) == sorted(render())


def test_stale_detects_a_changed_file(tmp_path: Any) -> None:
    for name, text in render().items():
        (tmp_path / name).write_text(text)
    assert stale(tmp_path) == []
    (tmp_path / "task_end.schema.json").write_text("{}")
    assert stale(tmp_path) == ["task_end.schema.json"]


@pytest.mark.parametrize("event_type", sorted(ARCHITECTURE_FAMILIES))
def test_every_example_validates_against_the_schema_and_round_trips(event_type: str) -> None:
    event = example_event(event_type)
    payload = orjson.loads(event.model_dump_json(exclude_none=True))
    schema = json.loads((SCHEMA_DIR / "events.schema.json").read_text())
    jsonschema.validate(payload, schema)
    jsonschema.validate(payload, json.loads((SCHEMA_DIR / f"{event_type}.schema.json").read_text()))
    parsed = parse_event(orjson.dumps(payload))
    assert type(parsed) is EVENT_TYPES[event_type]
    assert parsed == event


def test_strict_schema_rejects_a_misspelt_field() -> None:
    payload = orjson.loads(example_event("task_end").model_dump_json())
    payload["duraton_ms"] = 5
    schema = json.loads((SCHEMA_DIR / "task_end.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError, match="duraton_ms"):
        jsonschema.validate(payload, schema)


def test_unknown_field_is_ignored_by_readers() -> None:
    payload = orjson.loads(example_event("job_end").model_dump_json())
    payload["added_in_minor_7"] = {"anything": [1, 2]}
    payload["schema_minor"] = 7
    event = parse_event(orjson.dumps(payload))
    assert event.event_type == "job_end"
    assert event.schema_minor == 7
    assert not hasattr(event, "added_in_minor_7")


def test_unknown_event_type_is_recognised_and_kept_whole() -> None:
    payload = orjson.loads(example_event("job_end").model_dump_json())
    payload["event_type"] = "gpu_kernel_end"
    payload["kernel"] = "matmul"
    event = parse_event(orjson.dumps(payload))
    assert isinstance(event, UnknownEvent)
    assert event.event_type == "gpu_kernel_end"
    assert event.seq == payload["seq"]
    assert event.payload["kernel"] == "matmul"


def test_unknown_event_type_still_needs_an_envelope() -> None:
    with pytest.raises(EventError, match="app_id"):
        parse_event(b'{"schema_version":1,"event_type":"gpu_kernel_end","seq":1}')


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"event_type": "task_end"}', "invalid event"),
        (b'{"event_type": 5, "schema_version": 1}', "invalid event"),
    ],
)
def test_bad_messages_raise_event_error_with_reason(message: bytes, reason: str) -> None:
    with pytest.raises(EventError, match=reason):
        parse_event(message)


def test_a_newer_major_version_is_refused_clearly() -> None:
    payload = orjson.loads(example_event("job_end").model_dump_json())
    payload["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(EventError, match=f"unsupported schema_version={SCHEMA_VERSION + 1}"):
        parse_event(orjson.dumps(payload))


def test_validation_errors_never_echo_values() -> None:
    payload = orjson.loads(example_event("job_end").model_dump_json())
    payload["job_id"] = "hunter2-secret"
    with pytest.raises(EventError) as info:
        parse_event(orjson.dumps(payload))
    assert "hunter2" not in str(info.value)
    assert "job_id" in info.value.reason

"""Encoding events and reading decoded rows, for the decoder's contract tests."""

from __future__ import annotations

import json
from typing import Any

import orjson

from sparktap.collector.arrowpath import as_list
from sparktap.collector.decode import Decoded
from sparktap.collector.scrub import scrub
from sparktap.schemas.ddl import RAW_TABLE, Schema
from sparktap.schemas.events import UnknownEvent
from sparktap.schemas.examples import EXAMPLE_TIME_MS
from sparktap.schemas.parse import EventError, parse_event
from sparktap.schemas.rows import columnizer


def encode(event: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(event)
    except TypeError:  # an integer beyond 64 bits: orjson refuses to write it, the stdlib does not
        return json.dumps(event).encode()


def decoded_rows(decoded: Decoded) -> dict[int, tuple[str, dict[str, Any]]]:
    out: dict[int, tuple[str, dict[str, Any]]] = {}
    for table, chunk in decoded.tables.items():
        columns = {name: as_list(values) for name, values in chunk.columns.items()}
        for j, index in enumerate(chunk.indices):
            out[index] = (table, {name: values[j] for name, values in columns.items()})
    return out


def expected_row(schema: Schema, message: bytes) -> tuple[str, dict[str, Any]] | str:
    """(table, row) the contract gives for a message, or the EventError reason; every string a user controls as the
    collector stores it (``collector/scrub.py``: capped, no control character, redacted)."""
    try:
        event = parse_event(message)
    except EventError as exc:
        return exc.reason
    if isinstance(event, UnknownEvent):
        spec = schema.tables[RAW_TABLE]
        source = {**scrub(UnknownEvent, event.model_dump(exclude={"payload"})), "payload": orjson.loads(message)}
    else:
        spec = schema.table_for(event.event_type)
        source = scrub(type(event), event.model_dump())
    columns = columnizer(spec)([source])
    return spec.name, {name: values[0] for name, values in columns.items()}


MUTATIONS: list[Any] = [
    None, "x", "", "5", -1, 0, 1, 2, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 1.5, 2.0, True, False,
    [], [1], [-1], ["a"], [True], [2**63], {}, {"a": 1}, {"a": "b"}, {"a": None}, {"a": 2**64},
]  # fmt: skip
DELETE = object()


def mutants(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The event with every field (and every field of a nested object) deleted or replaced by each mutation."""
    out: list[dict[str, Any]] = []
    for key, value in event.items():
        for mutation in [DELETE, *MUTATIONS]:
            copy = dict(event)
            if mutation is DELETE:
                del copy[key]
            else:
                copy[key] = mutation
            out.append(copy)
        if isinstance(value, dict) and value and key != "properties":
            for sub in value:
                for mutation in [DELETE, None, "x", -1, 1.5, 2**64, True]:
                    inner = dict(value)
                    if mutation is DELETE:
                        del inner[sub]
                    else:
                        inner[sub] = mutation
                    out.append({**event, key: inner})
    return out


NOW_MS = EXAMPLE_TIME_MS + 100_000  # the Decoder's clock above
CANARY = "Canary-Pa55word-31337"


def deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    top = node
    for _ in range(levels - 1):
        node["a"] = {}
        node = node["a"]
    return top


def hostile(listener_style: dict[str, Any]) -> list[tuple[bytes, str, str]]:
    """(message, kind, reason prefix) of every bad kind the hostile-input run found, made from a valid event as the
    listener writes it (no nulls), for a decoder whose clock is ``NOW_MS``."""
    month = 31 * 86_400_000
    return [
        (b"", "empty", "empty message: no value"),
        (
            encode({**listener_style, "schema_version": "2"}),
            "unsupported_version",
            "unsupported schema_version: must be a JSON integer, got a string",
        ),
        (
            encode({**listener_style, "schema_version": 2.0}),
            "unsupported_version",
            "unsupported schema_version: must be a JSON integer, got a number with a fraction or exponent",
        ),
        (
            encode({**listener_style, "schema_version": True}),
            "unsupported_version",
            "unsupported schema_version: must be a JSON integer, got true or false",
        ),
        (
            encode({**listener_style, "event_type": {"password": CANARY}}),
            "invalid",
            "invalid event: event_type: must be a JSON string, got an object",
        ),
        (
            json.dumps({**listener_style, "event_type": "gpu_kernel", "x": deep(300)}).encode(),
            "invalid",
            "message nests objects or arrays deeper than 64 levels",
        ),
        (
            json.dumps({**listener_style, "event_type": "task_end", "x": deep(300)}).encode(),
            "invalid",
            "message nests objects or arrays deeper than 64 levels",
        ),
        (encode({**listener_style, "event_time_ms": 2**63 - 1}), "event_time_out_of_range", "event_time_ms: outside"),
        (
            encode({**listener_style, "event_time_ms": NOW_MS - 31 * 86_400_000}),
            "event_time_out_of_range",
            "event_time_ms: outside the accepted window (older than retention_days=30",
        ),
        (
            encode({**listener_style, "event_time_ms": NOW_MS + 86_400_000 + 1}),
            "event_time_out_of_range",
            "event_time_ms: outside",
        ),
        *[
            (
                encode({**listener_style, "seq": 100 + m, "event_time_ms": NOW_MS - 150 * month + m * month}),
                "event_time_out_of_range",
                "event_time_ms: outside",
            )
            for m in range(0, 150, 30)
        ],
    ]

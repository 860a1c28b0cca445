"""Encoding events and reading decoded rows, for the decoder's contract tests."""

from __future__ import annotations

import json
from typing import Any

import orjson

from sparktap.collector.arrowpath import as_list
from sparktap.collector.decode import Decoded
from sparktap.schemas.ddl import RAW_TABLE, Schema
from sparktap.schemas.events import UnknownEvent
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
    """(table, row) the contract gives for a message, or the EventError reason."""
    try:
        event = parse_event(message)
    except EventError as exc:
        return exc.reason
    if isinstance(event, UnknownEvent):
        spec = schema.tables[RAW_TABLE]
        source = {**event.model_dump(exclude={"payload"}), "payload": orjson.loads(message)}
    else:
        spec = schema.table_for(event.event_type)
        source = event.model_dump()
    columns = columnizer(spec)([source])
    return spec.name, {name: values[0] for name, values in columns.items()}

"""sparktap.schemas: the event contract (pydantic models), its JSON Schema and the ClickHouse DDL."""

from sparktap.schemas.events import EVENT_TYPES, KNOWN_EVENTS, SCHEMA_MINOR, SCHEMA_VERSION, Envelope, UnknownEvent
from sparktap.schemas.parse import EVENT_ADAPTER, Event, EventError, decode, is_unknown, parse_event

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_TYPES",
    "KNOWN_EVENTS",
    "SCHEMA_MINOR",
    "SCHEMA_VERSION",
    "Envelope",
    "Event",
    "EventError",
    "UnknownEvent",
    "decode",
    "is_unknown",
    "parse_event",
]

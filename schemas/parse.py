"""Parsing any message into its event model; unknown types are recognised, never rejected."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import Field, TypeAdapter, ValidationError

from sparktap.errors import SparktapError
from sparktap.schemas.events import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    AppEnd,
    AppStart,
    AqePlanUpdate,
    AqeShuffleRead,
    Envelope,
    ExecutorAdded,
    ExecutorRemoved,
    JobEnd,
    JobStart,
    ListenerHealth,
    SqlEnd,
    SqlStart,
    StageCompleted,
    StageSubmitted,
    TaskEnd,
    UnknownEvent,
)

Event = Annotated[
    AppStart
    | AppEnd
    | JobStart
    | JobEnd
    | SqlStart
    | SqlEnd
    | StageSubmitted
    | StageCompleted
    | TaskEnd
    | AqePlanUpdate
    | AqeShuffleRead
    | ExecutorAdded
    | ExecutorRemoved
    | ListenerHealth,
    Field(discriminator="event_type"),
]
"""Every known event, discriminated by ``event_type``."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
_ENVELOPE_FIELDS = tuple(Envelope.model_fields)


class EventError(SparktapError):
    """A message is not a valid event. ``reason`` is short and safe to put in a dead-letter header."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def decode(message: bytes | str) -> dict[str, Any]:
    """JSON object from a message value, or EventError."""
    try:
        obj = orjson.loads(message)
    except orjson.JSONDecodeError as exc:
        raise EventError(f"not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise EventError(f"not a JSON object: got {type(obj).__name__}")
    return obj


def parse_event(message: bytes | str | dict[str, Any]) -> Envelope:
    """Parse one message into its model: a known event, or an UnknownEvent for a type this reader does not know."""
    obj = decode(message) if isinstance(message, bytes | str) else message
    version = obj.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise EventError(f"unsupported schema_version={version}: this reader understands major {SCHEMA_VERSION}")
    event_type = obj.get("event_type")
    try:
        if isinstance(event_type, str) and event_type not in EVENT_TYPES:
            envelope = {k: obj[k] for k in _ENVELOPE_FIELDS if k in obj}
            return UnknownEvent.model_validate({**envelope, "payload": obj})
        return EVENT_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        raise EventError(_summarise(exc)) from exc


def is_unknown(event: Envelope) -> bool:
    return isinstance(event, UnknownEvent)


def _summarise(exc: ValidationError) -> str:
    """'field: message' for the first few problems; never echoes input values."""
    parts = []
    for err in exc.errors(include_input=False)[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "invalid event: " + "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")

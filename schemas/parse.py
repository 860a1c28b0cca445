"""Parsing any message into its event model; unknown types are recognised, never rejected."""

from __future__ import annotations

from typing import Annotated, Any, Union

import orjson
from pydantic import Field, TypeAdapter, ValidationError

from sparktap.errors import SparktapError
from sparktap.schemas.events import EVENT_TYPES, KNOWN_EVENTS, SCHEMA_VERSION, Envelope, UnknownEvent
from sparktap.schemas.types import IDENTIFIER_PATTERN, IDENTIFIER_RULE, OPTIONAL_IDENTIFIER_PATTERN

Event: Any = Annotated[Union[KNOWN_EVENTS], Field(discriminator="event_type")]  # noqa: UP007 - a tuple of models
"""Every known event, discriminated by ``event_type``."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
_ENVELOPE_FIELDS = tuple(Envelope.model_fields)
MAX_DEPTH = 64
"""deepest nesting of objects and arrays a message may have (events are at most 3 deep; orjson writes 254 at most,
so a deeper unknown event could not be re-serialised for the raw table)"""
TOO_DEEP = f"message nests objects or arrays deeper than {MAX_DEPTH} levels"
_JSON_TYPES = {
    str: "a string",
    float: "a number with a fraction or exponent",
    bool: "true or false",
    type(None): "null",
    list: "an array",
    dict: "an object",
    int: "an integer",
}


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


def json_type(value: Any) -> str:
    """The JSON type of a decoded value, in words (for reasons that must not echo the value itself)."""
    return _JSON_TYPES.get(type(value), "a value of another type")


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether objects and arrays nest deeper than ``limit`` levels (the top object is level 1)."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        for value in node.values() if type(node) is dict else node:
            if type(value) is dict or type(value) is list:
                stack.append((value, depth + 1))
    return False


def parse_event(message: bytes | str | dict[str, Any]) -> Envelope:
    """Parse one message into its model: a known event, or an UnknownEvent for a type this reader does not know.

    Before the model: nesting at most ``MAX_DEPTH`` levels; ``schema_version``, when given, a JSON integer (not
    ``"2"``, ``2.0`` or ``true``: pydantic's lax mode would take those as 2 and bypass the major-version gate) not
    above this reader's major; ``event_type`` a string. Reasons name the field and the rule, never the value.
    """
    obj = decode(message) if isinstance(message, bytes | str) else message
    if too_deep(obj):
        raise EventError(TOO_DEEP)
    if "schema_version" in obj:
        version = obj["schema_version"]
        if type(version) is not int:
            raise EventError(f"unsupported schema_version: must be a JSON integer, got {json_type(version)}")
        if version > SCHEMA_VERSION:
            raise EventError(f"unsupported schema_version={version}: this reader understands major {SCHEMA_VERSION}")
    event_type = obj.get("event_type")
    if "event_type" in obj and type(event_type) is not str:
        raise EventError(f"invalid event: event_type: must be a JSON string, got {json_type(event_type)}")
    try:
        if isinstance(event_type, str) and event_type not in EVENT_TYPES:
            envelope = {k: obj[k] for k in _ENVELOPE_FIELDS if k in obj}
            return UnknownEvent.model_validate({**envelope, "payload": obj})
        return EVENT_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        raise EventError(_summarise(exc)) from exc


def is_unknown(event: Envelope) -> bool:
    return isinstance(event, UnknownEvent)


def _known_names() -> frozenset[str]:
    """Every field name of every event model (and nested model), and every event type: what a location may name."""
    from pydantic import BaseModel

    from sparktap.schemas import events

    names: set[str] = set(EVENT_TYPES)
    for obj in vars(events).values():
        if isinstance(obj, type) and issubclass(obj, BaseModel):
            names.update(obj.model_fields)
    return frozenset(names)


_KNOWN_NAMES = _known_names()


def _where(loc: tuple[int | str, ...]) -> str:
    """A location as text; a key the message chose (in a dict field) shows as ``<key>``: it is a value too."""
    return ".".join(str(p) if isinstance(p, int) or p in _KNOWN_NAMES else "<key>" for p in loc) or "<root>"


def _summarise(exc: ValidationError) -> str:
    """'field: message' for the first few problems; never echoes input values (nor keys the message chose)."""
    parts = []
    for err in exc.errors(include_input=False)[:3]:
        where = _where(err["loc"])
        # the messages that quote the input: say which rule broke instead
        msg = "not one of the known values" if err["type"].startswith("union_tag") else err["msg"]
        pattern = (err.get("ctx") or {}).get("pattern")
        if err["type"] == "string_pattern_mismatch" and pattern in (IDENTIFIER_PATTERN, OPTIONAL_IDENTIFIER_PATTERN):
            empty = " or empty" if pattern == OPTIONAL_IDENTIFIER_PATTERN else ""
            msg = f"not an identifier{empty} ({IDENTIFIER_RULE})"
        parts.append(f"{where}: {msg}")
    more = exc.error_count() - len(parts)
    return "invalid event: " + "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")

"""Row layouts of the streaming source (``parse=raw`` / ``parse=events``) and Kafka records -> Arrow batches.

``raw`` is exactly the layout of Spark's own Kafka source: key, value, topic, partition, offset, timestamp,
timestampType. ``events`` parses every value with the event contract (``sparktap.schemas``):

- ``topic``, ``partition``, ``offset``, ``timestamp``: where the message came from;
- the envelope, typed (``event_type``, ``cluster``, ``app_id``, ``app_attempt``, ``seq`` …);
- one struct column per known event type, named like the type (``task_end``, ``stage_completed`` …), holding
  the fields of that type beyond the envelope, with defaults filled in; null on rows of other types. Select one
  family with ``df.where("event_type = 'task_end'").select("app_id", "seq", "task_end.*")``;
- ``payload``: the whole message as compact JSON for an event type this version does not know (else null);
- ``error``: why a message is not a valid event (null for valid events);
- ``value``: the message itself, as in ``raw`` (the ClickHouse sink stores what the consumer-group collector
  would store from it; drop it to have the sink use the typed columns instead).

The struct types come from the field specs of the pydantic models (``FieldSpec.spark_type``, ``schemas/fields.py``):
int -> bigint, bool -> boolean, str / Literal -> string, ``X | None`` -> nullable X, list -> array, nested model ->
struct, ``dict[str, V]`` -> map<string, V>.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import orjson

if TYPE_CHECKING:
    import pyarrow as pa
    from pydantic import BaseModel
    from pyspark.sql.types import StructType

    from sparktap.schemas.events import Envelope

Parse = Literal["raw", "events"]

# The event contract (pydantic models, about half a second to import) loads only when ``parse=events`` needs it:
# a Python worker reading ``parse=raw`` never imports it (the first micro-batch pays every worker's imports).


@functools.cache
def envelope_fields() -> tuple[str, ...]:
    from sparktap.schemas.events import Envelope

    return tuple(Envelope.model_fields)


def __getattr__(name: str) -> Any:
    if name == "ENVELOPE_FIELDS":  # the envelope's field names, computed on first use
        return envelope_fields()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


KAFKA_COLUMNS = ("topic", "partition", "offset", "timestamp")
EXTRA_COLUMNS = ("payload", "error", "value")


class KafkaRecord(typing.NamedTuple):
    """One Kafka record, detached from librdkafka."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    timestamp_type: int


# ----------------------------------------------------------------------------------------------- Spark schema


def _struct(model: type[BaseModel], skip: Sequence[str]) -> StructType:
    from pyspark.sql import types as T  # noqa: N812 - the conventional alias

    from sparktap.schemas.fields import fields_of

    return T.StructType([T.StructField(f.name, f.spark_type()) for f in fields_of(model) if f.name not in skip])


@functools.cache
def spark_schema(parse: Parse) -> StructType:
    """The DataFrame schema of the source for a ``parse`` mode."""
    from pyspark.sql import types as T  # noqa: N812

    if parse == "raw":
        return T.StructType(
            [
                T.StructField("key", T.BinaryType()),
                T.StructField("value", T.BinaryType()),
                T.StructField("topic", T.StringType()),
                T.StructField("partition", T.IntegerType()),
                T.StructField("offset", T.LongType()),
                T.StructField("timestamp", T.TimestampType()),
                T.StructField("timestampType", T.IntegerType()),
            ]
        )
    fields = [
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
    ]
    from sparktap.schemas.events import EVENT_TYPES, Envelope

    fields += _struct(Envelope, ()).fields
    fields += [
        T.StructField(event_type, _struct(model, envelope_fields())) for event_type, model in EVENT_TYPES.items()
    ]
    fields += [
        T.StructField("payload", T.StringType()),
        T.StructField("error", T.StringType()),
        T.StructField("value", T.BinaryType()),
    ]
    return T.StructType(fields)


@functools.cache
def arrow_schema(parse: Parse) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` for a ``parse`` mode (pyspark's own conversion)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(parse), timezone="UTC")


# ----------------------------------------------------------------------------------------------- events


def parse_value(value: bytes | None) -> tuple[Envelope, dict[str, Any]] | str:
    """(validated event, decoded message) of a message value, or the reason it is not a valid event.

    An event of a type this version does not know comes back as an ``UnknownEvent`` (its envelope validated).
    """
    from sparktap.schemas.parse import EventError, decode, parse_event

    if not value:
        return "empty message: no value"
    try:
        obj = decode(value)
        return parse_event(obj), obj
    except EventError as exc:
        return exc.reason
    except Exception as exc:  # noqa: BLE001 - confined to this message: it becomes a dead letter, the batch goes on
        return f"cannot decode the message: {type(exc).__name__} in the collector (a bug: please report it)"


def is_known(event: Envelope) -> bool:
    from sparktap.schemas.events import EVENT_TYPES

    return type(event) is EVENT_TYPES.get(event.event_type)


def event_row(value: bytes | None) -> dict[str, Any]:
    """The ``events`` columns of one message value (without the Kafka columns)."""
    parsed = parse_value(value)
    if isinstance(parsed, str):
        return {"error": parsed, "value": value}
    event, obj = parsed
    data = event.model_dump()
    envelope = envelope_fields()
    row = {name: data.get(name) for name in envelope}
    row["value"] = value
    if is_known(event):
        row[event.event_type] = {k: v for k, v in data.items() if k not in envelope}
    else:  # a type this version does not know: the whole message as JSON text
        row["payload"] = orjson.dumps(obj).decode()
    return row


def event_dict(row: dict[str, Any]) -> dict[str, Any] | None:
    """Back from an ``events`` row (as Arrow's ``to_pylist`` gives it) to the event dict; None for an error row."""
    if row.get("error") is not None:
        return None
    payload = row.get("payload")
    if payload is not None:
        obj: dict[str, Any] = orjson.loads(payload)
        return obj
    event = {name: row.get(name) for name in envelope_fields()}
    body = row.get(str(event["event_type"]))
    if body:
        event.update(body)
    return event


# ----------------------------------------------------------------------------------------------- Arrow


def to_arrow(records: Sequence[KafkaRecord], parse: Parse) -> pa.RecordBatch:
    """One Arrow batch of the source's layout from Kafka records."""
    import pyarrow as pa

    schema = arrow_schema(parse)
    ts = [None if r.timestamp_ms is None else r.timestamp_ms * 1000 for r in records]
    if parse == "raw":
        arrays = [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array([r.topic for r in records], pa.string()),
            pa.array([r.partition for r in records], pa.int32()),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array(ts, schema.field("timestamp").type),
            pa.array([r.timestamp_type for r in records], pa.int32()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    rows = []
    for record, micros in zip(records, ts, strict=True):
        row = event_row(record.value)
        row["topic"] = record.topic
        row["partition"] = record.partition
        row["offset"] = record.offset
        row["timestamp"] = micros
        rows.append(row)
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def batches(records: Iterable[KafkaRecord], parse: Parse, size: int = 10_000) -> Iterator[pa.RecordBatch]:
    """Arrow batches of at most ``size`` rows."""
    chunk: list[KafkaRecord] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= size:
            yield to_arrow(chunk, parse)
            chunk = []
    if chunk:
        yield to_arrow(chunk, parse)

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

import array
import functools
import itertools
import operator
import typing
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Message
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


def raw_arrow(messages: Sequence[Message], topic: str, partition: int) -> pa.RecordBatch:
    """One ``parse=raw`` Arrow batch straight from consumed messages of one partition, column by column: each
    column is built from its buffers by C-level ``map`` passes over the messages (no KafkaRecord, no Python loop per
    record, and no ``pa.array`` of Python objects, which makes pyarrow import pandas: 0.5-1 s of a worker's first
    batch)."""
    import pyarrow as pa
    from confluent_kafka import Message

    schema = arrow_schema("raw")
    rows = len(messages)
    kinds, stamps = zip(*map(Message.timestamp, messages), strict=True) if rows else ((), ())
    # librdkafka: 0 none, 1 CreateTime, 2 LogAppendTime; Spark: 0 CreateTime, 1 LogAppendTime
    micros = array.array("q", map(operator.mul, stamps, itertools.repeat(1000, rows)))
    stamped = _validity(kinds, 0) if 0 in kinds else None
    arrays = [
        _binary(list(map(Message.key, messages))),
        _binary(list(map(Message.value, messages))),
        _constant_string(topic, rows),
        _fixed(pa.int32(), array.array("i", [partition]) * rows, rows),
        _fixed(pa.int64(), array.array("q", cast(Iterator[int], map(Message.offset, messages))), rows),
        _fixed(pa.int64(), micros, rows, stamped).cast(schema.field("timestamp").type),
        _fixed(pa.int32(), array.array("i", map(operator.sub, kinds, itertools.repeat(1, rows))), rows),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _validity(values: Sequence[Any], missing: Any) -> pa.Buffer:
    """An Arrow validity bitmap: bit i set when ``values[i]`` is not ``missing``."""
    import pyarrow as pa

    flags = bytes(map(operator.is_not, values, itertools.repeat(missing, len(values))))
    return pa.Array.from_buffers(pa.uint8(), len(flags), [None, pa.py_buffer(flags)]).cast(pa.bool_()).buffers()[1]


def _fixed(typ: pa.DataType, data: array.array[int], rows: int, validity: pa.Buffer | None = None) -> pa.Array:
    import pyarrow as pa

    return pa.Array.from_buffers(typ, rows, [validity, pa.py_buffer(data)])


def _binary(values: list[bytes | None]) -> pa.Array:
    """A binary array of ``values`` (None: null), from its buffers."""
    import pyarrow as pa

    validity = None
    present = cast(list[bytes], values)
    if None in values:
        validity = _validity(values, None)
        present = [b"" if v is None else v for v in values]
    ends = array.array("i", itertools.accumulate(map(len, present), initial=0))
    data = b"".join(present)
    return pa.Array.from_buffers(pa.binary(), len(values), [validity, pa.py_buffer(ends), pa.py_buffer(data)])


def _constant_string(text: str, rows: int) -> pa.Array:
    import pyarrow as pa

    data = text.encode()
    ends = array.array("i", range(0, (rows + 1) * len(data), len(data))) if data else array.array("i", [0]) * (rows + 1)
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(ends), pa.py_buffer(data * rows)])


def message_batches(
    chunks: Iterable[list[Message]], topic: str, partition: int, parse: Parse, size: int = 10_000
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``size`` rows (the last one fewer) from chunks of consumed messages of one partition:
    ``raw`` column by column (``raw_arrow``), ``events`` through ``to_arrow`` (every value is parsed anyway)."""
    pending: list[Message] = []
    for chunk in chunks:
        pending.extend(chunk)
        while len(pending) >= size:
            yield _messages_to_arrow(pending[:size], topic, partition, parse)
            del pending[:size]
    if pending:
        yield _messages_to_arrow(pending, topic, partition, parse)


def _messages_to_arrow(messages: list[Message], topic: str, partition: int, parse: Parse) -> pa.RecordBatch:
    if parse == "raw":
        return raw_arrow(messages, topic, partition)
    return to_arrow(list(records(messages, topic, partition)), parse)


def records(messages: Iterable[Message], topic: str, partition: int) -> Iterator[KafkaRecord]:
    """Consumed messages as KafkaRecords."""
    for msg in messages:
        timestamp_type, timestamp = msg.timestamp()
        # librdkafka: 0 none, 1 CreateTime, 2 LogAppendTime; Spark: 0 CreateTime, 1 LogAppendTime
        yield KafkaRecord(
            msg.key(),
            msg.value(),
            topic,
            partition,
            msg.offset() or 0,
            timestamp if timestamp_type else None,
            timestamp_type - 1,
        )

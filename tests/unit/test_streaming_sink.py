"""The source's row layouts and the sink's executor side: the same columns as the consumer-group collector's
decoder, whichever layout comes in (no Spark job, no Kafka, no ClickHouse)."""

from __future__ import annotations

import datetime as dt
import functools
import pickle
from typing import Any

import orjson
import pyarrow as pa
import pytest

from sparktap.collector.decode import Decoder as _Decoder
from sparktap.collector.kafka.dlq import HEADER_ERROR, HEADER_OFFSET, HEADER_PARTITION, HEADER_REASON, HEADER_TOPIC
from sparktap.collector.streaming.executor import WrittenMessage, batch_counts
from sparktap.collector.streaming.offsets import StreamingError
from sparktap.collector.streaming.parser import (
    KafkaRecord,
    arrow_schema,
    event_dict,
    event_row,
    spark_schema,
    to_arrow,
)
from sparktap.collector.streaming.sink import ClickHouseStreamWriter, SinkMessage, SinkOptions
from sparktap.errors import ConfigError
from sparktap.schemas.ddl import LATEST_VERSION, RAW_TABLE
from sparktap.schemas.events import EVENT_TYPES
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event
from sparktap.schemas.schema import schema_for

# judge the examples (schemas/examples.py: yesterday, fixed for the day) by a clock 100 s after their event time
Decoder = functools.partial(_Decoder, clock=lambda: EXAMPLE_TIME_MS / 1000 + 100)

TS = 1_795_000_000_123


def _records() -> list[KafkaRecord]:
    values: list[bytes | None] = []
    for n, event_type in enumerate(EVENT_TYPES):
        for i in range(2):
            values.append(example_event(event_type, seq=n * 10 + i + 1, app_id=f"app-{i}").model_dump_json().encode())
    future = example_event("job_end", seq=500).model_dump(mode="json")
    future.update(event_type="gpu_kernel_end", kernel="gemm")
    values.append(orjson.dumps(future))
    bad = example_event("task_end", seq=501).model_dump(mode="json")
    bad["locality"] = "ON_THE_MOON"
    values += [orjson.dumps(bad), b"{nope", None]
    return [KafkaRecord(b"app-0", v, "events", i % 2, 100 + i, TS, 0) for i, v in enumerate(values)]


def test_raw_layout_is_spark_kafka_layout() -> None:
    batch = to_arrow(_records()[:2], "raw")
    assert batch.schema.equals(arrow_schema("raw"))
    row = batch.to_pylist()[0]
    assert row["key"] == b"app-0" and row["topic"] == "events" and row["partition"] == 0 and row["offset"] == 100
    assert row["timestamp"] == dt.datetime(2026, 11, 18, 11, 6, 40, 123000, tzinfo=dt.UTC)
    assert row["timestampType"] == 0


def test_events_layout_has_a_typed_column_per_event_type() -> None:
    names = spark_schema("events").fieldNames()
    assert names[:4] == ["topic", "partition", "offset", "timestamp"]
    assert set(EVENT_TYPES) <= set(names)
    assert names[-3:] == ["payload", "error", "value"]
    stage = spark_schema("events")["stage_completed"].dataType
    assert stage["task_duration_ms"].dataType.simpleString() == (
        "struct<min:bigint,p50:bigint,p75:bigint,p95:bigint,max:bigint,sum:bigint>"
    )
    aqe = spark_schema("events")["aqe_plan_update"].dataType
    assert aqe["shuffle_reads"].dataType.simpleString().startswith("array<struct<node_id:bigint,coalesced:boolean")
    batch = to_arrow(_records(), "events")
    assert batch.schema.equals(arrow_schema("events"))


def test_event_rows_round_trip_to_the_validated_event() -> None:
    event = example_event("stage_completed", seq=7)
    row = event_row(event.model_dump_json().encode())
    assert row["event_type"] == "stage_completed" and row["seq"] == 7 and row.get("error") is None
    assert row["stage_completed"]["task_duration_ms"]["p50"] == 20
    assert row["value"] == event.model_dump_json().encode()
    assert event_dict(row) == event.model_dump()
    bad = event_row(b"[1]")
    assert bad == {"error": "not a JSON object: got list", "value": b"[1]"} and event_dict(bad) is None
    unknown = event_row(
        b'{"event_type": "new_thing", "cluster": "c", "app_id": "a", "app_name": "n", "seq": 3, '
        b'"emitted_at_ms": 1, "event_time_ms": 1, "extra": [1]}'
    )
    assert unknown["payload"] is not None and unknown["event_type"] == "new_thing" and unknown["seq"] == 3
    assert event_dict(unknown)["extra"] == [1]  # type: ignore[index]


def _writer(parse: str, drop_value: bool = False) -> ClickHouseStreamWriter:
    schema = spark_schema(parse)  # type: ignore[arg-type]
    if drop_value:
        from pyspark.sql.types import StructType

        schema = StructType([f for f in schema.fields if f.name != "value"])
    options = SinkOptions(url="chdb:///nowhere?database=db", sink_id="s")
    return ClickHouseStreamWriter(options, schema, LATEST_VERSION)


def _write(parse: str, drop_value: bool = False) -> SinkMessage:
    batch = to_arrow(_records(), parse)  # type: ignore[arg-type]
    if drop_value:
        batch = batch.drop_columns(["value"])
    half = batch.num_rows // 2
    message = _writer(parse, drop_value).write(iter([batch.slice(0, half), batch.slice(half)]))
    return pickle.loads(pickle.dumps(message))  # noqa: S301 - it travels to the driver pickled


def _sorted(tables: dict[str, dict[str, list[Any]]]) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for name, columns in tables.items():
        rows = list(zip(*columns.values(), strict=True))
        out[name] = sorted(rows, key=repr)
    return out


def test_sink_builds_the_collector_decoder_columns_from_every_layout() -> None:
    values = [r.value for r in _records()]
    decoded = Decoder(schema_for(LATEST_VERSION, "db")).decode(values)
    expected = _sorted({name: chunk.columns for name, chunk in decoded.tables.items()})
    assert set(expected) == {*EVENT_TYPES, RAW_TABLE}
    for message in (_write("raw"), _write("events"), _write("events", drop_value=True)):
        assert _sorted(message.tables) == expected
        assert message.rows == len(values) - 3


def test_sink_dead_letters_carry_the_collector_headers() -> None:
    message = _write("raw")
    assert [dict(d.headers)[HEADER_ERROR] for d in message.dead_letters] == [b"invalid", b"not_json", b"empty"]
    invalid = message.dead_letters[0]
    headers = dict(invalid.headers)
    assert headers[HEADER_TOPIC] == b"events" and headers[HEADER_PARTITION] == b"1"
    assert headers[HEADER_OFFSET] == str(100 + len(_records()) - 3).encode()
    assert b"locality" in headers[HEADER_REASON]
    assert invalid.key == b"app-0" and invalid.value is not None and b"ON_THE_MOON" in invalid.value
    typed = _write("events", drop_value=True)
    assert [dict(d.headers)[HEADER_ERROR] for d in typed.dead_letters] == [b"invalid", b"not_json", b"empty"]


def test_sink_refuses_a_frame_without_events() -> None:
    from pyspark.sql.types import LongType, StructField, StructType

    with pytest.raises(Exception, match="needs a binary value column"):
        ClickHouseStreamWriter(
            SinkOptions(url="chdb:///x", sink_id="s"), StructType([StructField("id", LongType())]), LATEST_VERSION
        )


def test_empty_batches_give_an_empty_message() -> None:
    message = _writer("raw").write(iter([pa.RecordBatch.from_pylist([], schema=arrow_schema("raw"))]))
    assert message.tables == {} and message.rows == 0 and message.dead_letters == []


def test_executor_writes_are_the_default_for_a_server_and_refused_for_chdb() -> None:
    server = "clickhouse://u:p@ch:9000/db"
    assert SinkOptions.from_options({"url": server}).writes == "executors"
    assert SinkOptions.from_options({"url": server, "writes": "Driver"}).writes == "driver"
    assert SinkOptions.from_options({"url": "chdb:///x"}).writes == "driver"
    with pytest.raises(ConfigError, match=r'option writes="executors" needs a ClickHouse server url; chDB is '):
        SinkOptions.from_options({"url": "chdb:///x", "writes": "executors"})
    with pytest.raises(ConfigError, match=r'option writes="tasks" must be executors or driver'):
        SinkOptions.from_options({"url": server, "writes": "tasks"})


def test_executor_writes_outside_a_micro_batch_fail_clearly() -> None:
    options = SinkOptions.from_options({"url": "clickhouse://u:p@ch:9000/db"})
    writer = ClickHouseStreamWriter(options, spark_schema("raw"), (18, 16, 1))
    with pytest.raises(
        StreamingError,
        match=r"writes from executors only inside a streaming micro-batch \(no "
        r"streaming.sql.batchId in the task context\)",
    ):
        writer.write(iter([to_arrow(_records(), "raw")]))


def test_the_commit_message_of_an_executor_write_holds_counts_and_ids_only() -> None:
    message = WrittenMessage(
        batch_id=7,
        partition=1,
        attempt=0,
        rows=50_000,
        tables={"task_end": 49_990, "raw_events": 10},
        dead_letters=2,
        skipped=False,
    )
    assert len(pickle.dumps(message)) < 300
    other = WrittenMessage(7, 0, 1, 5, {"task_end": 5}, 0, skipped=False)
    assert batch_counts([message, other]) == ({"task_end": 49_995, "raw_events": 10}, 2)
    assert batch_counts([]) == ({}, 0)

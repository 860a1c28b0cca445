"""Consumed messages read in one pass, without a Python loop per message: the collector's ``scan_messages`` (C, and
its pure-Python twin) and the streaming source's ``raw_arrow`` give exactly what the per-message code gives."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message

from sparktap.collector.batch import _scan_python, chunk_offsets, scan_messages
from sparktap.collector.streaming.parser import arrow_schema, message_batches, raw_arrow, records, to_arrow
from tests.support.collector_messages import message

C_SCAN = pytest.param(scan_messages, id="c")
PY_SCAN = pytest.param(_scan_python, id="python")


def _chunk() -> list[Message]:
    """Three partitions of two topics interleaved, a null value, an empty one, and two errors (an end of partition
    and a transport error)."""
    eof = Message(topic="events", partition=0, offset=9, error=KafkaError(KafkaError._PARTITION_EOF))
    down = Message(error=KafkaError(KafkaError._TRANSPORT))
    return [
        message(0, 7, b"a" * 10),
        message(1, 100, b"b" * 20),
        message(2, 5, b"c" * 30, topic="other"),
        eof,
        message(0, 8, None),
        message(1, 101, b""),
        down,
        message(2, 6, b"d" * 40, topic="other"),
        message(0, 9, b"e" * 50),
    ]


@pytest.mark.parametrize("scan", [C_SCAN, PY_SCAN])
def test_scan_splits_errors_and_takes_every_message_without_a_budget(scan: object) -> None:
    chunk = _chunk()
    taken, rest, errors, values, size, offsets = scan(chunk, -1)  # type: ignore[operator]
    assert taken == [chunk[i] for i in (0, 1, 2, 4, 5, 7, 8)]
    assert rest == []
    assert errors == [chunk[3], chunk[6]]
    assert values == [b"a" * 10, b"b" * 20, b"c" * 30, None, b"", b"d" * 40, b"e" * 50]
    assert size == 150
    assert offsets == {("events", 0): (7, 9), ("events", 1): (100, 101), ("other", 2): (5, 6)}
    assert offsets == chunk_offsets(taken)


@pytest.mark.parametrize("scan", [C_SCAN, PY_SCAN])
@pytest.mark.parametrize(
    ("room", "count", "size"),
    [(0, 1, 10), (9, 1, 10), (30, 2, 30), (59, 2, 30), (60, 5, 60), (100, 6, 100), (149, 6, 100), (150, 7, 150)],
)
def test_scan_takes_what_fits_in_the_room_and_at_least_one(scan: object, room: int, count: int, size: int) -> None:
    chunk = _chunk()
    good = [chunk[i] for i in (0, 1, 2, 4, 5, 7, 8)]
    taken, rest, errors, values, used, offsets = scan(chunk, room)  # type: ignore[operator]
    assert (taken, rest, used) == (good[:count], good[count:], size)
    assert errors == [chunk[3], chunk[6]]
    assert values == [m.value() for m in good[:count]]
    assert offsets == chunk_offsets(good[:count])


@pytest.mark.parametrize("scan", [C_SCAN, PY_SCAN])
def test_scan_of_nothing(scan: object) -> None:
    assert scan([], -1) == ([], [], [], [], 0, {})  # type: ignore[operator]


def _partition_messages() -> list[Message]:
    """One partition's messages as librdkafka gives them: keys and values, null ones, and no timestamp."""
    out = []
    for i in range(7):
        out.append(
            Message(
                topic="events",
                partition=3,
                offset=40 + i,
                key=None if i == 2 else f"app-{i}".encode(),
                value=None if i == 4 else b"v" * i,
                timestamp=(0, 0) if i == 1 else (1 + i % 2, 1_795_000_000_000 + i),
            )
        )
    return out


def test_raw_arrow_is_the_record_path_batch() -> None:
    messages = _partition_messages()
    batch = raw_arrow(messages, "events", 3)
    assert batch.schema.equals(arrow_schema("raw"))
    assert batch.equals(to_arrow(list(records(messages, "events", 3)), "raw"))
    assert batch.column("timestamp").null_count == 1 and batch.column("timestampType").to_pylist()[:3] == [0, -1, 0]
    assert raw_arrow([], "events", 3).equals(to_arrow([], "raw"))


def test_message_batches_cut_chunks_into_batches_of_the_size() -> None:
    messages = _partition_messages()
    chunks = [messages[:2], messages[2:3], messages[3:]]
    sizes = [b.num_rows for b in message_batches(iter(chunks), "events", 3, "raw", size=3)]
    assert sizes == [3, 3, 1]
    whole = list(message_batches(iter(chunks), "events", 3, "raw", size=100))
    assert len(whole) == 1 and whole[0].equals(raw_arrow(messages, "events", 3))
    events = list(message_batches(iter(chunks), "events", 3, "events", size=4))
    expected = to_arrow(list(records(messages, "events", 3)), "events")
    assert [b.num_rows for b in events] == [4, 3]
    assert events[0].equals(expected.slice(0, 4)) and events[1].equals(expected.slice(4))

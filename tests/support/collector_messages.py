"""Messages and a decoder clock for the collector's unit tests."""

from __future__ import annotations

import functools

import orjson
from confluent_kafka import Message

from sparktap.collector.decode import Decoder as _Decoder
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event

# judge the examples (schemas/examples.py: yesterday, fixed for the day) by a clock 100 s after their event time
Decoder = functools.partial(_Decoder, clock=lambda: EXAMPLE_TIME_MS / 1000 + 100)


def message(partition: int, offset: int, value: bytes | None, topic: str = "events") -> Message:
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=b"app-1",
        value=value,
        headers=[("trace", b"abc")],
        timestamp=(1, 1_795_000_000_123),
    )


def event(seq: int) -> bytes:
    return example_event("task_end", seq=seq).model_dump_json().encode()


def listener_event(seq: int) -> bytes:
    """As the listener writes it: no nulls (the C reader's kind of message)."""
    event = example_event("task_end", seq=seq).model_dump()
    return orjson.dumps({k: v for k, v in event.items() if v is not None})

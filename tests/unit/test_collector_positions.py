"""What the pending batch keeps of each row instead of its message: its partition and offset, from the same C pass
that splits the consumed chunk (``scan_messages(..., where)``) or found in Python; both give the same origins."""

from __future__ import annotations

from array import array

import pytest
from confluent_kafka import KafkaError, Message

from sparktap.collector.batch import Origin, PendingBatch, _scan_python, scan_messages
from sparktap.schemas.schema import schema_for
from tests.support.collector_messages import Decoder, event, message


def _ints(raw: bytes) -> list[int]:
    values = array("q")
    values.frombytes(raw)
    return list(values)


@pytest.mark.parametrize("scan", [scan_messages, _scan_python], ids=["c", "python"])
def test_the_scan_gives_the_partitions_and_offsets_of_the_messages_it_takes(scan: object) -> None:
    chunk = [
        message(3, 2**40, b"a" * 10),
        Message(error=KafkaError(KafkaError._TRANSPORT)),
        message(0, 7, b"b" * 10),
        message(1, 0, None),
        message(0, 8, b"c" * 10),
    ]
    where: list[bytes] = []
    taken, rest, *_ = scan(chunk, 20, where)  # type: ignore[operator]
    assert (len(taken), len(rest)) == (3, 1)  # 10 + 10 + 0 bytes fit in 20, the next 10 does not
    assert [_ints(raw) for raw in where] == [[3, 0, 1], [2**40, 7, 0]]


def test_a_batch_keeps_the_same_origins_with_or_without_the_scan_s_positions() -> None:
    decoder = Decoder(schema_for((26, 9), "db"), arrow=True)
    chunk = [message(p, 10 + i, event(i + 1) if i != 2 else b"junk") for i, p in enumerate((0, 1, 0, 1, 0))]
    batches = []
    for given in (True, False):
        where: list[bytes] = []
        taken, _, _, values, _, offsets = scan_messages(chunk, -1, where)
        batch = PendingBatch()
        batch.add(taken, decoder.decode(values), offsets, where if given else None)
        batches.append(batch)
    for batch in batches:
        assert batch.tables["task_end"].origins == [
            Origin("events", 0, 10),
            Origin("events", 1, 11),
            Origin("events", 1, 13),
            Origin("events", 0, 14),
        ]
        assert [(o, kind) for o, kind, _ in batch.rejects] == [(Origin("events", 0, 12), "not_json")]

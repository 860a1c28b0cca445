"""The offset book (collector/kafka/offsets.py) with INSERT streams: a streamed batch's offsets, and those of every
batch written while the stream is open, become committable only when the stream is confirmed; giving up drops them
all and says where to read again."""

from __future__ import annotations

from sparktap.collector.batch import PendingBatch
from sparktap.collector.kafka.offsets import OffsetBook
from sparktap.collector.metrics import CollectorMetrics


def _batch(offsets: dict[tuple[str, int], tuple[int, int]], messages: int) -> PendingBatch:
    return PendingBatch(offsets=offsets, messages=messages)


def test_streamed_offsets_wait_for_the_confirmation_then_merge_with_the_committable_ones() -> None:
    book = OffsetBook(CollectorMetrics())
    book.inserted(_batch({("t", 0): (0, 9)}, 10))
    book.inserted(_batch({("t", 0): (10, 19), ("t", 1): (0, 4)}, 15), streamed=True)
    book.inserted(_batch({("t", 0): (20, 29)}, 10), streamed=True)
    assert book and book.due(0.0)
    assert [(tp.partition, tp.offset) for tp in book.to_commit()] == [(0, 10)]  # not past the open stream
    assert book.streamed_ends() == {("t", 0): 30, ("t", 1): 5}
    book.stream_confirmed()
    assert sorted((tp.partition, tp.offset) for tp in book.to_commit()) == [(0, 30), (1, 5)]
    assert book.messages == 35 and not book.streamed and book.streamed_messages == 0
    book.committed_now(book.to_commit())
    assert not book and book.committed == {("t", 0): 30, ("t", 1): 5}


def test_giving_up_drops_the_streamed_offsets_too_and_rewinds_to_the_first_of_each_partition() -> None:
    book = OffsetBook(CollectorMetrics())
    book.inserted(_batch({("t", 0): (5, 9)}, 5))
    book.inserted(_batch({("t", 0): (10, 19), ("t", 1): (3, 4)}, 12), streamed=True)
    assert book.touches({("t", 1)}, PendingBatch())
    first, messages = book.drop(_batch({("t", 1): (5, 7), ("t", 2): (0, 0)}, 4))
    assert first == {("t", 0): 5, ("t", 1): 3, ("t", 2): 0}
    assert messages == 5 + 12 + 4
    assert not book and book.to_commit() == []

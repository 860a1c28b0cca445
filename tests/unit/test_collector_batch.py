"""Pending batches: rows, offsets and rejects accounted; Arrow chunks sliced without copies."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparktap.collector.arrowpath import as_list
from sparktap.collector.batch import PendingBatch, fits, message_bytes
from sparktap.schemas.schema import schema_for
from tests.support.collector_messages import Decoder, event, listener_event, message


def test_batch_tracks_rows_offsets_and_rejects() -> None:
    decoder = Decoder(schema_for((26, 9), "db"))
    batch = PendingBatch()
    assert batch.empty and not batch.due(1, 1.0)
    first = [message(0, 10, event(1)), message(1, 3, b"junk"), message(0, 11, event(2))]
    batch.add(first, decoder.decode([m.value() for m in first]))
    second = [message(1, 4, event(3)), message(0, 12, event(4))]
    batch.add(second, decoder.decode([m.value() for m in second]))
    assert (batch.messages, batch.rows) == (5, 4)
    assert [(m.offset(), kind) for m, kind, _ in batch.rejects] == [(3, "not_json")]
    assert batch.tables["task_end"].columns["seq"] == [1, 2, 3, 4]
    assert [m.offset() for m in batch.tables["task_end"].origins] == [10, 11, 4, 12]
    commit = sorted((tp.partition, tp.offset) for tp in batch.commit_offsets())
    assert commit == [(0, 13), (1, 5)]  # the next offset to read, per partition
    assert sorted((tp.partition, tp.offset) for tp in batch.first_offsets()) == [(0, 10), (1, 3)]
    assert batch.due(batch_rows=4, interval=3600.0)
    assert not batch.due(batch_rows=5, interval=3600.0)
    assert batch.started_at is not None
    assert batch.due(batch_rows=5, interval=1.0, now=batch.started_at + 1.0)
    gone = batch.remove_rows("task_end", {1, 2})
    assert [m.offset() for m in gone] == [11, 4]
    assert batch.tables["task_end"].columns["seq"] == [1, 4]
    assert batch.rows == 2
    assert sorted((tp.partition, tp.offset) for tp in batch.commit_offsets()) == [(0, 13), (1, 5)]


@pytest.mark.native
def test_a_batch_of_arrow_chunks_grows_without_copies_and_still_slices_and_drops_rows() -> None:
    decoder = Decoder(schema_for((26, 9), "db"), arrow=True)
    batch = PendingBatch()
    for start in (1, 4, 7):
        chunk = [message(0, 100 + seq, listener_event(seq)) for seq in range(start, start + 3)]
        batch.add(chunk, decoder.decode([m.value() for m in chunk]))
    seq = batch.tables["task_end"].columns["seq"]
    assert isinstance(seq, pa.ChunkedArray) and seq.num_chunks == 3  # one chunk per decoded chunk, none copied
    assert as_list(seq) == list(range(1, 10))
    assert as_list(batch.tables["task_end"].slice(2, 5)["seq"]) == [3, 4, 5]
    assert [m.offset() for m in batch.remove_rows("task_end", {0, 4, 8})] == [101, 105, 109]
    assert as_list(batch.tables["task_end"].columns["seq"]) == [2, 3, 4, 6, 7, 8]
    assert [m.offset() for m in batch.tables["task_end"].origins] == [102, 103, 104, 106, 107, 108]
    assert [(tp.partition, tp.offset) for tp in batch.commit_offsets()] == [(0, 110)]
    assert [(tp.partition, tp.offset) for tp in batch.first_offsets()] == [(0, 101)]


def test_the_byte_budget_makes_a_batch_due_and_counts_what_it_holds() -> None:
    batch = PendingBatch()
    assert not batch.due(10**6, 3600.0, batch_bytes=1)
    batch.bytes = 999
    batch.messages = 1
    batch.started_at = 0.0
    assert not batch.due(10**6, 3600.0, now=1.0, batch_bytes=1000)
    assert not batch.due(10**6, 3600.0, now=1.0, batch_bytes=0)  # 0: no byte budget
    batch.bytes = 1000
    assert batch.due(10**6, 3600.0, now=1.0, batch_bytes=1000)
    batch.bytes, batch.full = 0, True
    assert batch.due(10**6, 3600.0, now=1.0, batch_bytes=1000)
    assert message_bytes([]) == 0
    assert message_bytes([message(0, 0, b"x" * 10), message(0, 1, None), message(1, 0, b"yy")]) == 12


def test_a_chunk_is_cut_where_the_byte_budget_is_full() -> None:
    chunk = [message(0, i, b"x" * 100) for i in range(5)]
    assert fits(chunk, 1_000) == 5
    assert fits(chunk, 300) == 3  # exactly full
    assert fits(chunk, 299) == 2
    assert fits(chunk, 0) == 1  # a message larger than the room is a batch of its own
    assert fits([], 100) == 0


def test_a_batch_is_full_on_rows_bytes_or_a_cut_chunk_never_on_age() -> None:
    batch = PendingBatch()
    assert not batch.due_by_size(1, 1)  # empty
    batch.messages, batch.rows, batch.bytes, batch.started_at = 1, 5, 100, 0.0
    assert batch.due(10, 1.0, now=2.0) and not batch.due_by_size(10, 1000)  # due on age: not a backlog
    assert batch.due_by_size(5, 1000) and batch.due_by_size(10, 100)
    assert not batch.due_by_size(10, 0)  # 0: no byte budget
    batch.full = True
    assert batch.due_by_size(10, 1000)

"""Streaming source offsets: checkpoint JSON, startingOffsets, read limits split by backlog, task ranges."""

from __future__ import annotations

import json

import pytest

from sparktap.collector.streaming.offsets import (
    OffsetFormatError,
    OffsetRange,
    backlog,
    below_target,
    limit_offsets,
    offsets_from_json,
    offsets_text,
    offsets_to_json,
    parse_starting_offsets,
    split_ranges,
)

# ----------------------------------------------------------------------------------------------- JSON


def test_checkpoint_json_is_spark_kafka_format_sorted_and_stable() -> None:
    offsets = {("b", 10): 7, ("a", 2): 5, ("b", 2): 3, ("a", 0): 1}
    as_json = offsets_to_json(offsets)
    assert json.dumps(as_json) == '{"a": {"0": 1, "2": 5}, "b": {"2": 3, "10": 7}}'
    assert offsets_text(offsets) == '{"a":{"0":1,"2":5},"b":{"2":3,"10":7}}'
    # the same offsets in any order give the same text (Spark compares offsets by their JSON)
    assert offsets_to_json(dict(reversed(list(offsets.items())))) == as_json
    assert offsets_from_json(json.dumps(as_json)) == offsets
    assert offsets_from_json(as_json) == offsets


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"logOffset": 3}', "unknown format"),  # a file-source checkpoint
        ("[1, 2]", "unknown format"),
        ('{"t": {"x": 1}}', "not a number"),
        ('{"t": {"0": -2}}', "invalid offset"),
        ('{"t": {"0": "5"}}', "invalid offset"),
        ('{"t": {"0": true}}', "invalid offset"),
        ("{nope", "not JSON"),
    ],
)
def test_foreign_or_broken_checkpoint_fails_clearly(text: str, fragment: str) -> None:
    with pytest.raises(OffsetFormatError, match=fragment):
        offsets_from_json(text, "the start offset in the checkpoint")


def test_starting_offsets() -> None:
    assert parse_starting_offsets(None) == "latest"
    assert parse_starting_offsets(" Earliest ") == "earliest"
    assert parse_starting_offsets("latest") == "latest"
    assert parse_starting_offsets('{"t": {"0": -2, "1": -1, "2": 40}}') == {("t", 0): -2, ("t", 1): -1, ("t", 2): 40}
    with pytest.raises(OffsetFormatError, match="startingOffsets"):
        parse_starting_offsets('{"t": {"0": -3}}')


# ----------------------------------------------------------------------------------------------- read limits


def test_backlog_never_negative() -> None:
    assert backlog({("t", 0): 10, ("t", 1): 4}, {("t", 0): 15, ("t", 1): 2}) == {("t", 0): 5, ("t", 1): 0}


def test_only_partitions_below_the_available_now_target_are_left_to_probe() -> None:
    """latestOffset under Trigger.AvailableNow probes past the listed watermark only where that could matter."""
    listed = {("t", 0): 50, ("t", 1): 7, ("t", 2): 3, ("u", 0): 0}
    target = {("t", 0): 50, ("t", 1): 9, ("t", 2): 1}
    assert below_target(listed, target) == {("t", 1): 7, ("u", 0): 0}  # below its target; born after it
    assert below_target(listed, None) == listed  # no target (not AvailableNow): every partition
    assert below_target(listed, {}) == listed
    assert below_target({}, target) == {}


def test_limit_takes_everything_when_it_fits() -> None:
    start = {("t", 0): 0, ("t", 1): 10}
    latest = {("t", 0): 3, ("t", 1): 12}
    assert limit_offsets(start, latest, 5) == latest
    assert limit_offsets(start, latest, 100) == latest


def test_limit_is_split_in_proportion_to_backlog_and_sums_exactly() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 600, ("t", 1): 300, ("t", 2): 200}  # backlogs 600, 300, 100
    end = limit_offsets(start, latest, 100)
    assert end == {("t", 0): 60, ("t", 1): 30, ("t", 2): 110}
    assert sum(backlog(start, end).values()) == 100


def test_limit_uneven_shares_use_largest_remainder() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 10, ("t", 1): 10, ("t", 2): 10}
    end = limit_offsets(start, latest, 5)
    assert sum(end.values()) == 5
    assert sorted(end.values()) == [1, 2, 2]
    assert end == limit_offsets(start, latest, 5)  # deterministic


def test_small_partition_is_not_starved() -> None:
    start = {("big", 0): 0, ("small", 0): 0}
    latest = {("big", 0): 1_000_000, ("small", 0): 3}
    end = limit_offsets(start, latest, 10)
    assert end[("small", 0)] >= 1
    assert sum(backlog(start, end).values()) == 10


def test_limit_smaller_than_partition_count_favours_biggest_backlogs() -> None:
    start = {("t", p): 0 for p in range(4)}
    latest = {("t", 0): 5, ("t", 1): 50, ("t", 2): 20, ("t", 3): 50}
    end = limit_offsets(start, latest, 2)
    assert end == {("t", 0): 0, ("t", 1): 1, ("t", 2): 0, ("t", 3): 1}


def test_limit_keeps_partitions_without_backlog_and_backwards_offsets() -> None:
    start = {("t", 0): 10, ("t", 1): 50}
    latest = {("t", 0): 30, ("t", 1): 20}  # partition 1 went back: no backlog, end moves back with it
    assert limit_offsets(start, latest, 5) == {("t", 0): 15, ("t", 1): 20}


def test_available_now_limit_five_over_fifteen_messages_takes_three_batches() -> None:
    latest = {("t", 0): 15}
    position = {("t", 0): 0}
    batches = 0
    while position != latest:
        position = limit_offsets(position, latest, 5)
        batches += 1
    assert batches == 3


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_rows"):
        limit_offsets({("t", 0): 0}, {("t", 0): 5}, 0)


# ----------------------------------------------------------------------------------------------- ranges


def _covered(pieces: list[OffsetRange]) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for p in pieces:
        out.setdefault((p.topic, p.partition), []).extend(range(p.start, p.end))
    return out


def test_ranges_without_min_partitions_are_one_per_partition_and_empty_ones_dropped() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 3, 4)]
    assert split_ranges(ranges) == [OffsetRange("t", 0, 0, 10), OffsetRange("t", 2, 3, 4)]


def test_min_partitions_splits_big_ranges_in_proportion() -> None:
    ranges = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 100, 110)]
    pieces = split_ranges(ranges, min_partitions=10)
    # 90 % of the records -> 9 pieces of 10, the small range stays whole
    assert [p for p in pieces if p.partition == 0] == [OffsetRange("t", 0, i, i + 10) for i in range(0, 90, 10)]
    assert [p for p in pieces if p.partition == 1] == [OffsetRange("t", 1, 100, 110)]
    assert _covered(pieces) == {("t", 0): list(range(90)), ("t", 1): list(range(100, 110))}


def test_min_partitions_remainders_go_to_the_last_pieces_and_cover_every_offset() -> None:
    ranges = [OffsetRange("t", 0, 7, 18)]  # 11 records in 3 pieces
    pieces = split_ranges(ranges, min_partitions=3)
    assert [p.size for p in pieces] == [3, 4, 4]
    assert _covered(pieces) == {("t", 0): list(range(7, 18))}


def test_min_partitions_at_or_below_range_count_changes_nothing() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 1)]
    assert split_ranges(ranges, min_partitions=2) == ranges


def test_max_records_per_partition_caps_every_piece() -> None:
    ranges = [OffsetRange("t", 0, 0, 25), OffsetRange("t", 1, 0, 3)]
    pieces = split_ranges(ranges, max_records_per_partition=10)
    assert max(p.size for p in pieces) <= 10
    assert len([p for p in pieces if p.partition == 0]) == 3
    assert _covered(pieces) == {("t", 0): list(range(25)), ("t", 1): list(range(3))}

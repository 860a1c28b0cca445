"""Kafka offsets of the streaming source: the checkpoint format, read limits and range splitting (pure logic).

The checkpoint format is Spark's own Kafka source format, plain JSON ``{"topic": {"partition": offset}}`` with
partitions as strings, topics and partitions sorted: Spark compares offsets by their JSON text, so the same
offsets must always serialise to the same text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sparktap.errors import SparktapError

TopicPartition = tuple[str, int]
"""(topic, partition)"""
Offsets = dict[TopicPartition, int]
"""The next offset to read, per topic-partition."""

EARLIEST = -2
"""In ``startingOffsets`` JSON: start this partition at its earliest offset (Spark's convention)."""
LATEST = -1
"""In ``startingOffsets`` JSON: start this partition at its latest offset (Spark's convention)."""


class StreamingError(SparktapError):
    """The streaming source or sink cannot go on."""


class OffsetFormatError(StreamingError):
    """An offset JSON (checkpoint or ``startingOffsets``) is not ``{"topic": {"partition": offset}}``."""


class DataLossError(StreamingError):
    """Offsets the query needs are gone from Kafka (``failOnDataLoss=true``)."""


# ----------------------------------------------------------------------------------------------- JSON


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The checkpoint form: topics sorted, partitions sorted numerically, partition numbers as strings."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def offsets_text(offsets: Mapping[TopicPartition, int]) -> str:
    """The compact JSON text of offsets (for messages and logs)."""
    return json.dumps(offsets_to_json(offsets), separators=(",", ":"))


def offsets_from_json(obj: Any, what: str = "offset", allow_sentinels: bool = False) -> Offsets:
    """Parse ``{"topic": {"partition": offset}}``; OffsetFormatError naming ``what`` when it is anything else.

    ``allow_sentinels`` admits -2 (earliest) and -1 (latest), as ``startingOffsets`` does; a checkpoint holds
    concrete offsets only.
    """
    if isinstance(obj, str | bytes):
        try:
            obj = json.loads(obj)
        except ValueError as exc:
            raise OffsetFormatError(f'{what} is not JSON: {exc}; expected {{"topic": {{"0": 42}}}}') from exc
    if not isinstance(obj, dict):
        raise OffsetFormatError(
            f'{what} has an unknown format: expected {{"topic": {{"partition": offset}}}}, got {_preview(obj)}; '
            "was this checkpoint written by another source? Start the query with a new checkpoint directory"
        )
    out: Offsets = {}
    lowest = EARLIEST if allow_sentinels else 0
    for topic, partitions in obj.items():
        if not isinstance(topic, str) or not isinstance(partitions, dict):
            raise OffsetFormatError(
                f'{what} has an unknown format at topic={_preview(topic)}: expected {{"partition": offset}}, '
                f"got {_preview(partitions)}; was this checkpoint written by another source?"
            )
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError) as exc:
                raise OffsetFormatError(
                    f'{what} has a partition that is not a number: topic="{topic}" partition={_preview(partition)}'
                ) from exc
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < lowest or number < 0:
                raise OffsetFormatError(
                    f'{what} has an invalid offset topic="{topic}" partition={number} offset={_preview(offset)}: '
                    f"expected an integer >= {lowest}"
                )
            out[(topic, number)] = offset
    return out


def _preview(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


StartingOffsets = Literal["earliest", "latest"] | Offsets


def parse_starting_offsets(text: str | None) -> StartingOffsets:
    """``earliest``, ``latest`` (the default, as in Spark) or per-partition JSON with -2/-1 sentinels."""
    if text is None or not text.strip():
        return "latest"
    value = text.strip()
    if value.lower() in ("earliest", "latest"):
        return "earliest" if value.lower() == "earliest" else "latest"
    return offsets_from_json(value, "option startingOffsets", allow_sentinels=True)


# ----------------------------------------------------------------------------------------------- read limits


def backlog(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Records between start and end per partition in ``end`` (never negative; a partition absent from start
    counts from 0, i.e. callers pass the earliest offset of new partitions in ``start``)."""
    return {tp: max(0, offset - start.get(tp, 0)) for tp, offset in end.items()}


def below_target(listed: Mapping[TopicPartition, int], target: Mapping[TopicPartition, int] | None) -> Offsets:
    """The listed latest offsets that could still matter past ``target`` (offsets never read past, as
    Trigger.AvailableNow's): those of partitions without a target or below it; all of them without a target."""
    if not target:
        return dict(listed)
    return {tp: off for tp, off in listed.items() if tp not in target or off < target[tp]}


def limit_offsets(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int) -> Offsets:
    """The end offsets reading at most ``max_rows`` records, shared across partitions in proportion to their
    backlog (``latest - start``).

    Shares are exact (they sum to ``min(max_rows, total backlog)``; Spark's own rounding can exceed the limit):
    each partition gets the floor of its proportional quota, at least one record while the limit allows (so a
    small partition is not starved behind a big one; when the limit is below the number of partitions with a
    backlog, the biggest backlogs win), and the records left over go by largest remainder. Ties break by
    topic-partition, so the split is deterministic. Partitions of ``latest`` missing from ``start`` must be
    given in ``start`` at their first offset.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    sizes = backlog(start, latest)
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(latest)
    waiting = sorted(tp for tp in sizes if sizes[tp] > 0)
    quota = {tp: max_rows * sizes[tp] / total for tp in waiting}
    share = {tp: max(1, min(sizes[tp], math.floor(quota[tp]))) for tp in waiting}
    excess = sum(share.values()) - max_rows
    while excess > 0:  # minimum shares overshot: take back from the most over-served
        tp = max((tp for tp in waiting if share[tp] > 0), key=lambda t: (share[t] - quota[t], -sizes[t]))
        share[tp] -= 1
        excess -= 1
    while excess < 0:  # floors left records over: largest remainder first
        tp = max((tp for tp in waiting if share[tp] < sizes[tp]), key=lambda t: (quota[t] - share[t], sizes[t]))
        share[tp] += 1
        excess += 1
    return {tp: start.get(tp, 0) + share[tp] if tp in share else latest[tp] for tp in latest}


# ----------------------------------------------------------------------------------------------- ranges


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets [start, end) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def split_ranges(
    ranges: Iterable[OffsetRange], min_partitions: int | None = None, max_records_per_partition: int | None = None
) -> list[OffsetRange]:
    """Split ranges into Spark tasks: empty ranges dropped; with ``min_partitions`` above the number of ranges,
    big ranges are cut in proportion to their share of all records (Spark's KafkaOffsetRangeCalculator); with
    ``max_records_per_partition``, no piece holds more records than that. Pieces are contiguous and cover every
    offset exactly once."""
    pieces = [r for r in ranges if r.size > 0]
    if min_partitions is not None and min_partitions > len(pieces):
        total = sum(r.size for r in pieces)
        split: list[OffsetRange] = []
        for r in pieces:
            parts = max(math.floor(r.size / total * min_partitions + 0.5), 1)
            split.extend(_cut(r, parts))
        pieces = split
    if max_records_per_partition is not None:
        if max_records_per_partition < 1:
            raise ValueError(f"max_records_per_partition must be >= 1, got {max_records_per_partition}")
        pieces = [p for r in pieces for p in _cut(r, math.ceil(r.size / max_records_per_partition))]
    return pieces


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` contiguous pieces of nearly equal size (the last pieces take the remainder)."""
    out: list[OffsetRange] = []
    remaining, start = r.size, r.start
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        if size > 0:
            out.append(OffsetRange(r.topic, r.partition, start, start + size))
        start += size
    return out

"""The pending batch: rows decoded since the last commit, per table, and the offsets they cover.

The batch keeps the decoded columns and, per row, where its message came from (partition and offset: 16 bytes),
never the consumed messages themselves: a row ClickHouse refuses is read back from Kafka by its offset for the
dead-letter topic (``reread.py``), since its offsets are not committed before the batch is settled.

A batch is flushed when it holds ``batch_rows`` rows, or ``batch_bytes`` bytes (the byte budget that bounds the
collector's memory, docs/collector.md: the Arrow columns' buffers, the message bytes of rows decoded into Python
values, 16 bytes a row of origin), or its oldest message is ``batch_interval_seconds`` old (the
defaults, 30,000 rows / 16 MiB / 1 s, give ClickHouse one insert per table about once a second, of >= 1,000 rows
at >= 1,000 events/s, and never more than a few inserts per second at 100,000 events/s; 16 MiB holds ~38,000
listener ``task_end`` rows, so a backlog's batches end on rows, not on the budget, whose cut rewinds the rest of a
chunk and costs a refetch: 40,000 rows was measured slower end to end, docs/benchmarks.md). Its offsets — the next
offset per partition — are committed only after every table's insert and every dead letter succeeded.
"""

from __future__ import annotations

import builtins
import functools
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Message, TopicPartition

from sparktap import native
from sparktap.collector.arrowpath import as_list, concat, is_arrow, take
from sparktap.collector.decode import Decoded, RejectKind


def message_bytes(messages: Sequence[Message]) -> int:
    """The value bytes of consumed messages (what the byte budget counts; keys and headers are small)."""
    return sum(len(v) for v in map(Message.value, messages) if v is not None)


def fits(messages: Sequence[Message], room: int) -> int:
    """How many of ``messages``, from the first, fit in ``room`` bytes (at least one: a message larger than the
    whole budget is a batch of its own)."""
    used = 0
    for i, msg in enumerate(messages):
        value = msg.value()
        used += len(value) if value is not None else 0
        if used > room:
            return max(i, 1)
    return len(messages)


Offsets = dict[tuple[str, int], tuple[int, int]]
"""(topic, partition) -> (first offset, last offset)"""


def _scan_python(
    messages: list[Message], room: int, where: list[bytes] | None = None
) -> tuple[list[Message], list[Message], list[Message], list[bytes | None], int, Offsets]:
    """``scan_messages`` without the C extension (a pure-Python install): the same split, from the budget
    (``fits``), byte count (``message_bytes``) and offsets (``chunk_offsets``) the batch uses elsewhere."""
    errors = [m for m in messages if m.error() is not None]
    ok = [m for m in messages if m.error() is None] if errors else messages
    n = fits(ok, room) if room >= 0 else len(ok)
    taken, rest = ok[:n], ok[n:]
    if where is not None:
        where.append(array("q", cast(Iterable[int], map(Message.partition, taken))).tobytes())
        where.append(array("q", cast(Iterable[int], map(Message.offset, taken))).tobytes())
    return taken, rest, errors, [m.value() for m in taken], message_bytes(taken), chunk_offsets(taken)


if native.unavailable() is None:
    from sparktap.native._flatjson import MessageChunk
    from sparktap.native._flatjson import scan_messages as _scan_c
else:  # switched off or not compiled: the Python loop does the same (and the consumer is confluent-kafka's)
    _scan_c = MessageChunk = None  # type: ignore[assignment,misc]


def scan_messages(
    messages: Sequence[Message], room: int = -1, where: list[bytes] | None = None
) -> tuple[list[Message], list[Message], list[Message], list[bytes | None], int, Offsets]:
    """One pass over consumed messages: ``(taken, rest, errors, values, size, offsets)``.

    ``errors``: the messages carrying an error (in order); ``taken``: the others, from the first, while their value
    bytes fit in ``room`` (at least one; ``room < 0``: all), with their ``values``, those values' ``size`` in bytes
    and ``offsets``, per (topic, partition) the first and the last offset taken (librdkafka hands out each
    partition's messages in offset order); ``rest``: the messages without error past the budget. In C
    (``_flatjson.scan_messages``: the messages' methods called through the C-API, no Python loop per message) when
    compiled. Given a list ``where``, the taken messages' partitions and offsets are appended to it as two
    ``bytes`` of native 8-byte integers (what ``PendingBatch.add`` keeps of each row).

    A ``MessageChunk`` (the collector's own consumer, collector/kafka/librdkafka.py) is scanned where its messages lie:
    ``taken`` and ``rest`` are chunks then, and ``values`` a view of the taken messages' values that the C reader
    parses in place (indexing it gives bytes)."""
    if MessageChunk is not None and isinstance(messages, MessageChunk):
        return cast(Any, messages.scan(room) if where is None else messages.scan(room, where))
    listed = messages if isinstance(messages, list) else list(messages)
    if _scan_c is not None:
        return cast(Any, _scan_c(listed, room) if where is None else _scan_c(listed, room, where))
    return _scan_python(listed, room, where)


def chunk_offsets(messages: Sequence[Message]) -> Offsets:
    """Per partition, the first and the last offset of a chunk of consumed messages: librdkafka hands out each
    partition's messages in offset order, so the first occurrence of a partition has its lowest offset and the last
    one its highest. dict(zip()) keeps the last value per key, without a Python loop over the messages. (a consumed
    message always has its topic, partition and offset: the Nones in their types are for others)"""
    keys = cast(
        list[tuple[str, int]],
        list(zip(map(Message.topic, messages), map(Message.partition, messages), strict=True)),
    )
    offsets = cast(list[int], list(map(Message.offset, messages)))
    last = dict(zip(keys, offsets, strict=True))
    first = dict(zip(reversed(keys), reversed(offsets), strict=True))
    return {key: (first[key], high) for key, high in last.items()}


ORIGIN_BYTES = 16
"""what the batch keeps per row besides its columns: its message's partition and offset (two 8-byte integers)"""


class Origin:
    """Where a row's message is in Kafka: its topic, partition and offset (read it back from there, ``reread.py``).
    Its methods are named as a ``Message``'s, so either can tell where a row came from."""

    __slots__ = ("_offset", "_partition", "_topic")

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> tuple[str, int, int]:
        return (self._topic, self._partition, self._offset)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Origin) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"Origin({self._topic!r}, {self._partition}, {self._offset})"

    @classmethod
    def of(cls, message: Message) -> Origin:
        return cls(message.topic() or "", message.partition() or 0, message.offset() or 0)


class Positions:
    """Per consumed message of a chunk, its partition (with the topic's index in ``topics`` above bit 32) and its
    offset, as two arrays of 8-byte integers: ``map`` over the messages' C methods, no Python loop per message
    when the chunk holds one topic (the collector's case)."""

    __slots__ = ("codes", "offsets")

    def __init__(self, codes: array[int], offsets: array[int]) -> None:
        self.codes, self.offsets = codes, offsets

    @classmethod
    def of(
        cls,
        messages: Sequence[Message],
        topics: list[str],
        offsets: Offsets | None = None,
        where: Sequence[bytes] | None = None,
    ) -> Positions:
        """``where``: the partitions and offsets ``scan_messages`` gave (used when the chunk holds only the
        batch's first topic)."""
        chunk_topics = {t for t, _ in offsets} if offsets is not None else set(map(Message.topic, messages))
        one_topic = len(chunk_topics) == 1 and next(iter(chunk_topics)) in topics[:1]
        if one_topic and where is not None and len(where) == 2:
            codes, positions = array("q"), array("q")
            codes.frombytes(where[0])
            positions.frombytes(where[1])
            if len(codes) == len(positions) == len(messages):
                return cls(codes, positions)
        if one_topic:
            codes = array("q", cast(Iterable[int], map(Message.partition, messages)))
        else:
            for topic in sorted(t or "" for t in chunk_topics):
                if topic not in topics:
                    topics.append(topic)
            index = {t: i << 32 for i, t in enumerate(topics)}
            codes = array("q", [index[m.topic() or ""] | (m.partition() or 0) for m in messages])
        return cls(codes, array("q", cast(Iterable[int], map(Message.offset, messages))))


@functools.lru_cache(maxsize=4)
def _positions(count: int) -> list[int]:
    """[0, 1, … count - 1] (compared with a chunk's row positions; never modified)"""
    return list(range(count))


def _held(columns: dict[str, Any], messages: Sequence[Message], indices: Sequence[int] | None) -> int:
    """The bytes a table's decoded chunk holds: the Arrow columns' buffers, or, for columns of Python values (the
    pydantic path), its messages' value bytes (as before: the batch's factor in docs/collector.md covers the
    objects), plus ``ORIGIN_BYTES`` a row."""
    rows = len(messages) if indices is None else len(indices)
    if columns and all(map(is_arrow, columns.values())):
        return sum(values.nbytes for values in columns.values()) + ORIGIN_BYTES * rows
    picked = messages if indices is None else [messages[i] for i in indices]
    return message_bytes(picked) + ORIGIN_BYTES * rows


@dataclass
class TableRows:
    """Rows of one table in the batch, column-oriented, with where each row's message is in Kafka (``codes``: the
    partition, with the topic's index in ``topics`` above bit 32; ``positions``: the offset)."""

    columns: dict[str, Any]
    """column -> values: a list, or an Arrow array (the Arrow path)"""
    codes: array[int]
    positions: array[int]
    topics: list[str]
    inserted: bool = False

    @property
    def rows(self) -> int:
        return len(self.positions)

    def origin(self, row: int) -> Origin:
        code = self.codes[row]
        return Origin(self.topics[code >> 32], code & 0xFFFFFFFF, self.positions[row])

    @property
    def origins(self) -> list[Origin]:
        """Where each row's message is, in row order."""
        return [self.origin(i) for i in range(self.rows)]

    def slice(self, start: int, stop: int) -> dict[str, Any]:
        return {name: values[start:stop] for name, values in self.columns.items()}


@dataclass
class PendingBatch:
    """Everything consumed since the last commit."""

    tables: dict[str, TableRows] = field(default_factory=dict)
    offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    """(topic, partition) -> (first offset, last offset) consumed"""
    rejects: list[tuple[Origin, RejectKind, str]] = field(default_factory=list)
    """the messages dead-lettered at decoding (sent at once; kept here to count them)"""
    messages: int = 0
    rows: int = 0
    bytes: int = 0
    """what the batch holds (what the byte budget counts): the Arrow columns' buffers, the message bytes of rows
    decoded into Python values, ``ORIGIN_BYTES`` a row"""
    full: bool = False
    """the next consumed message did not fit in the byte budget: flush now"""
    started_at: float | None = None
    topics: list[str] = field(default_factory=list)
    """the topics of the rows' origins (one for the collector: a topic's index is stored with each partition)"""

    @property
    def empty(self) -> bool:
        return self.messages == 0

    def applications(self) -> set[tuple[str, str]]:
        """The (cluster, app_id) pairs the batch's rows belong to: what to evaluate once it is in ClickHouse."""
        apps: set[tuple[str, str]] = set()
        for table in self.tables.values():
            clusters, app_ids = table.columns.get("cluster"), table.columns.get("app_id")
            if clusters is None or app_ids is None:
                continue
            if is_arrow(clusters) or is_arrow(app_ids):
                import pyarrow as pa

                pairs = pa.table({"c": clusters, "a": app_ids}).group_by(["c", "a"]).aggregate([])
                apps.update(zip(as_list(pairs["c"]), as_list(pairs["a"]), strict=True))
            else:
                apps.update(zip(clusters, app_ids, strict=True))
        return apps

    def add(
        self,
        messages: Sequence[Message],
        decoded: Decoded,
        offsets: Offsets | None = None,
        where: Sequence[builtins.bytes] | None = None,
    ) -> None:
        """Add a decoded chunk (``decoded`` indices refer to ``messages``; ``offsets``: their first and last offset
        per partition, and ``where``: their partitions and offsets, as ``scan_messages`` gives them; both are found
        here when not given). The messages themselves are not kept:
        only their columns and positions."""
        if not messages:
            return
        if self.started_at is None:
            self.started_at = time.monotonic()
        if offsets is None:
            offsets = chunk_offsets(messages)
        for key, (low, high) in offsets.items():
            seen = self.offsets.get(key)
            if seen is None:
                self.offsets[key] = (low, high)
            elif high > seen[1]:
                self.offsets[key] = (seen[0], high)
        self.messages += len(messages)
        if not self.topics:
            self.topics.append(next(iter(offsets))[0])
        found = Positions.of(messages, self.topics, offsets, where)
        for name, chunk in decoded.tables.items():
            every = len(chunk.indices) == len(messages) and chunk.indices == _positions(len(messages))
            if every:  # every message, in order: the common chunk
                codes, positions = found.codes, found.offsets
            else:
                codes = array("q", [found.codes[i] for i in chunk.indices])
                positions = array("q", [found.offsets[i] for i in chunk.indices])
            self.bytes += _held(chunk.columns, messages, None if every else chunk.indices)
            table = self.tables.get(name)
            if table is None:
                self.tables[name] = TableRows(chunk.columns, codes, positions, self.topics)
            else:
                for column, values in chunk.columns.items():
                    table.columns[column] = concat(table.columns[column], values)
                table.codes.extend(codes)
                table.positions.extend(positions)
            self.rows += chunk.rows
        for reject in decoded.rejects:
            self.rejects.append((Origin.of(messages[reject.index]), reject.kind, reject.reason))

    def due_by_size(self, batch_rows: int, batch_bytes: int = 0) -> bool:
        """Whether the batch is full: ``batch_rows`` rows, ``batch_bytes`` bytes held (0: no byte budget), or a
        consumed chunk cut at the budget (a backlog, where an age-due batch means the messages came slower)."""
        return not self.empty and (self.full or self.rows >= batch_rows or 0 < batch_bytes <= self.bytes)

    def due(self, batch_rows: int, interval: float, now: float | None = None, *, batch_bytes: int = 0) -> bool:
        """Whether to flush: ``batch_rows`` rows, ``batch_bytes`` bytes held (0: no byte budget), or age."""
        if self.empty:
            return False
        if self.due_by_size(batch_rows, batch_bytes):
            return True
        assert self.started_at is not None  # noqa: S101 - set with the first message
        return (time.monotonic() if now is None else now) - self.started_at >= interval

    def seconds_until_due(self, interval: float, now: float | None = None) -> float:
        if self.started_at is None:
            return interval
        return max(0.0, interval - ((time.monotonic() if now is None else now) - self.started_at))

    def commit_offsets(self) -> list[TopicPartition]:
        """The offsets to commit: the next offset after the last consumed one, per partition."""
        return [TopicPartition(topic, partition, last + 1) for (topic, partition), (_, last) in self.offsets.items()]

    def first_offsets(self) -> list[TopicPartition]:
        """Where each partition must be re-read from if this batch is given up while its partitions stay ours."""
        return [TopicPartition(topic, partition, first) for (topic, partition), (first, _) in self.offsets.items()]

    def remove_rows(self, table: str, drop: set[int]) -> list[Origin]:
        """Take rows out of a table (they go to the dead-letter topic); returns where their messages are."""
        rows = self.tables[table]
        gone = [rows.origin(i) for i in sorted(drop)]
        keep = [i for i in range(rows.rows) if i not in drop]
        rows.columns = {name: take(values, keep) for name, values in rows.columns.items()}
        rows.codes = array("q", [rows.codes[i] for i in keep])
        rows.positions = array("q", [rows.positions[i] for i in keep])
        self.rows -= len(gone)
        if not keep:
            del self.tables[table]
        return gone

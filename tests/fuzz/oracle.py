"""The fuzz target's checks, called by flatjson_fuzz.c for every input (run inside the sanitizer-built binary).

``setup()`` builds the task_end C reader (the sanitizer-instrumented ``_flatjson`` the harness compiled in, registered
as ``sparktap.native._flatjson`` before anything imports it) and the collector's Decoder on the Arrow path.
``one(data)`` splits the input into messages at NUL bytes and checks:

1. the C reader against orjson, message by message (a differential oracle): a message the reader takes is one JSON
   object orjson reads too; every known field the reader filled holds exactly orjson's value (int within the field's
   bounds, bool, string within its choices); a field it left empty is absent (and not required);
2. the whole decode path (C reader, Arrow checks, Python fast path, pydantic): every message is either stored
   (one row) or rejected with a kind and a non-empty reason, never both and never neither; nothing raises;
3. the same messages as a ``MessageChunk`` (the consumer's messages where librdkafka keeps them,
   native/_kafkachunk.c): its scan, its values view read by the reader and the decode path exactly as the list,
   and no read once released (``check_chunk``).

An AssertionError (or any exception) makes the harness abort, which libFuzzer reports as a finding with the input.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import orjson

_READER: Any = None
_SPEC: list[tuple[bytes, int, bool, int, int, tuple[bytes, ...] | None]] = []
_DECODER: Any = None
MAX_BYTES = int(os.environ.get("SPARKTAP_FUZZ_MAX_BYTES", "4096"))
DECODE = os.environ.get("SPARKTAP_FUZZ_DECODE", "1") != "0"
_KIND_INT, _KIND_BOOL, _KIND_STR = 0, 1, 2


def setup() -> None:
    global _READER, _SPEC, _DECODER
    from sparktap.collector.arrowpath import ArrowReader
    from sparktap.collector.checks import compile_rules
    from sparktap.collector.decode import Decoder
    from sparktap.native._flatjson import Reader
    from sparktap.schemas.examples import example_event
    from sparktap.schemas.schema import schema_for

    schema = schema_for((26, 9), "fuzz")
    table = schema.tables["task_end"]
    _SPEC = ArrowReader(table, compile_rules(table), MAX_BYTES).spec
    _READER = Reader(_SPEC, MAX_BYTES)
    now = example_event("task_end").event_time_ms / 1000  # the corpus's events are the examples'
    _DECODER = Decoder(schema, MAX_BYTES, arrow=True, clock=lambda: now)


def _value(column: tuple[bytes, bytes | None, int, bytes | None], kind: int, row: int) -> Any:
    data, offsets, nulls, validity = column
    if nulls and validity is not None and not validity[row >> 3] & (1 << (row & 7)):
        return None
    if kind == _KIND_INT:
        return struct.unpack_from("<q", data, 8 * row)[0]
    if kind == _KIND_BOOL:
        return bool(data[row])
    assert offsets is not None
    start, stop = struct.unpack_from("<ii", offsets, 4 * row)
    return data[start:stop].decode("utf-8")


def check_reader(messages: list[bytes]) -> None:
    rows, columns, skipped = _READER.read(messages)
    left = set(skipped)
    assert skipped == sorted(left), "skipped positions are in order, once each"
    taken = [i for i in range(len(messages)) if i not in left]
    assert rows == len(taken), (rows, taken)
    assert len(columns) == len(_SPEC)
    for row, index in enumerate(taken):
        message = messages[index]
        assert len(message) <= MAX_BYTES
        obj = orjson.loads(message)  # the reader took it: it must be JSON …
        assert type(obj) is dict, "… and one object"
        for (name, kind, required, lo, hi, choices, fill), column in zip(_SPEC, columns, strict=True):
            got = _value(column, kind, row)
            key = name.decode()
            if key not in obj:  # a field left out: its fill value when the spec gives one, else a null
                want_missing = None if fill is None else (bool(fill) if kind == _KIND_BOOL else fill)
                assert got == want_missing and not required, (key, got)
                continue
            want = obj[key]
            if kind == _KIND_INT:
                assert type(want) is int and lo <= want <= hi and got == want, (key, want, got)
            elif kind == _KIND_BOOL:
                assert type(want) is bool and got is want, (key, want, got)
            else:
                assert type(want) is str and got == want, (key, want, got)
                assert choices is None or want.encode() in choices, (key, want)


def check_decode(messages: list[bytes]) -> None:
    decoded = _DECODER.decode(messages)
    stored = [i for chunk in decoded.tables.values() for i in chunk.indices]
    rejected = [r.index for r in decoded.rejects]
    assert len(stored) == len(set(stored)), "a message stored twice"
    assert not set(stored) & set(rejected), "a message both stored and dead-lettered"
    assert sorted(stored + rejected) == list(range(len(messages))), "a message neither stored nor dead-lettered"
    for reject in decoded.rejects:
        assert reject.kind and reject.reason.strip(), reject


def _columns(decoded: Any) -> dict[str, tuple[list[int], dict[str, list[Any]]]]:
    def values(column: Any) -> list[Any]:
        return column.to_pylist() if hasattr(column, "to_pylist") else list(column)

    return {name: (list(t.indices), {c: values(v) for c, v in t.columns.items()}) for name, t in decoded.tables.items()}


def _read_rows(values: Any) -> tuple[int, list[int], list[list[Any]]]:
    """The reader's rows as values (its buffers' bytes past them, and under nulls, are not set: never compared)."""
    rows, columns, skipped = _READER.read(values)
    kinds = [spec[1] for spec in _SPEC]
    return rows, skipped, [[_value(c, k, row) for c, k in zip(columns, kinds, strict=True)] for row in range(rows)]


def check_chunk(messages: list[bytes]) -> None:
    """The same messages as a MessageChunk (the harness's ``fuzz_chunk``: payloads in heap blocks of exactly their
    size, partitions 0, 1, 2 in turn, offset = position): its scan and values give what the bytes give, the reader
    and the decode path read its values view exactly as the list, and once released it raises."""
    from sparktap.native._flatjson import fuzz_chunk  # type: ignore[attr-defined] # the harness's

    chunk = fuzz_chunk(messages, lambda address: address)
    where: list[bytes] = []
    taken, rest, errors, values, size, offsets = chunk.scan(-1, where)
    assert (len(taken), len(rest), errors) == (len(messages), 0, [])
    assert size == sum(map(len, messages)) and list(values) == messages
    n = len(messages)
    assert offsets == {("fuzz", p): (p, p + 3 * ((n - 1 - p) // 3)) for p in range(min(n, 3))}, offsets
    assert where == [struct.pack(f"{n}q", *(i % 3 for i in range(n))), struct.pack(f"{n}q", *range(n))]
    room = size // 2
    cut = chunk.scan(room)
    fits = next((i for i in range(1, n + 1) if sum(map(len, messages[:i])) > room), n + 1) - 1
    assert (len(cut[0]), len(cut[1])) == (max(fits, 1), n - max(fits, 1)) and list(cut[3]) == messages[: len(cut[0])]
    assert _read_rows(values) == _read_rows(messages)
    if DECODE:
        by_view, by_list = _DECODER.decode(values), _DECODER.decode(messages)
        assert by_view.rejects == by_list.rejects and _columns(by_view) == _columns(by_list)
    chunk.release()
    for read in (lambda: values[0], lambda: _READER.read(values)):
        try:
            read()
        except RuntimeError:
            continue
        raise AssertionError("a released chunk was read")


def one(data: bytes) -> None:
    messages = data.split(b"\x00")[:16]
    check_reader(messages)
    if DECODE:
        check_decode(messages)
    check_chunk(messages)

"""The C reader of the collector's hot path (native/_flatjson.c): which messages it takes, and the exact rows.

It must never be laxer than the contract: a message it takes is one the stdlib JSON parser reads to the same
values, with the same types. The last test checks that against a reference on random mutants of real messages.
"""

from __future__ import annotations

import json
import random
import struct
from typing import Any

import orjson
import pytest

from bench._collector_data import task_messages
from sparktap.native._flatjson import Reader

pytestmark = pytest.mark.native

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UNICODE = "caf\u00e9 \u65e5\u672c \U0001f680"  # 2-, 3- and 4-byte UTF-8
# (name, kind, required, lo, hi, choices): kind 0 int, 1 bool, 2 str
SPEC: list[tuple[bytes, int, bool, int, int, tuple[bytes, ...] | None]] = [
    (b"a", 0, True, 0, 100, None),
    (b"n", 0, False, INT64_MIN, INT64_MAX, None),
    (b"b", 1, False, 0, 0, None),
    (b"s", 2, False, 0, 0, None),
    (b"e", 2, False, 0, 0, (b"x", b"y")),
]


def _rows(spec: list[Any], out: tuple[int, list[Any], list[int]]) -> list[dict[str, Any]]:
    """The reader's column buffers back as row dicts (missing fields left out)."""
    rows, columns, _ = out
    result: list[dict[str, Any]] = [{} for _ in range(rows)]
    for (name, kind, *_), (data, offsets, nulls, validity) in zip(spec, columns, strict=True):
        for i in range(rows):
            if nulls and not validity[i >> 3] >> (i & 7) & 1:
                continue
            if kind == 0:
                value: Any = struct.unpack_from("<q", data, 8 * i)[0]
            elif kind == 1:
                value = bool(data[i])
            else:
                start, stop = struct.unpack_from("<ii", offsets, 4 * i)
                value = data[start:stop].decode()
            result[i][name.decode()] = value
    return result


def _taken(message: Any, spec: list[Any] = SPEC, max_bytes: int = 1 << 20) -> list[dict[str, Any]] | None:
    out = Reader(spec, max_bytes).read([message])
    assert out[2] == ([] if out[0] else [0])
    return _rows(spec, out)[0] if out[0] else None


@pytest.mark.parametrize(
    ("message", "row"),
    [
        (b'{"a":1}', {"a": 1}),
        (b' {\t"a" : 7 ,\r\n "b":true } \n', {"a": 7, "b": True}),
        (b'{"b":false,"a":0}', {"a": 0, "b": False}),
        (b'{"a":-0}', {"a": 0}),
        (b'{"a":100,"n":9223372036854775807}', {"a": 100, "n": INT64_MAX}),
        (b'{"a":1,"n":-9223372036854775808}', {"a": 1, "n": INT64_MIN}),
        ('{"a":1,"s":"caf\u00e9 \u65e5\u672c \U0001f680"}'.encode(), {"a": 1, "s": UNICODE}),
        (b'{"a":1,"s":"\x7f"}', {"a": 1, "s": "\x7f"}),
        (b'{"a":1,"s":""}', {"a": 1, "s": ""}),
        (b'{"a":1,"e":"y"}', {"a": 1, "e": "y"}),
        # a newer minor version's fields: skipped when scalar, as the model ignores them
        (b'{"z":2,"a":1}', {"a": 1}),
        (b'{"a":1,"z":"new","y":-1.5e3,"x":0.25,"w":null,"v":true,"u":false,"t":1E+2}', {"a": 1}),
    ],
)
def test_plain_flat_objects_are_taken_with_their_values(message: bytes, row: dict[str, Any]) -> None:
    assert _taken(message) == row


@pytest.mark.parametrize(
    "message",
    [
        b"{}",  # the required field is missing
        b'{"n":1}',
        b'{"a":"1"}',
        b'{"a":true}',
        b'{"a":1.0}',
        b'{"a":1e2}',
        b'{"a":01}',
        b'{"a":-}',
        b'{"a":+1}',  # not an integer
        b'{"a":101}',
        b'{"a":-1}',  # out of the field's bounds
        b'{"a":1,"n":9223372036854775808}',
        b'{"a":1,"n":-9223372036854775809}',
        b'{"a":1,"n":12345678901234567890}',
        b'{"a":1,"b":1}',
        b'{"a":1,"b":True}',
        b'{"a":1,"b":"true"}',
        b'{"a":1,"b":tru}',
        b'{"a":1,"a":2}',  # duplicate key
        b'{"a":1,"z":[1]}',
        b'{"a":1,"z":{"x":1}}',  # unknown keys with a nested value
        b'{"a":1,"z":1.}',
        b'{"a":1,"z":.5}',
        b'{"a":1,"z":1e}',
        b'{"a":1,"z":-}',
        b'{"a":1,"z":NaN}',
        b'{"a":1,"z":"\\n"}',
        b'{"a":1,"z":nul}',
        b'{"a":1,"z":01}',
        b'{"a":1,"z\\u0000":1}',
        b'{"a":1,"s":null}',
        b'{"a":null}',  # explicit nulls: the Python path judges them
        b'{"a":1,"s":"x\\"y"}',
        b'{"a":1,"s":"\\u00e9"}',
        b'{"a\\u0000":1}',  # escapes
        b'{"a":1,"s":"\x01"}',
        b'{"a":1,"s":"tab\there"}',  # control characters
        b'{"a":1,"s":"\xc0\xaf"}',
        b'{"a":1,"s":"\xed\xa0\x80"}',
        b'{"a":1,"s":"\xf4\x90\x80\x80"}',  # invalid UTF-8
        b'{"a":1,"s":"\xe2\x82"}',
        b'{"a":1,"s":"\xff"}',
        b'{"a":1,"s":"\x80"}',
        b'{"a":1,"e":"z"}',
        b'{"a":1,"e":""}',  # not one of the choices
        b'{"a":1,"s":1}',
        b'{"a":1,"s":["x"]}',
        b'{"a":1,"s":{"x":1}}',
        b'{"a":1}x',
        b'{"a":1}{"a":2}',
        b'{"a":1}\n{"a":2}',
        b'[{"a":1}]',
        b'"a"',
        b"1",
        b"",
        b"   ",
        b'{"a":1,}',
        b'{"a":1',
        b'{"a" 1}',
        b"{a:1}",
        b"{'a':1}",
        b'{"a":1 "b":true}',
        b'{"a":1,"s":"open',
    ],
)
def test_anything_else_is_left_to_the_python_path(message: bytes) -> None:
    assert _taken(message) is None


def test_none_other_types_and_oversized_values_are_left_to_the_python_path() -> None:
    reader = Reader(SPEC, 16)
    rows, _, skipped = reader.read([None, '{"a":1}', bytearray(b'{"a":1}'), b'{"a":1}', b'{"a":1,  "b":true}'])
    assert (rows, skipped) == (1, [0, 1, 2, 4])  # the last is 18 bytes > max_bytes=16


def test_missing_optional_fields_are_nulls_in_the_validity_bitmap() -> None:
    messages = [b'{"a":1,"n":5}', b'{"a":2}', b'{"a":3,"n":-5,"s":"z"}'] * 5
    out = Reader(SPEC, 1 << 20).read(messages)
    rows, columns, skipped = out
    assert (rows, skipped) == (15, [])
    assert [c[2] for c in columns] == [0, 5, 15, 10, 15]  # nulls per field: a, n, b, s, e
    assert columns[0][3] is None  # no nulls: no bitmap
    assert _rows(SPEC, out)[:3] == [{"a": 1, "n": 5}, {"a": 2}, {"a": 3, "n": -5, "s": "z"}]


def test_a_fill_value_is_written_for_a_missing_field_and_leaves_no_null() -> None:
    spec = [(b"a", 0, True, 0, 100, None), (b"n", 0, False, -10, 10, None, 7), (b"b", 1, False, 0, 0, None, 1)]
    messages = [b'{"a":1,"n":5,"b":false}', b'{"a":2}', b'{"a":3,"n":-5}'] * 3
    out = Reader(spec, 1 << 20).read(messages)
    assert (out[0], out[2]) == (9, [])
    assert [(c[2], c[3]) for c in out[1]] == [(0, None)] * 3  # no nulls, no bitmap
    assert _rows(spec, out)[:3] == [
        {"a": 1, "n": 5, "b": False},
        {"a": 2, "n": 7, "b": True},
        {"a": 3, "n": -5, "b": True},
    ]
    with pytest.raises(ValueError, match="fill 11: only"):  # outside the field's bounds
        Reader([(b"n", 0, False, -10, 10, None, 11)], 10)
    with pytest.raises(ValueError, match="fill 0: only"):  # a required field has no fill, nor a string one
        Reader([(b"n", 0, True, -10, 10, None, 0)], 10)
    with pytest.raises(ValueError, match="fill 0: only"):
        Reader([(b"s", 2, False, 0, 0, None, 0)], 10)
    with pytest.raises(ValueError, match="fill 2: only"):
        Reader([(b"b", 1, False, 0, 0, None, 2)], 10)


def test_a_chunk_keeps_every_good_message_in_order() -> None:
    messages = [orjson.dumps({"a": i % 101, "s": f"row {i}"}) for i in range(1000)]
    messages[10] = b"garbage"
    messages[500] = b'{"a":1,"a":1}'
    rows, _, skipped = out = Reader(SPEC, 1 << 20).read(messages)
    assert (rows, skipped) == (998, [10, 500])
    assert [r["s"] for r in _rows(SPEC, out)] == [f"row {i}" for i in range(1000) if i not in (10, 500)]


@pytest.mark.parametrize("long_at", [None, 0, 2, 4])
def test_a_string_column_is_exactly_its_characters_whether_or_not_it_outgrew_its_room(long_at: int | None) -> None:
    # the characters start in a bytes object of 64 bytes a message and are handed out shrunk to their length; a
    # message that does not fit moves them to the C heap mid-read (the first, a middle or the last one here)
    texts = [f"v{i}-{UNICODE}" for i in range(5)]
    if long_at is not None:
        texts[long_at] = "L" * 5_000 + UNICODE
    rows, columns, skipped = out = Reader(SPEC, 1 << 20).read([orjson.dumps({"a": 1, "s": t}) for t in texts])
    data, offsets, nulls, _ = columns[3]
    assert (rows, skipped, nulls) == (5, [], 0)
    assert type(data) is bytes and data == "".join(texts).encode()
    assert struct.unpack_from("<6i", offsets) == tuple(len("".join(texts[:i]).encode()) for i in range(6))
    assert [r["s"] for r in _rows(SPEC, out)] == texts


def test_a_field_list_the_reader_cannot_match_is_refused() -> None:
    with pytest.raises(ValueError, match="only printable ASCII"):
        Reader([(b'a"b', 0, True, 0, 1, None)], 10)
    with pytest.raises(ValueError, match="unknown field kind 3"):
        Reader([(b"a", 3, True, 0, 1, None)], 10)
    with pytest.raises(TypeError):
        Reader([("a", 0, True, 0, 1, None)], 10)


# ------------------------------------------------------------------------------- against a reference, randomly


def _task_spec() -> list[tuple[bytes, int, bool, int, int, tuple[bytes, ...] | None]]:
    """Every field of the benchmark's task_end messages: strings and non-negative integers (seq >= 1)."""
    kinds: dict[str, type] = {}
    for _, value in task_messages(2_000):
        kinds.update((k, type(v)) for k, v in orjson.loads(value).items())
    spec = []
    for key, kind in sorted(kinds.items()):
        if kind is str:
            spec.append(
                (
                    key.encode(),
                    2,
                    key in ("event_type", "app_id"),
                    0,
                    0,
                    (b"task_end",) if key == "event_type" else None,
                )
            )
        else:
            spec.append((key.encode(), 0, key == "seq", 1 if key == "seq" else 0, INT64_MAX, None))
    return spec


TASK_SPEC = _task_spec()


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def _reference(message: bytes) -> dict[str, Any] | None:
    """What the reader must take, by the stdlib: strict UTF-8, strict JSON, one flat object, no escapes; known keys
    once each, with values of the field's exact type within its bounds; unknown keys with scalar values (ignored);
    required fields present."""
    if b"\\" in message:  # a backslash can only be inside a string: an escape
        return None
    try:
        pairs = json.loads(message.decode("utf-8"), object_pairs_hook=lambda p: p, parse_constant=_not_json)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(pairs, list):
        return None
    fields = {name.decode(): (kind, required, lo, hi, choices) for name, kind, required, lo, hi, choices in TASK_SPEC}
    row: dict[str, Any] = {}
    for key, value in pairs:
        if isinstance(value, list):  # an array, or a nested object (a list of pairs here)
            return None
        if key not in fields:
            continue
        if key in row:
            return None
        kind, _, lo, hi, choices = fields[key]
        if kind == 0 and not (type(value) is int and lo <= value <= hi):
            return None
        if kind == 2 and not (type(value) is str and (choices is None or value.encode() in choices)):
            return None
        row[key] = value
    if any(required and name not in row for name, (_, required, *_) in fields.items()):
        return None
    return row


def _mutate(rnd: random.Random, message: bytes) -> bytes:
    data = bytearray(message)
    for _ in range(rnd.choice((1, 1, 2, 3))):
        at = rnd.randrange(len(data))
        what = rnd.randrange(4)
        piece = rnd.choice(
            [
                b'"',
                b"\\",
                b",",
                b":",
                b"{",
                b"}",
                b"-",
                b"0",
                b"9",
                b".",
                b"e",
                b" ",
                b"\n",
                b"null",
                b"true",
                b'"x"',
                b"\xc3\xa9",
                b"\xed\xa0\x80",
                b"\xc0",
                b"\x01",
                b'"seq":',
                b'"zz":1,',
                b'"zz":-1.5e3,',
                b'"zz":[1],',
                b'"zz":null,',
            ]
        )
        if what == 0:
            data[at : at + 1] = piece
        elif what == 1:
            data[at:at] = piece
        elif what == 2:
            del data[at : at + rnd.randrange(1, 6)]
        else:
            data[at] = rnd.randrange(256)
    return bytes(data)


def test_the_reader_takes_exactly_what_the_reference_takes_on_random_mutants() -> None:
    rnd = random.Random(20261123)  # noqa: S311 - test data
    originals = [v for _, v in task_messages(500)]
    messages = originals + [_mutate(rnd, rnd.choice(originals)) for _ in range(20_000)]
    out = Reader(TASK_SPEC, 1 << 20).read(messages)
    rows = iter(_rows(TASK_SPEC, out))
    skipped = set(out[2])
    taken_mutants = 0
    for i, message in enumerate(messages):
        expected = _reference(message)
        if i in skipped:
            assert expected is None, f"the reader left a clean message to the Python path: {message!r}"
        else:
            assert expected is not None, f"the reader took a message the reference refuses: {message!r}"
            assert next(rows) == expected, message
            taken_mutants += i >= len(originals)
    assert len(skipped) > 10_000  # most mutants are refused …
    assert taken_mutants > 1_000  # … and many are still taken (digits changed, spaces added): both sides exercised

"""The collector's decode path: the fast columnar checks never accept what the pydantic contract rejects, and build
the same rows the validated model gives; bad messages are isolated with a reason."""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

import orjson
import pytest

from sparktap.collector.arrowpath import ArrowReader, as_list, is_arrow
from sparktap.collector.checks import compile_rules
from sparktap.collector.decode import Decoded, Reject
from sparktap.collector.decode import Decoder as _Decoder
from sparktap.schemas.ddl import RAW_TABLE
from sparktap.schemas.events import EVENT_TYPES, SCHEMA_VERSION
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event
from sparktap.schemas.schema import schema_for
from tests.support.decode import CANARY, DELETE, NOW_MS, decoded_rows, encode, expected_row, hostile, mutants

# judge the examples (schemas/examples.py: yesterday, fixed for the day) by a clock 100 s after their event time
Decoder = functools.partial(_Decoder, clock=lambda: EXAMPLE_TIME_MS / 1000 + 100)

VERSIONS = [(26, 9), (18, 16, 1)]


def _out_of_window(reject: Reject, message: bytes) -> bool:
    """The reject is the event-time window's, and the message's event time is a mutant far from the examples'."""
    event_time = json.loads(message).get("event_time_ms")
    return reject.kind == "event_time_out_of_range" and not (
        isinstance(event_time, int) and abs(event_time - EXAMPLE_TIME_MS) < 86_400_000
    )


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
def test_fast_path_agrees_with_the_contract(version: tuple[int, ...], event_type: str) -> None:
    schema = schema_for(version, "db")
    decoder = Decoder(schema)
    full = example_event(event_type, seq=7).model_dump()
    required_only = {k: v for k, v in full.items() if EVENT_TYPES[event_type].model_fields[k].is_required()}
    events = [full, required_only, *mutants(full), *mutants(required_only)]
    messages = [encode(e) for e in events]
    decoded = decoder.decode(messages)
    rows = decoded_rows(decoded)
    rejects = {r.index: r for r in decoded.rejects}
    assert set(rows) | set(rejects) == set(range(len(messages))), "every message is either a row or a reject"
    assert not set(rows) & set(rejects)
    accepted_by_contract = 0
    for index, message in enumerate(messages):
        expected = expected_row(schema, message)
        if isinstance(expected, str):
            assert index in rejects, f"contract rejects {message!r} ({expected}) but the collector stored it"
            assert rejects[index].reason == expected
            continue
        accepted_by_contract += 1
        if index in rejects:  # accepted by pydantic but out of the column's range, or of the event-time window
            assert ("integer" in rejects[index].reason and " in [" in rejects[index].reason) or _out_of_window(
                rejects[index], message
            ), rejects[index]
            continue
        assert rows[index] == expected, f"row differs for {message!r}"
    assert accepted_by_contract > len(messages) // 10  # the mutations do exercise the accepting side


@pytest.mark.native
@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: ".".join(map(str, v)))
def test_arrow_path_agrees_with_the_contract(version: tuple[int, ...]) -> None:
    """task_end through Arrow's JSON reader: one message per chunk, so each mutant takes the Arrow path when it
    can (a chunk with one bad candidate goes back to the Python path as a whole)."""
    schema = schema_for(version, "db")
    decoder = Decoder(schema, arrow=True)
    full = {k: v for k, v in example_event("task_end", seq=7).model_dump().items() if v is not None}
    required_only = {k: v for k, v in full.items() if EVENT_TYPES["task_end"].model_fields[k].is_required()}
    events = [full, required_only, *mutants(full), *mutants(required_only)]
    events.append({**full, "nested": {"event_type": "task_end"}, "event_type": "job_end"})  # marker in a nested object
    two_lines = encode(full) + b"\n" + encode({**full, "seq": 8})  # two objects in one message: not JSON
    assert [r.kind for r in decoder.decode([two_lines]).rejects] == ["not_json"]
    spaced = encode(full).replace(b",", b",\r\n ")  # line breaks as JSON whitespace: fine
    assert decoder.decode([spaced]).rows == 1
    by_arrow = 0
    for event in events:
        message = encode(event)
        decoded = decoder.decode([message])
        expected = expected_row(schema, message)
        if isinstance(expected, str):
            assert [r.reason for r in decoded.rejects] == [expected], message
            continue
        if decoded.rejects:
            assert " in [" in decoded.rejects[0].reason or _out_of_window(decoded.rejects[0], message), decoded.rejects
            continue
        assert decoded_rows(decoded) == {0: expected}, message
        by_arrow += all(is_arrow(v) for v in decoded.tables[expected[0]].columns.values())
    assert by_arrow > 50  # the valid task_end mutants did go through Arrow


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: ".".join(map(str, v)))
def test_valid_events_take_the_fast_path(version: tuple[int, ...]) -> None:
    schema = schema_for(version, "db")
    decoder = Decoder(schema)
    fast_types = sorted(t for t in EVENT_TYPES if compile_rules(schema.table_for(t)).fast)
    # a list of models needs pydantic
    assert fast_types == sorted(set(EVENT_TYPES) - {"aqe_plan_update", "sql_plan_stats", "streaming_query_progress"})
    messages = [example_event(t, seq=i + 1).model_dump_json().encode() for i, t in enumerate(fast_types)]
    decoded = decoder.decode(messages)
    assert decoded.validated == 0
    assert decoded.rejects == []
    assert {t: c.rows for t, c in decoded.tables.items()} == dict.fromkeys(fast_types, 1)


def _task_end(**changes: Any) -> dict[str, Any]:
    event = example_event("task_end", seq=1).model_dump()
    for key, value in changes.items():
        if value is DELETE:
            del event[key]
        else:
            event[key] = value
    return event


@pytest.mark.parametrize(
    ("message", "kind", "reason"),
    [
        (b"", "empty", "empty message: no value"),
        (b"{not json", "not_json", "not JSON: "),
        (b'"a string"', "not_json", "not a JSON object: got str"),
        (b"[1, 2]", "not_json", "not a JSON object: got list"),
        (b"\xff\xfe", "not_json", "not JSON: "),
        (encode(_task_end(duration_ms="fast")), "invalid", "invalid event: task_end.duration_ms: "),
        (encode(_task_end(duration_ms=-5)), "invalid", "invalid event: task_end.duration_ms: "),
        (encode(_task_end(duration_ms=1.5)), "invalid", "invalid event: task_end.duration_ms: "),
        (encode(_task_end(seq=0)), "invalid", "invalid event: task_end.seq: "),
        (encode(_task_end(app_id=DELETE)), "invalid", "invalid event: task_end.app_id: Field required"),
        (encode(_task_end(host=None)), "invalid", "invalid event: task_end.host: "),
        (encode(_task_end(run_time_ms=None)), "invalid", "invalid event: task_end.run_time_ms: "),
        (encode(_task_end(locality="MOON")), "invalid", "invalid event: task_end.locality: "),
        (encode(_task_end(event_type=None)), "invalid", "invalid event: "),
        (encode(_task_end(schema_version=SCHEMA_VERSION + 1)), "unsupported_version", "unsupported schema_version=2"),
        (encode(_task_end(duration_ms=2**64)), "invalid", "invalid event: task_end.duration_ms: "),
        (encode(_task_end(seq=2**63)), "invalid", "invalid event: seq: not an integer in [1, 9223372036854775807]"),
        (encode(_task_end(task_id=2**63)), "invalid", "invalid event: task_id: not an integer in"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_messages_are_rejected_with_a_reason(message: bytes, kind: str, reason: str) -> None:
    decoded = Decoder(schema_for((26, 9), "db")).decode([message])
    assert decoded.rows == 0
    (reject,) = decoded.rejects
    assert (reject.index, reject.kind) == (0, kind)
    assert reject.reason.startswith(reason), reject.reason
    assert "fast" not in reject.reason  # the reason never echoes the input value


def test_column_ranges_are_the_limit_not_the_json_parser() -> None:
    decoded = Decoder(schema_for((26, 9), "db")).decode([encode(_task_end(duration_ms=2**64 - 1))])
    assert decoded.rejects == []
    assert decoded.tables["task_end"].columns["duration_ms"] == [2**64 - 1]  # UInt64's maximum


def test_too_large_and_empty_messages() -> None:
    decoder = Decoder(schema_for((26, 9), "db"), max_message_bytes=2048)
    big = encode(_task_end(failure_message="x" * 3000))
    decoded = decoder.decode([None, big, encode(_task_end())])
    assert [(r.index, r.kind) for r in decoded.rejects] == [(0, "empty"), (1, "too_large")]
    assert decoded.rejects[1].reason == f"message too large: {len(big)} bytes > max_message_bytes=2048"
    assert decoded.tables["task_end"].indices == [2]


def test_lax_values_go_through_pydantic_and_are_stored_coerced() -> None:
    decoded = Decoder(schema_for((26, 9), "db")).decode([encode(_task_end(duration_ms="50", speculative=1))])
    assert decoded.rejects == []
    assert decoded.validated == 1
    columns = decoded.tables["task_end"].columns
    assert (columns["duration_ms"], columns["speculative"]) == ([50], [True])


def test_unknown_event_types_and_newer_minors_are_kept() -> None:
    newer_minor = {**_task_end(seq=2), "schema_minor": 9, "a_field_from_the_future": {"x": [1, None]}}
    unknown = {**_task_end(seq=3), "event_type": "gpu_kernel", "kernel": "matmul", "seq": 3}
    decoded = Decoder(schema_for((18, 16, 1), "db")).decode([encode(newer_minor), encode(unknown)])
    assert decoded.rejects == []
    assert decoded.tables["task_end"].columns["schema_minor"] == [9]
    raw = decoded.tables[RAW_TABLE].columns
    assert raw["event_type"] == ["gpu_kernel"]
    assert orjson.loads(raw["payload"][0])["kernel"] == "matmul"


def test_an_unknown_type_still_needs_a_valid_envelope() -> None:
    broken = {"event_type": "gpu_kernel", "cluster": "c", "app_id": "a", "app_name": "n", "seq": "one"}
    decoded = Decoder(schema_for((26, 9), "db")).decode([encode(broken)])
    assert [r.kind for r in decoded.rejects] == ["invalid"]
    assert decoded.rows == 0


@pytest.mark.parametrize("arrow", [False, pytest.param(True, marks=pytest.mark.native)], ids=["python", "arrow"])
def test_a_chunk_mixing_good_and_bad_keeps_every_good_row(arrow: bool) -> None:
    listener_style = {k: v for k, v in _task_end().items() if v is not None}  # the listener leaves nulls out
    messages = [encode({**listener_style, "seq": s}) for s in range(1, 1001)]
    messages[500] = b"garbage"
    messages[700] = encode({**listener_style, "seq": 701, "stage_id": -1})
    messages[800] = encode(_task_end(seq=801, failure_message=None))  # an explicit null: the Python path
    decoded = Decoder(schema_for((26, 9), "db"), arrow=arrow).decode(messages)
    assert [r.index for r in decoded.rejects] == [500, 700]
    chunk = decoded.tables["task_end"]
    assert sorted(chunk.indices) == [i for i in range(1000) if i not in (500, 700)]
    assert as_list(chunk.columns["seq"]) == [i + 1 for i in chunk.indices]
    assert is_arrow(chunk.columns["seq"]) == arrow


def test_the_arrow_path_refuses_a_table_without_a_column_for_every_checked_field() -> None:
    """The C reader skips keys it has no column for, unchecked: a model field without a column would go unchecked."""
    table = schema_for((26, 9), "db").tables["task_end"]
    narrowed = dataclasses.replace(table, columns=tuple(c for c in table.columns if c.name != "duration_ms"))
    with pytest.raises(ValueError, match=r"table task_end has no column for \['duration_ms'\]"):
        ArrowReader(narrowed, compile_rules(table), 1 << 20)


# ----------------------------------------------------------------------------------------------- hostile input


def _hostile() -> list[tuple[bytes, str, str]]:
    return hostile({k: v for k, v in _task_end().items() if v is not None})


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("arrow", [False, True], ids=["python", "arrow"])
def test_hostile_messages_are_rejected_by_every_path_without_echoing_values(
    version: tuple[int, ...], arrow: bool
) -> None:
    listener_style = {k: v for k, v in _task_end().items() if v is not None}
    hostile = _hostile()
    good = [encode({**listener_style, "seq": s}) for s in range(1, 201)]
    messages = good + [m for m, _, _ in hostile]
    decoded = Decoder(schema_for(version, "db"), arrow=arrow).decode(messages)
    assert decoded.tables["task_end"].indices == list(range(200))
    assert [(r.index, r.kind) for r in decoded.rejects] == [(200 + i, kind) for i, (_, kind, _) in enumerate(hostile)]
    for reject, (_, _, reason) in zip(decoded.rejects, hostile, strict=True):
        assert reject.reason.startswith(reason), reject.reason
        assert CANARY not in reject.reason and "password" not in reject.reason


def test_the_future_skew_is_configurable() -> None:
    ahead = encode({**_task_end(), "event_time_ms": NOW_MS + 120_000})
    assert Decoder(schema_for((26, 9), "db")).decode([ahead]).rows == 1
    strict = Decoder(schema_for((26, 9), "db"), max_future_skew_seconds=60)
    assert [r.kind for r in strict.decode([ahead]).rejects] == ["event_time_out_of_range"]


def test_an_exception_stays_with_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever raises while decoding a chunk is found message by message; only the message that raises is lost
    to the DLQ, with the exception's type and never its text (which could quote the value)."""
    decoder = Decoder(schema_for((26, 9), "db"))
    python = decoder._python

    def fragile(items: Any, out: Decoded) -> None:
        if any(value == b'{"boom": 1}' for _, value in items):
            raise RuntimeError(f"{CANARY} in an exception")
        python(items, out)

    monkeypatch.setattr(decoder, "_python", fragile)
    messages = [encode(_task_end(seq=1)), b'{"boom": 1}', encode(_task_end(seq=3)), b"junk"]
    decoded = decoder.decode(messages)
    assert decoded.tables["task_end"].indices == [0, 2]
    assert [(r.index, r.kind) for r in decoded.rejects] == [(1, "invalid"), (3, "not_json")]
    assert decoded.rejects[0].reason.startswith("cannot decode the message: RuntimeError in the collector")
    assert CANARY not in decoded.rejects[0].reason


def test_an_event_that_cannot_be_flattened_is_rejected_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = Decoder(schema_for((26, 9), "db"))
    flatten = decoder._columnize[RAW_TABLE]

    def fragile(sources: Any) -> dict[str, list[Any]]:
        if any(s.get("payload", {}).get("boom") for s in sources):
            raise TypeError("cannot serialise")
        return flatten(sources)

    monkeypatch.setitem(decoder._columnize, RAW_TABLE, fragile)
    unknown = {**_task_end(seq=5), "event_type": "gpu_kernel"}
    decoded = decoder.decode([encode(unknown), encode({**unknown, "seq": 6, "boom": 1})])
    assert decoded.tables[RAW_TABLE].indices == [0]
    assert [(r.index, r.kind, r.reason) for r in decoded.rejects] == [
        (1, "invalid", "cannot flatten the event into table raw_events: TypeError")
    ]


def test_reasons_do_not_echo_keys_the_message_chose() -> None:
    """A dict field's keys are the message's values too: a bad entry is named ``<key>``."""
    health = example_event("listener_health", seq=3).model_dump()
    health["dropped_by_type"] = {f"password={CANARY}": "many"}
    decoded = Decoder(schema_for((26, 9), "db")).decode([encode(health)])
    (reject,) = decoded.rejects
    assert reject.reason == (
        "invalid event: listener_health.dropped_by_type.<key>: Input should be a valid integer, "
        "unable to parse string as an integer"
    )


@pytest.mark.native
def test_the_c_reader_takes_only_a_json_integer_schema_version_it_understands() -> None:
    """The version gate in all three readers: the C reader leaves anything but the integer 1 to the Python path,
    whose fast path and pydantic path both dead-letter it (test_hostile_messages_… above)."""
    table = schema_for((26, 9), "db").tables["task_end"]
    reader = ArrowReader(table, compile_rules(table), 1 << 20)
    listener_style = {k: v for k, v in _task_end().items() if v is not None}
    versions: list[Any] = [1, "2", 2.0, True, 2, None, "1", 1.0, [1], 10**30]
    pieces, left = reader.read([encode({**listener_style, "schema_version": v}) for v in versions])
    assert [indices for _, indices in pieces] == [[0]]
    assert left == list(range(1, len(versions)))

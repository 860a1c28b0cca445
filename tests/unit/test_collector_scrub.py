"""The collector's second pass over every value a user controls (promise 25, issue 41): whatever produced a message,
a name or free text is stored capped with its marker, without control characters and redacted; the event is kept;
a value the listener cleaned already takes the fast path unchanged."""

from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest

from sparktap.collector.arrowpath import C_READER, as_list, is_arrow
from sparktap.collector.decode import Decoder as _Decoder
from sparktap.collector.scrub import scrub
from sparktap.schemas.events import EVENT_TYPES
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event
from sparktap.schemas.schema import schema_for

Decoder = functools.partial(_Decoder, clock=lambda: EXAMPLE_TIME_MS / 1000 + 100)
SCHEMA = schema_for((26, 9), "db")
MASK = "*********(redacted)"
LONG_ID = "u" * 100_000
LONG_ID_STORED = "u" * 231 + "…[truncated 99769 chars]"  # as the listener cuts it (Redactor.name)
CONNECT_PLAN = (
    'read { data_source { format: "jdbc" options { key: "password" value: "s3cr3t" } '
    'options { key: "fs.s3a.secret.key" value: "wJal/K7+=" } options { key: "url" value: "jdbc:x" } } }'
)
CONNECT_PLAN_STORED = (
    f'read {{ data_source {{ format: "jdbc" options {{ key: "password" value: {MASK} }} '
    f'options {{ key: "fs.s3a.secret.key" value: {MASK} }} options {{ key: "url" value: "jdbc:x" }} }} }}'
)


def _event(event_type: str, seq: int, **fields: Any) -> dict[str, Any]:
    return {k: v for k, v in example_event(event_type, seq=seq).model_dump().items() if v is not None} | fields


def _rows(decoder: _Decoder, events: list[dict[str, Any]]) -> tuple[dict[str, list[Any]], Any]:
    """Each column's values in the order of the input messages (the slow path's rows come after the fast path's)."""
    decoded = decoder.decode([orjson.dumps(e) for e in events])
    assert decoded.rejects == []
    (table,) = decoded.tables.values()
    order = sorted(range(table.rows), key=table.indices.__getitem__)
    return {name: [as_list(values)[j] for j in order] for name, values in table.columns.items()}, decoded


@pytest.mark.parametrize(
    ("user_id", "stored"),
    [
        ("password=hunter2", f"password={MASK}"),
        (LONG_ID, LONG_ID_STORED),
        ("bob\x1b]0;pwned\x07\r\n", "bob]0;pwned"),
        ("AKIAIOSFODNN7EXAMPLE", MASK),
    ],
    ids=["secret", "100k", "controls", "key-id"],
)
def test_a_connect_user_id_is_stored_clean_on_every_event_that_carries_it(user_id: str, stored: str) -> None:
    decoder = Decoder(SCHEMA)
    for event_type in ("job_start", "stage_submitted", "stage_completed", "sql_start", "operation"):
        columns, decoded = _rows(decoder, [_event(event_type, 1, user_id=user_id), _event(event_type, 2)])
        assert columns["user_id"] == [stored, example_event(event_type).model_dump()["user_id"]], event_type
        assert decoded.validated == 1, event_type  # only the unclean event left the fast path


def test_free_text_lists_and_dicts_are_cleaned_too() -> None:
    decoder = Decoder(SCHEMA)
    event = _event(
        "operation",
        1,
        statement=CONNECT_PLAN + "\x1b[2J\ttab\nline",
        session_tags=["team-x", "token=t0k"],
        job_tag="t" * 2001,
    )
    columns, _ = _rows(decoder, [event])
    assert columns["statement"] == [CONNECT_PLAN_STORED + "[2J\ttab\nline"]
    assert [list(v) for v in columns["session_tags"]] == [["team-x", f"token={MASK}"]]
    assert columns["job_tag"] == ["t" * 1977 + "…[truncated 24 chars]"]
    start = _event("app_start", 1, tags={"team": "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"})
    assert scrub(EVENT_TYPES["app_start"], dict(start))["tags"] == {"team": MASK}


def test_what_the_listener_cleaned_takes_the_fast_path_unchanged() -> None:
    decoder = Decoder(SCHEMA)
    events = [
        _event("job_start", 1, user_id=LONG_ID_STORED, description=f"load password={MASK} from s3a://***@b/k"),
        _event("operation", 2, statement=CONNECT_PLAN_STORED, user_id=f"password={MASK}"),
    ]
    decoded = decoder.decode([orjson.dumps(e) for e in events])
    assert decoded.rejects == [] and decoded.validated == 0 and decoded.rows == 2


@pytest.mark.native
@pytest.mark.skipif(not C_READER, reason="the C reader is not compiled")
def test_the_arrow_path_sends_only_the_unclean_task_ends_to_be_cleaned() -> None:
    decoder = Decoder(SCHEMA, arrow=True)
    events = [_event("task_end", seq, task_id=seq) for seq in range(1, 201)]
    events[7] = _event("task_end", 8, task_id=8, user_id="password=hunter2")
    events[150] = _event("task_end", 151, task_id=151, user_id=LONG_ID, failure_message="x\x07y")
    decoded = decoder.decode([orjson.dumps(e) for e in events])
    assert decoded.rejects == [] and decoded.rows == 200 and decoded.validated == 2
    chunk = decoded.tables["task_end"]
    users = dict(zip(chunk.indices, as_list(chunk.columns["user_id"]), strict=True))
    messages = dict(zip(chunk.indices, as_list(chunk.columns["failure_message"]), strict=True))
    assert users[7] == f"password={MASK}" and users[150] == LONG_ID_STORED and messages[150] == "xy"
    assert {users[i] for i in range(200) if i not in (7, 150)} == {example_event("task_end").model_dump()["user_id"]}
    assert any(is_arrow(v) for v in chunk.columns.values())  # the clean rows stayed on the Arrow path

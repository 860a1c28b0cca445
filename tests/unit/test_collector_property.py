"""Property: for any message the collector either stores the event exactly (the row the pydantic contract gives) or
dead-letters it with a kind and a reason; never both, never neither; and decoding never raises."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparktap.collector.decode import REJECT_KINDS, Decoder
from sparktap.schemas.events import EVENT_TYPES
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event
from sparktap.schemas.schema import schema_for
from tests.support.decode import decoded_rows, encode, expected_row

EXAMPLE_MS = EXAMPLE_TIME_MS  # the examples' event time; the Decoder's clock is 100 s later
SCHEMAS = {"26.9": schema_for((26, 9), "db"), "18.16": schema_for((18, 16, 1), "db")}
DECODERS = {(v, arrow): Decoder(s, 4096, arrow=arrow) for v, s in SCHEMAS.items() for arrow in (False, True)}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["task_end", "PROCESS_LOCAL", "SUCCESS", "2", "", "gpu_kernel"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
bases = st.sampled_from(sorted(EVENT_TYPES)).map(lambda t: example_event(t, seq=7).model_dump())


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    event = draw(bases)
    if draw(st.booleans()):
        event = {k: v for k, v in event.items() if v is not None}  # as the listener writes it
    keys = sorted(event)
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["set", "drop", "add"]))
        if action == "set":
            event[draw(st.sampled_from(keys))] = draw(values)
        elif action == "drop":
            event.pop(draw(st.sampled_from(keys)), None)
        else:
            event[draw(st.text(min_size=1, max_size=8))] = draw(values)
    return event


def _message(event: dict[str, Any]) -> bytes:
    try:
        return encode(event)
    except (TypeError, ValueError):  # a key or value JSON cannot hold: send it anyway, as a producer could
        return json.dumps(event, default=str).encode()


messages = st.one_of(
    events().map(_message), st.binary(max_size=64), events().map(_message).map(lambda m: m[: len(m) // 2])
)


@pytest.mark.parametrize(("version", "arrow"), sorted(DECODERS), ids=lambda v: str(v))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(messages, min_size=1, max_size=8))
def test_every_message_is_stored_exactly_or_dead_lettered_with_a_reason(
    version: str, arrow: bool, batch: list[bytes]
) -> None:
    schema = SCHEMAS[version]
    decoded = DECODERS[(version, arrow)].decode(batch)
    rows = decoded_rows(decoded)
    rejects = {r.index: r for r in decoded.rejects}
    assert len(rejects) == len(decoded.rejects), "a message dead-lettered twice"
    assert not set(rows) & set(rejects), "a message both stored and dead-lettered"
    assert set(rows) | set(rejects) == set(range(len(batch))), "a message neither stored nor dead-lettered"
    for reject in rejects.values():
        assert reject.kind in REJECT_KINDS and reject.reason.strip()
    for index, (table, row) in rows.items():
        expected = expected_row(schema, batch[index])
        assert expected == (table, row), f"stored {batch[index]!r} not as the contract reads it"
        assert abs(row["event_time_ms"] - EXAMPLE_MS) <= 30 * 86_400_000 + 100_000

"""The keys of a dict of user-controlled strings (``app_start.tags`` and ``properties``) go through the name path in
the collector's scrub (issue 41): control characters removed, the name cap with its marker, redaction; an event on
the slow path is stored with clean keys."""

from __future__ import annotations

import functools
from typing import Any

import orjson

from sparktap.collector.arrowpath import as_list
from sparktap.collector.decode import Decoder as _Decoder
from sparktap.collector.scrub import clean_dict, clean_keys_enough, scrub
from sparktap.schemas.events import EVENT_TYPES
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event
from sparktap.schemas.schema import schema_for
from sparktap.schemas.types import TEXT

Decoder = functools.partial(_Decoder, clock=lambda: EXAMPLE_TIME_MS / 1000 + 100)
MASK = "*********(redacted)"
LONG_KEY = "k" * 300
LONG_KEY_STORED = "k" * 234 + "…[truncated 66 chars]"  # inside the name cap of 256, with its marker
HOSTILE = {"team\x1b]0;evil\x07\r\n": "payments", LONG_KEY: "x", "password=hunter2": "y", "ok": "fine"}
STORED = {"team]0;evil": "payments", LONG_KEY_STORED: "x", f"password={MASK}": "y", "ok": "fine"}


def _event(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in example_event("app_start", seq=1).model_dump().items() if v is not None} | fields


def test_dict_keys_take_the_name_path() -> None:
    assert clean_dict(HOSTILE, TEXT) == STORED
    assert len(LONG_KEY_STORED) == 255
    assert not clean_keys_enough(HOSTILE) and clean_keys_enough(STORED)
    # two keys that clean to the same name: the first value is kept, never a value moved under another key
    assert clean_dict({"a\x07": "1", "a": "2"}, TEXT) == {"a": "1"}
    start = scrub(EVENT_TYPES["app_start"], _event(tags=dict(HOSTILE), properties={"spark.x\x1b": "v"}))
    assert (start["tags"], start["properties"]) == (STORED, {"spark.x": "v"})


def test_an_event_on_the_slow_path_is_stored_with_clean_keys() -> None:
    decoder = Decoder(schema_for((26, 9), "db"))
    # an unclean value sends the event to the slow path, where its keys are cleaned too
    event = _event(tags={**HOSTILE, "cost_centre": "token=t0k\x07"})
    decoded = decoder.decode([orjson.dumps(event)])
    assert decoded.rejects == [] and decoded.validated == 1
    (table,) = decoded.tables.values()
    assert as_list(table.columns["tags"]) == [{**STORED, "cost_centre": f"token={MASK}"}]


def test_an_event_whose_only_unclean_string_is_a_key_is_stored_with_clean_keys() -> None:
    """The fast path checks keys too: clean values alone do not let a hostile key through unchanged."""
    decoder = Decoder(schema_for((26, 9), "db"))
    decoded = decoder.decode([orjson.dumps(_event(tags=dict(HOSTILE), properties={"spark.x\x1b[2J": "v"}))])
    assert decoded.rejects == [] and decoded.validated == 1  # judged on the slow path, not stored as it came
    (table,) = decoded.tables.values()
    assert as_list(table.columns["tags"]) == [STORED]
    assert as_list(table.columns["properties"]) == [{"spark.x[2J": "v"}]
    clean = decoder.decode([orjson.dumps(_event(tags=dict(STORED)))])
    assert clean.validated == 0  # already clean: the fast path stores it

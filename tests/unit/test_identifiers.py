"""Identifiers are data, never SQL: the one pattern (schemas/types.py), the contract models and the collector's
fast paths refuse every canary with the same reason and accept every real Spark id."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import orjson
import pytest

from sparktap.collector.arrowpath import C_READER, as_list
from sparktap.collector.decode import Decoder as _Decoder
from sparktap.schemas.events import EVENT_TYPES
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event
from sparktap.schemas.fields import fields_of
from sparktap.schemas.schema import schema_for
from sparktap.schemas.types import (
    IDENTIFIER_MAX_LENGTH,
    IDENTIFIER_PATTERN,
    IDENTIFIER_RULE,
    OPTIONAL_IDENTIFIER_PATTERN,
    is_identifier,
)
from tests.support.identifier_canaries import CANARIES, REAL_IDS

Decoder = functools.partial(_Decoder, clock=lambda: EXAMPLE_TIME_MS / 1000 + 100)
ROOT = Path(__file__).resolve().parents[2]

IDENTIFIER_FIELDS = {
    (event_type, spec.name): spec.pattern == OPTIONAL_IDENTIFIER_PATTERN
    for event_type, model in EVENT_TYPES.items()
    for spec in fields_of(model)
    if spec.pattern is not None
}
"""(event type, field) -> whether the field may be empty, for every identifier field of the contract"""


def test_the_identifier_fields_are_the_ones_dashboards_and_rules_interpolate() -> None:
    names = {name for _, name in IDENTIFIER_FIELDS}
    assert names == {"cluster", "app_id", "app_attempt", "executor_id", "query_id", "run_id"}
    assert {t for t, name in IDENTIFIER_FIELDS if name == "executor_id"} == {
        "task_end",
        "executor_added",
        "executor_removed",
        "executor_metrics",
    }
    assert [key for key, optional in IDENTIFIER_FIELDS.items() if optional] == [(t, "app_attempt") for t in EVENT_TYPES]


def test_one_pattern_written_in_the_contract_docs() -> None:
    assert IDENTIFIER_PATTERN == r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}$"
    assert IDENTIFIER_MAX_LENGTH == 128
    assert IDENTIFIER_PATTERN in (ROOT / "docs" / "architecture.md").read_text()


@pytest.mark.parametrize("value", REAL_IDS)
def test_real_spark_ids_are_identifiers(value: str) -> None:
    assert is_identifier(value)
    assert re.fullmatch(IDENTIFIER_PATTERN, value)


@pytest.mark.parametrize("name", sorted(CANARIES))
def test_canaries_are_not_identifiers(name: str) -> None:
    value = CANARIES[name]
    assert not is_identifier(value)
    assert is_identifier(value, optional=True) is (value == "")
    for bad in "\\'\"`${}% \t\n\r\x00;*":
        assert not is_identifier("a" + bad + "b")


def _message(event_type: str, **overrides: object) -> bytes:
    return orjson.dumps({**example_event(event_type).model_dump(), **overrides})


@pytest.mark.parametrize("arrow", [False, True] if C_READER else [False])
@pytest.mark.parametrize("version", [(26, 9), (18, 16, 1)])
def test_the_decoder_dead_letters_every_canary_in_every_identifier_field(version: tuple[int, ...], arrow: bool) -> None:
    decoder = Decoder(schema_for(version, "sparktap"), arrow=arrow)
    messages: list[bytes] = []
    expected: dict[int, str] = {}
    for (event_type, field), optional in IDENTIFIER_FIELDS.items():
        for name, value in CANARIES.items():
            if optional and name == "empty":
                continue
            expected[len(messages)] = (
                f"invalid event: {event_type}.{field}: not an identifier{' or empty' if optional else ''} "
                f"({IDENTIFIER_RULE})"
            )
            messages.append(_message(event_type, **{field: value}))
    good: list[int] = []
    for event_type in EVENT_TYPES:  # interleaved legitimate events, one per real id
        for value in REAL_IDS:
            good.append(len(messages))
            messages.append(_message(event_type, cluster=value, app_id=value))
    decoded = decoder.decode(messages)
    assert {r.index: r.reason for r in decoded.rejects} == expected
    assert {r.kind for r in decoded.rejects} == {"invalid"}
    stored: dict[str, list[str]] = {}
    for table, chunk in decoded.tables.items():
        stored[table] = as_list(chunk.columns["cluster"])
        assert as_list(chunk.columns["cluster"]) == as_list(chunk.columns["app_id"])
        assert all(is_identifier(v) for v in stored[table])
    assert sorted(i for chunk in decoded.tables.values() for i in chunk.indices) == good
    assert sum(len(v) for v in stored.values()) == len(EVENT_TYPES) * len(REAL_IDS)


def test_an_empty_attempt_is_stored_and_a_task_batch_of_one_cluster_checks_fast() -> None:
    decoder = Decoder(schema_for((26, 9), "sparktap"), arrow=C_READER)
    messages = [_message("task_end", seq=i + 1, app_attempt="") for i in range(500)]
    messages.append(_message("task_end", seq=501, executor_id="1\n"))
    decoded = decoder.decode(messages)
    assert [r.index for r in decoded.rejects] == [500]
    assert decoded.validated == 1  # only the bad one went through pydantic
    assert as_list(decoded.tables["task_end"].columns["app_attempt"]) == [""] * 500

"""The ``Storage`` protocol (``collector/storage/protocol.py``) is what the rest types against: both engines
implement every member of it, with the same parameters."""

from __future__ import annotations

import inspect

import pytest

from sparktap.collector.storage import ChdbStorage, ServerStorage, Storage, StorageBase

MEMBERS = sorted(name for name in vars(Storage) if not name.startswith("_") or name in ("__enter__", "__exit__"))


def test_the_protocol_names_what_callers_use() -> None:
    assert {"query", "command", "insert_columns", "insert", "version", "database", "kind", "close"} <= set(
        MEMBERS + list(Storage.__annotations__)
    )


@pytest.mark.parametrize("engine", [ChdbStorage, ServerStorage])
def test_each_engine_implements_every_member_with_the_same_parameters(engine: type[StorageBase]) -> None:
    for name in MEMBERS:
        expected = getattr(Storage, name)
        actual = getattr(engine, name)
        if isinstance(expected, property):
            assert isinstance(actual, property), name
            continue
        if callable(expected):
            assert list(inspect.signature(actual).parameters) == list(inspect.signature(expected).parameters), name
    for attribute in Storage.__annotations__:
        assert attribute in {*vars(engine), *vars(StorageBase), "target", "database"}, attribute

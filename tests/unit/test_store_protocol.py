"""The ``Storage`` protocol (``store/protocol.py``) is what the rest types against: both engines
implement every member of it, with the same parameters."""

from __future__ import annotations

import inspect

import pytest

from sparktap.store import ChdbStorage, ServerStorage, Storage, StorageBase
from sparktap.store.target import parse_storage_url

MEMBERS = sorted(name for name in vars(Storage) if not name.startswith("_") or name in ("__enter__", "__exit__"))


def test_the_protocol_names_what_callers_use() -> None:
    assert {"query", "command", "insert_columns", "insert", "version", "database", "target", "close"} <= set(
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


def test_the_protocol_has_no_engine_name() -> None:
    """Callers decide by ``target.capabilities``, never by the engine's name."""
    assert "kind" not in MEMBERS and "kind" not in Storage.__annotations__


@pytest.mark.parametrize(
    ("url", "embedded", "remote"),
    [("chdb:///var/lib/sparktap/chdb", True, False), ("clickhouse://u:pw@ch:9000/db", False, True)],
)
def test_each_engine_says_what_it_can_do(url: str, embedded: bool, remote: bool) -> None:
    caps = parse_storage_url(url).capabilities
    assert (caps.embedded, caps.remote) == (embedded, remote)


def test_a_targets_url_reads_back_as_the_same_target_with_its_tls_files() -> None:
    url = "clickhouses://writer:p%40ss@ch:9440/spark?verify=false&cluster=c2&ca_certs=/etc/ca.pem&certfile=/etc/c.pem"
    target = parse_storage_url(url)
    assert target.url() == url
    assert parse_storage_url(target.url()) == target
    assert str(target.ca_certs) == "/etc/ca.pem" and target.password.get_secret_value() == "p@ss"

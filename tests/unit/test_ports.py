"""free_port and wait_until, without starting any process."""

from __future__ import annotations

import socket
import time

import pytest

from sparktap.errors import ServiceError
from sparktap.local.ports import free_port, port_open, wait_until


def test_free_port_can_be_bound_and_then_reports_open() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", port))
        assert not port_open("127.0.0.1", port)  # bound but not listening
        server.listen()
        assert port_open("127.0.0.1", port)


def test_wait_until_returns_the_first_truthy_value() -> None:
    calls: list[int] = []

    def third_time_lucky() -> str | None:
        calls.append(1)
        return "ready" if len(calls) == 3 else None

    assert wait_until(third_time_lucky, timeout=5, what="thing", interval=0.001) == "ready"
    assert len(calls) == 3


def test_wait_until_reports_the_last_error_at_the_deadline() -> None:
    def refuse() -> bool:
        raise ConnectionRefusedError("connection refused")

    started = time.monotonic()
    with pytest.raises(ServiceError) as info:
        wait_until(refuse, timeout=0.2, what='kafka bootstrap="127.0.0.1:1"', interval=0.01)
    assert 0.2 <= time.monotonic() - started < 2
    assert (
        str(info.value)
        == 'kafka bootstrap="127.0.0.1:1" not ready after 0.2s: ConnectionRefusedError: connection refused'
    )


def test_wait_until_says_when_the_condition_stayed_false() -> None:
    with pytest.raises(ServiceError, match=r"^thing not ready after 0\.05s: the condition was still false$"):
        wait_until(lambda: False, timeout=0.05, what="thing", interval=0.01)


def test_a_sparktap_error_from_the_predicate_ends_the_wait_at_once() -> None:
    calls: list[int] = []

    def dead() -> bool:
        calls.append(1)
        raise ServiceError("the process exited")

    with pytest.raises(ServiceError, match="^the process exited$"):
        wait_until(dead, timeout=30, what="thing")
    assert calls == [1]

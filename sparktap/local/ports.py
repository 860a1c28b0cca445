"""Free local ports, and waiting for something to become true against a deadline."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

from sparktap.errors import ServiceError, SparktapError

T = TypeVar("T")


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on `host` a moment ago.

    The port is released before returning, so another process can still take it: callers that launch a
    server on it should check the server really came up (TansuBroker retries on a fresh port).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Call `predicate` every `interval` seconds until it returns a truthy value, and return that value.

    An exception raised by `predicate` counts as "not yet" and its text is kept as the last error, except a
    `SparktapError`, which ends the wait at once: raise one when waiting longer cannot help (the process died).
    At the deadline raise `ServiceError("<what> not ready after <timeout>s: <last error>")`.
    The predicate is always called at least once, and once more at the deadline.
    """
    deadline = time.monotonic() + timeout
    last_error = "the condition was still false"
    while True:
        try:
            result = predicate()
        except SparktapError:
            raise
        except Exception as exc:  # any failure of the probe means "not ready yet"
            last_error = f"{type(exc).__name__}: {exc}"
        else:
            if result:
                return result
            last_error = "the condition was still false"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ServiceError(f"{what} not ready after {timeout:g}s: {last_error}")
        time.sleep(min(interval, remaining))

"""The shared endpoint server (``sparktap/endpoints.py``) under many and slow clients, with real sockets on 127.0.0.1
(issue 41 item 11; reliability promise 28).

- 1,500 idle connections: the server holds at most ``max_connections`` of them (the oldest waiting ones make room),
  drops each at its whole-request deadline, and never runs more than ``1 + workers`` threads;
- a 400-connection slowloris, each sending one byte of its headers every 0.25 s: every connection is dropped at its
  whole-request deadline although bytes keep arriving (a per-read timeout would hold them for ever);
- ``/healthz`` answers 200 within ``PROBE_DEADLINE`` seconds throughout both.

The bound on threads: the process's threads before the server started + 1 (the accepting and reading loop) +
``workers`` (the pool that answers complete requests; 4 here, ``WORKERS`` by default), counted by the kernel
(``/proc/self/status``), so threads of any library count too. Idle and slow connections never reach a worker.
"""

from __future__ import annotations

import resource
import socket
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sparktap.endpoints import HttpEndpoints

pytestmark = pytest.mark.integration

IDLE = 1_500
SLOWLORIS = 400
MAX_CONNECTIONS = 1_024
WORKERS = 4
DEADLINE = 4.0
"""The whole-request deadline of the server under test (``socket_timeout``)."""
PROBE_DEADLINE = 2.0
TRICKLE_EVERY = 0.25


def os_threads() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads: line in /proc/self/status")


@dataclass
class Watch:
    """What the test saw while it held the clients: the most threads, the probes' answers and slowest time."""

    baseline: int
    server: HttpEndpoints
    most_threads: int = 0
    most_connections: int = 0
    probes: list[tuple[int, float]] = field(default_factory=list)

    def sample(self) -> None:
        self.most_threads = max(self.most_threads, os_threads())
        self.most_connections = max(self.most_connections, self.server.open_connections)

    def probe(self) -> None:
        self.sample()
        started = time.monotonic()
        url = f"http://127.0.0.1:{self.server.port}/healthz"
        with urllib.request.urlopen(url, timeout=PROBE_DEADLINE) as response:  # noqa: S310 - 127.0.0.1
            code, body = response.status, response.read()
        assert body == b'{"status":"ok"}'
        self.probes.append((code, time.monotonic() - started))


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset: the server closed it with our bytes unread
        return True


@pytest.fixture
def watch() -> Iterator[Watch]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * (IDLE + SLOWLORIS) + 256  # both ends of every connection live in this process
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    baseline = os_threads()
    server = HttpEndpoints(
        "127.0.0.1",
        0,
        health=lambda: (200, {"status": "ok"}),
        socket_timeout=DEADLINE,
        workers=WORKERS,
        max_connections=MAX_CONNECTIONS,
    ).start()
    try:
        yield Watch(baseline, server)
    finally:
        server.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setblocking(False)
    return sock


def test_idle_connections_and_a_slowloris_hold_no_threads_and_healthz_answers(watch: Watch) -> None:
    port = watch.server.port
    started = time.monotonic()

    # 1,500 idle connections, a probe every 100 of them
    idle: list[socket.socket] = []
    for i in range(IDLE):
        idle.append(connect(port))
        if i % 100 == 0:
            watch.probe()
    opened = time.monotonic()
    watch.probe()
    # every one is closed by the server: the oldest to make room, the rest at their deadline
    while not all(closed_by_server(s) for s in idle):
        assert time.monotonic() < opened + DEADLINE + 3.0, "idle connections outlived the whole-request deadline"
        watch.probe()
        time.sleep(0.05)  # the probes' pace, not a wait for a condition: the loop polls with a deadline
    for s in idle:
        s.close()
    assert watch.most_connections <= MAX_CONNECTIONS

    # the slowloris: a request line, then one header byte each TRICKLE_EVERY, never the blank line that ends it
    slow = [connect(port) for _ in range(SLOWLORIS)]
    trickle_started = time.monotonic()
    for s in slow:
        s.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
    open_ = set(range(SLOWLORIS))
    last_probe = 0.0
    while open_:
        now = time.monotonic()
        assert now < trickle_started + DEADLINE + 3.0, f"{len(open_)} slowloris connections outlived the deadline"
        for i in list(open_):
            if closed_by_server(slow[i]):
                open_.discard(i)
                continue
            try:
                slow[i].send(b"a")
            except OSError:
                open_.discard(i)
        if now - last_probe >= 0.2:
            watch.probe()
            last_probe = now
        time.sleep(TRICKLE_EVERY)
    dropped_after = time.monotonic() - trickle_started
    for s in slow:
        s.close()
    watch.probe()

    assert dropped_after >= DEADLINE - 0.5  # the trickle kept them for their deadline, not less …
    assert watch.most_threads <= watch.baseline + 1 + WORKERS, (watch.most_threads, watch.baseline)
    assert all(code == 200 for code, _ in watch.probes)
    assert max(took for _, took in watch.probes) < PROBE_DEADLINE
    assert len(watch.probes) >= 30
    assert time.monotonic() - started < 30

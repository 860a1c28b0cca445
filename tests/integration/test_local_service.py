"""The local-service base class (sparktap.local.service.LocalService) on a tiny real process (a Python child that
listens on a port): readiness deadline, retry on a taken port, pause/resume, stop of its whole process group, kill,
log tail and the context manager."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from sparktap.errors import ServiceError
from sparktap.local.ports import port_open, wait_until
from sparktap.local.service import LocalService, PortTakenError, _proc_state

pytestmark = pytest.mark.integration

# listens on argv[1] (exit 3 with "in use" when taken), says so, and has a child of its own (same process group)
SERVER = """
import socket, subprocess, sys, time
sock = socket.socket()
try:
    sock.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    print("port in use", flush=True)
    sys.exit(3)
sock.listen()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"\\x1b[32mlistening\\x1b[0m child={child.pid}", flush=True)
while True:
    conn, _ = sock.accept()
    conn.close()
"""


class TinyService(LocalService):
    service_name = "tiny service"

    def __init__(self, directory: Path, ports: list[int] | None = None, start_timeout: float = 15.0) -> None:
        super().__init__(start_timeout=start_timeout, stop_timeout=5.0)
        self.directory = directory
        self.ports = ports  # the ports to try in turn (fresh ones when None)
        self.port = 0
        self.attempts = 0

    def _log_paths(self) -> list[Path]:
        return [self.directory / "tiny.log"]

    def start(self) -> TinyService:
        def attempt() -> None:
            self.attempts += 1
            self.port = self.ports.pop(0) if self.ports else self.fresh_ports(1)[0]
            self._spawn(
                [sys.executable, "-c", SERVER, str(self.port)], log_path=self._log_paths()[0], what="cannot run python"
            )
            self._wait_ready(self._ready, f"tiny service port={self.port}")

        self._start_attempts(attempt, self.port_attempts)
        return self

    def _ready(self) -> bool:
        if self._exit_code() is not None:
            if "in use" in self.log_tail():
                raise PortTakenError(f"tiny service port={self.port} is taken")
            raise ServiceError("tiny service exited")
        return port_open(self.host, self.port)

    def child_pid(self) -> int:
        line = wait_until(lambda: "child=" in self.log_tail(1) and self.log_tail(1), 10, "the child's pid")
        return int(line.rsplit("child=", 1)[1])


def test_start_pause_resume_stop_of_the_whole_process_group(tmp_path: Path) -> None:
    with TinyService(tmp_path) as service:
        assert service.running and port_open("127.0.0.1", service.port)
        pid, child = service.pid, service.child_pid()
        assert service.log_tail(1) == f"listening child={child}"  # colour codes stripped
        with service.paused():
            assert service.is_paused
            assert _proc_state(pid) == "T" and _proc_state(child) == "T"  # the group is frozen
        assert not service.is_paused
        assert _proc_state(pid) != "T" and _proc_state(child) != "T"
    assert not service.running
    wait_until(lambda: not Path(f"/proc/{child}").exists() or _proc_state(child) == "Z", 10, "the child gone")
    with pytest.raises(ServiceError, match="the tiny service is not started: call start\\(\\) first"):
        _ = service.pid


def test_a_taken_port_is_retried_on_a_fresh_one_and_a_paused_service_is_killed(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        taken = squatter.getsockname()[1]
        service = TinyService(tmp_path, ports=[taken]).start()
    try:
        assert service.attempts == 2 and service.port != taken and service.running
        service.pause()
        service.kill()  # a frozen process dies too
        assert not service.running
    finally:
        service.stop()


def test_not_ready_by_the_deadline_names_the_log_and_its_last_lines(tmp_path: Path) -> None:
    class NeverReady(TinyService):
        def _ready(self) -> bool:
            return False

    service = NeverReady(tmp_path, start_timeout=0.5)
    with pytest.raises(ServiceError) as info:
        service.start()
    message = str(info.value)
    assert message.startswith("tiny service port=")
    assert " not ready after 0.5s: the condition was still false; log path=" in message
    assert message.endswith(service.log_tail()) and not service.running

"""A listener relay run as a child process for the relay tests, its config and events."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson


class RelayUnderTest:
    """A relay subprocess with its status lines collected by a reader thread."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparktap.listener.relay", "--app-id", str(config["app_id"])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdin is not None
        self.stdin = self.proc.stdin
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.log: list[str] = []  # stderr: what the listener copies into the driver log
        self._log_changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_log, daemon=True).start()
        self.send(orjson.dumps(config))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(orjson.loads(line))

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            with self._log_changed:
                self.log.append(raw.decode(errors="replace").rstrip("\n"))
                self._log_changed.notify_all()

    def wait_log(self, predicate: Any, timeout: float = 30.0) -> str:
        """The first stderr line matching ``predicate``, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._log_changed:
            while True:
                for line in self.log:
                    if predicate(line):
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no matching relay log line within {timeout}s; log: {self.log[-5:]}")
                self._log_changed.wait(remaining)

    def send(self, *lines: bytes) -> None:
        self.stdin.write(b"".join(line + b"\n" for line in lines))
        self.stdin.flush()

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                status = self.lines.get(timeout=remaining)
            except queue.Empty:
                break
            self.seen.append(status)
            if predicate(status):
                return status
        raise AssertionError(f"no matching relay status within {timeout}s; last: {self.seen[-3:]}")

    def finish(self, timeout: float = 30.0) -> tuple[int, dict[str, Any]]:
        self.stdin.close()
        code = self.proc.wait(timeout=timeout)
        return code, self.wait_for(lambda s: s["status"] == "exit", 5.0)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def config(bootstrap: str, topic: str, spool: Path, app_id: str = "app-1", **extra: Any) -> dict[str, Any]:
    return {
        "protocol": 1,
        "app_id": app_id,
        "topic": topic,
        "kafka": {"bootstrap.servers": bootstrap},
        "spool_dir": str(spool),
        "spool_max_bytes": 1 << 20,
        "buffer_max_events": 10_000,
        "status_interval_ms": 50,
        **extra,
    }


def event(seq: int, event_type: str = "task_end") -> bytes:
    return orjson.dumps({"schema_version": 1, "event_type": event_type, "seq": seq, "pad": "x" * 50})

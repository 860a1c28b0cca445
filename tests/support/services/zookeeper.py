"""A throwaway standalone ZooKeeper from Debian's ``zookeeper`` package, for a local ClickHouse cluster.

``start()`` runs ``org.apache.zookeeper.server.ZooKeeperServerMain <port> <dataDir>`` from
``/usr/share/java/zookeeper.jar`` (the jar's manifest names its dependencies) in its own process group on a free
port, with the admin HTTP server off, and waits (polling against a deadline) until it serves requests: ``srvr``
answers with its version (``ruok`` says ``imok`` before that, while sessions are still refused — a ClickHouse
server connecting then gets "Cannot read all data … while receiving handshake" and, on 18.16, can crash on its first
``ON CLUSTER`` query). The data directory survives ``stop()``/``start()``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

from sparktap.errors import ServiceError
from sparktap.local.ports import free_port
from sparktap.local.service import LocalService

DEFAULT_JAR = "/usr/share/java/zookeeper.jar"
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


def find_zookeeper_jar(jar: str | None = None) -> str | None:
    """Path of Debian's zookeeper.jar (``apt-get install zookeeper``), or None when it is not installed."""
    path = jar or os.environ.get("SPARKTAP_ZOOKEEPER_JAR", DEFAULT_JAR)
    return path if os.path.isfile(path) and shutil.which("java") else None


def four_letter_word(host: str, port: int, word: str = "ruok", timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command and return the answer ('' when nothing came back)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperProcess(LocalService):
    """One standalone ZooKeeper on ``host:port`` (a free port unless given)."""

    service_name = "ZooKeeper"

    def __init__(self, workdir: Path | None = None, *, host: str = "127.0.0.1", startup_timeout: float = 60.0) -> None:
        super().__init__(host=host, start_timeout=startup_timeout, stop_timeout=15.0)
        self._owns_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sparktap-zookeeper-")) if workdir is None else Path(workdir)
        self.port: int | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _log_paths(self) -> list[Path]:
        return [self.workdir / "zookeeper.log"]

    def start(self) -> ZooKeeperProcess:
        if self.running:
            return self
        jar = find_zookeeper_jar()
        if jar is None:
            raise ServiceError(
                f'cannot start ZooKeeper jar="{DEFAULT_JAR}": not found (or no java); install the Debian package '
                "zookeeper (.ci/system-deps.sh)"
            )
        if self.port is None:
            self.port = free_port(self.host)
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)

        def attempt() -> None:
            self._spawn(
                [
                    shutil.which("java") or "java",
                    "-Xmx256m",
                    "-Dzookeeper.admin.enableServer=false",
                    "-Dzookeeper.4lw.commands.whitelist=ruok,srvr,stat",
                    f"-Dzookeeper.clientPortAddress={self.host}",
                    "-cp",
                    jar,
                    MAIN,
                    str(self.port),
                    str(self.workdir / "data"),
                ],
                log_path=self.workdir / "zookeeper.log",
                cwd=self.workdir,
                what="cannot run java for ZooKeeper",
            )
            self._wait_ready(self._ready, f"ZooKeeper on {self.address}", interval=0.1)

        self._start_attempts(attempt)
        return self

    def _ready(self) -> bool:
        if self._exit_code() is not None:
            raise ServiceError(f"ZooKeeper exited during startup; log: {self.workdir / 'zookeeper.log'}")
        return four_letter_word(self.host, self.port or 0, "srvr").startswith("Zookeeper version")

    def _failure_context(self, exc: ServiceError) -> str:
        return ""  # the messages name the log

    def close(self) -> None:
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

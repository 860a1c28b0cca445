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
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO

from sparktap.errors import ServiceError
from sparktap.local.ports import free_port, wait_until

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


class ZooKeeperProcess:
    """One standalone ZooKeeper on ``host:port`` (a free port unless given)."""

    def __init__(self, workdir: Path | None = None, *, host: str = "127.0.0.1", startup_timeout: float = 60.0) -> None:
        self.host = host
        self.startup_timeout = startup_timeout
        self._owns_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sparktap-zookeeper-")) if workdir is None else Path(workdir)
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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
        self._log = (self.workdir / "zookeeper.log").open("ab")
        self._proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
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
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )

        def ready() -> bool:
            if self._proc is None or self._proc.poll() is not None:
                raise ServiceError(f"ZooKeeper exited during startup; log: {self.workdir / 'zookeeper.log'}")
            return four_letter_word(self.host, self.port or 0, "srvr").startswith("Zookeeper version")

        try:
            wait_until(ready, self.startup_timeout, f"ZooKeeper on {self.address}", interval=0.1)
        except ServiceError:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 15.0) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

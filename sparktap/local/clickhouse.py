"""A throwaway clickhouse-server process: temp config, free ports, a user with a password, restartable.

Used by the integration tests (``tests/fixtures/clickhouse.py``) and the demo. The server's data directory and
ports survive ``stop()``/``start()``, so an outage ("server stopped for 60 s, then back") can be simulated;
``pause()``/``resume()`` freeze it with SIGSTOP/SIGCONT instead (connections hang rather than fail).

The password is random unless given, is written to users.xml only as its SHA-256, and appears only in
``url`` (a secret: log ``redacted_url`` instead).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO
from xml.sax.saxutils import escape

from pydantic import SecretStr

from sparktap.collector.storage.target import StorageTarget
from sparktap.errors import ServiceError, SparktapError
from sparktap.local.ports import free_port, port_open, wait_until

DEFAULT_BINARY = "clickhouse-server"
_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/usr/local/bin"])

_CONFIG = """<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>{root}/log/clickhouse-server.log</log>
        <errorlog>{root}/log/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>2</count>
    </logger>
    <tcp_port>{tcp_port}</tcp_port>
    <http_port>{http_port}</http_port>
    <listen_host>{host}</listen_host>
    <path>{root}/data/</path>
    <tmp_path>{root}/tmp/</tmp_path>
    <user_files_path>{root}/user_files/</user_files_path>
    <format_schema_path>{root}/format_schemas/</format_schema_path>
    <users_config>{root}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mark_cache_size>536870912</mark_cache_size>
    <timezone>UTC</timezone>
    <shutdown_wait_unfinished>1</shutdown_wait_unfinished>
{extra}
</yandex>
"""

_USERS = """<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <poll_interval>1</poll_interval>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
        <{user}>
            <password_sha256_hex>{password_sha256}</password_sha256_hex>
            <networks><ip>::/0</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </{user}>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
"""


def find_server_binary(binary: str | None = None) -> str | None:
    """Path of the clickhouse-server executable, or None when it is not installed."""
    return shutil.which(binary or DEFAULT_BINARY, path=_SEARCH_PATH)


class ClickHouseServerProcess:
    """One clickhouse-server child process on free local ports, with its own data directory.

    ``start()`` waits (polling against ``startup_timeout``) until a native-protocol query succeeds and raises
    ``ServiceError`` with the tail of the server's error log when it does not. ``stop()`` then ``start()``
    restarts it on the same data directory and ports. Use as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        binary: str | None = None,
        user: str = "sparktap",
        password: str | None = None,
        database: str = "sparktap",
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
        config_extra: str = "",
    ) -> None:
        """``config_extra``: XML elements added to the server's config.xml as they are (e.g. a ``<kafka>`` section)."""
        if not user.isidentifier():
            raise ValueError(f"user name must be an identifier, got {user!r}")
        self.binary = binary or DEFAULT_BINARY
        self.user = user
        self._password = SecretStr(password if password is not None else secrets.token_urlsafe(18))
        self.database = database
        self.host = host
        self.startup_timeout = startup_timeout
        self.config_extra = config_extra
        self._owns_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sparktap-clickhouse-")) if workdir is None else Path(workdir)
        self.tcp_port: int | None = None
        self.http_port: int | None = None
        self.server_version: tuple[int, ...] = ()
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._paused = False

    # ------------------------------------------------------------------------------------------------ addresses

    @property
    def password(self) -> SecretStr:
        return self._password

    def target(self, database: str | None = None) -> StorageTarget:
        """The StorageTarget of this server (for ``open_storage``)."""
        if self.tcp_port is None:
            raise ServiceError("clickhouse-server has not been started: call start() first")
        return StorageTarget(
            kind="clickhouse",
            host=self.host,
            port=self.tcp_port,
            user=self.user,
            password=self._password,
            database=database or self.database,
        )

    def url(self, database: str | None = None) -> str:
        """``clickhouse://user:password@host:port/db`` — contains the password: never log it (see redacted_url)."""
        target = self.target(database)
        return f"clickhouse://{target.user}:{self._password.get_secret_value()}@{target.host}:{target.port}/{target.database}"

    def redacted_url(self, database: str | None = None) -> str:
        return self.target(database).redacted

    # ------------------------------------------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> ClickHouseServerProcess:
        """Start the server (again) and wait until it answers queries; returns self."""
        if self.running:
            return self
        executable = find_server_binary(self.binary)
        if executable is None:
            raise ServiceError(
                f'cannot start ClickHouse binary="{self.binary}": not found; install the Debian package '
                "clickhouse-server (make system-deps) or set SPARKTAP_TEST_CLICKHOUSE to a clickhouse:// URL"
            )
        first_start = self.tcp_port is None
        attempts = 3 if first_start else 1
        for attempt in range(attempts):
            if first_start:
                self.tcp_port, self.http_port = free_port(self.host), free_port(self.host)
            self._write_config()
            self._spawn(executable)
            try:
                self._wait_ready()
                return self
            except ServiceError:
                log = self._log_tail()
                self._terminate()
                if attempt + 1 < attempts and "Address already in use" in log:
                    continue  # another process took the port in the meantime: try fresh ports
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); data directory and ports are kept."""
        self._terminate(timeout)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        if self._proc is not None and self._proc.poll() is None:
            self.resume()
            self._proc.kill()
            self._proc.wait()
        self._close_stderr()

    def pause(self) -> None:
        """Freeze the server with SIGSTOP: connections stay open but nothing is answered."""
        if self._proc is not None and self.running and not self._paused:
            self._proc.send_signal(signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        """Unfreeze a paused server (SIGCONT)."""
        if self._proc is not None and self._paused:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGCONT)
            self._paused = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """``with server.paused(): …`` freezes the server for the block."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def close(self) -> None:
        """Stop the server and delete its directory when this object created it."""
        self._terminate()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ClickHouseServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------ internals

    def _write_config(self) -> None:
        root = self.workdir
        for sub in ("data", "tmp", "user_files", "format_schemas", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(self._password.get_secret_value().encode()).hexdigest()
        (root / "config.xml").write_text(
            _CONFIG.format(
                root=escape(str(root)),
                tcp_port=self.tcp_port,
                http_port=self.http_port,
                host=self.host,
                extra=self.config_extra,
            )
        )
        users = root / "users.xml"
        users.write_text(_USERS.format(user=self.user, password_sha256=digest))
        users.chmod(0o600)

    def _spawn(self, executable: str) -> None:
        self._close_stderr()
        self._stderr = (self.workdir / "log" / "stderr.log").open("ab")
        self._paused = False
        self._proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [executable, f"--config-file={self.workdir / 'config.xml'}"],
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._stderr,
            stderr=self._stderr,
            start_new_session=True,
        )

    def _wait_ready(self) -> None:
        from clickhouse_driver import Client

        def probe() -> bool:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise ServiceError(
                    f"clickhouse-server exited with code {code} during startup; "
                    f"log dir={self.workdir / 'log'}; last log lines:\n{self._log_tail()}"
                )
            if not port_open(self.host, self.tcp_port or 0):
                return False  # not listening yet (the driver would log a traceback for a refused connection)
            client = Client(
                host=self.host,
                port=self.tcp_port or 0,
                user=self.user,
                password=self._password.get_secret_value(),
                connect_timeout=1,
                send_receive_timeout=5,
            )
            try:
                (row,) = client.execute("SELECT version()")
            finally:
                client.disconnect()
            self.server_version = tuple(int(p) for p in str(row[0]).split(".") if p.isdigit())
            return True

        try:
            wait_until(probe, self.startup_timeout, f"clickhouse-server on {self.host}:{self.tcp_port}", interval=0.1)
        except ServiceError as exc:
            if "last log lines" in str(exc):
                raise
            raise ServiceError(f"{exc}; last log lines:\n{self._log_tail()}") from exc
        except SparktapError as exc:  # pragma: no cover - wait_until only re-raises ours
            raise ServiceError(str(exc)) from exc

    def _log_tail(self, lines: int = 20) -> str:
        chunks = []
        for name in ("clickhouse-server.err.log", "stderr.log"):
            path = self.workdir / "log" / name
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            tail = [line for line in text.splitlines() if line.strip()][-lines:]
            if tail:
                chunks.append("\n".join(tail))
        return "\n".join(chunks) or "(no log output)"

    def _terminate(self, timeout: float = 15.0) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            self.resume()
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._paused = False
        self._close_stderr()

    def _close_stderr(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

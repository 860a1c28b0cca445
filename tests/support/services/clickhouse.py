"""A throwaway clickhouse-server process: temp config, free ports, a user with a password, restartable.

Used by the integration tests (``tests/fixtures/clickhouse.py``) and the benchmarks. The server's data directory and
ports survive ``stop()``/``start()``, so an outage ("server stopped for 60 s, then back") can be simulated;
``pause()``/``resume()`` freeze it with SIGSTOP/SIGCONT instead (connections hang rather than fail).

The password is random unless given, is written to users.xml only as its SHA-256, and appears only in
``url`` (a secret: log ``redacted_url`` instead).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from pydantic import SecretStr

from sparktap.errors import ServiceError
from sparktap.local.ports import port_open
from sparktap.local.service import LocalService
from sparktap.store.target import StorageTarget
from tests.support.services.tls import IssuedCertificate

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

# The native protocol over TLS (tcp_port_secure, ClickHouse 18.10+), with a certificate of the caller's CA.
_TLS = """    <tcp_port_secure>{port}</tcp_port_secure>
    <openSSL>
        <server>
            <certificateFile>{cert}</certificateFile>
            <privateKeyFile>{key}</privateKeyFile>
            <verificationMode>{verification}</verificationMode>
            <loadDefaultCAFile>false</loadDefaultCAFile>{client_ca}
            <cacheSessions>true</cacheSessions>
            <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols>
            <preferServerCiphers>true</preferServerCiphers>
        </server>
    </openSSL>"""


def find_server_binary(binary: str | None = None) -> str | None:
    """Path of the clickhouse-server executable, or None when it is not installed."""
    return shutil.which(binary or DEFAULT_BINARY, path=_SEARCH_PATH)


class ClickHouseServerProcess(LocalService):
    """One clickhouse-server child process on free local ports, with its own data directory.

    ``start()`` waits (polling against ``startup_timeout``) until a native-protocol query succeeds and raises
    ``ServiceError`` with the tail of the server's error log when it does not. ``stop()`` then ``start()``
    restarts it on the same data directory and ports. Use as a context manager, or call ``close()``.
    """

    service_name = "clickhouse-server"

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
        tls: IssuedCertificate | None = None,
        verify_clients: bool = False,
    ) -> None:
        """``config_extra``: XML elements added to the server's config.xml as they are (e.g. a ``<kafka>`` section).
        ``tls``: a server certificate (tests.support.services.tls): the native protocol is also served over TLS on
        ``tcp_port_secure`` (``target(secure=True)``); ``verify_clients``: only to clients with a certificate of the
        same CA (mutual TLS)."""
        if not user.isidentifier():
            raise ValueError(f"user name must be an identifier, got {user!r}")
        super().__init__(host=host, start_timeout=startup_timeout, stop_timeout=15.0)
        self.binary = binary or DEFAULT_BINARY
        self.user = user
        self._password = SecretStr(password if password is not None else secrets.token_urlsafe(18))
        self.database = database
        self.config_extra = config_extra
        self._owns_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sparktap-clickhouse-")) if workdir is None else Path(workdir)
        self.tcp_port: int | None = None
        self.http_port: int | None = None
        self.tls = tls
        self.verify_clients = verify_clients
        self.tcp_port_secure: int | None = None
        self.server_version: tuple[int, ...] = ()

    @property
    def startup_timeout(self) -> float:
        return self.start_timeout

    # ------------------------------------------------------------------------------------------------ addresses

    @property
    def password(self) -> SecretStr:
        return self._password

    def target(self, database: str | None = None, *, secure: bool = False) -> StorageTarget:
        """The StorageTarget of this server (for ``open_storage``); ``secure``: over TLS, trusting the CA of ``tls``."""
        if self.tcp_port is None:
            raise ServiceError("clickhouse-server has not been started: call start() first")
        if secure and (self.tls is None or self.tcp_port_secure is None):
            raise ServiceError("clickhouse-server has no TLS port: pass tls= (a certificate) when creating it")
        return StorageTarget(
            kind="clickhouse",
            host=self.host,
            port=self.tcp_port_secure if secure and self.tcp_port_secure else self.tcp_port,
            user=self.user,
            password=self._password,
            database=database or self.database,
            secure=secure,
            ca_certs=self.tls.ca if secure and self.tls else None,
        )

    def url(self, database: str | None = None) -> str:
        """``clickhouse://user:password@host:port/db`` — contains the password: never log it (see redacted_url)."""
        target = self.target(database)
        return f"clickhouse://{target.user}:{self._password.get_secret_value()}@{target.host}:{target.port}/{target.database}"

    def redacted_url(self, database: str | None = None) -> str:
        return self.target(database).redacted

    # ------------------------------------------------------------------------------------------------ lifecycle

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

        def attempt() -> None:
            if first_start:
                self.tcp_port, self.http_port = self.fresh_ports(2, self.host)
                self._pick_extra_ports()
            self._write_config()
            self._spawn(
                [executable, f"--config-file={self.workdir / 'config.xml'}"],
                log_path=self.workdir / "log" / "stderr.log",
                cwd=self.workdir,
                what=f'cannot run clickhouse-server binary="{executable}"',
            )
            self._wait_ready(self._probe, f"clickhouse-server on {self.host}:{self.tcp_port}", interval=0.1)

        self._start_attempts(attempt, self.port_attempts if first_start else 1)
        return self

    def _pick_extra_ports(self) -> None:
        if self.tls is not None:
            (self.tcp_port_secure,) = self.fresh_ports(1, self.host)

    def _port_taken(self, exc: ServiceError) -> bool:
        return "Address already in use" in self.log_tail()  # another process took a port: try fresh ones

    def close(self) -> None:
        """Stop the server and delete its directory when this object created it."""
        self._terminate()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------------------------------------ internals

    def _config_extra(self) -> str:
        if self.tls is None:
            return self.config_extra
        tls = _TLS.format(
            port=self.tcp_port_secure,
            cert=escape(str(self.tls.cert)),
            key=escape(str(self.tls.key)),
            verification="strict" if self.verify_clients else "none",
            client_ca=f"\n            <caConfig>{escape(str(self.tls.ca))}</caConfig>" if self.verify_clients else "",
        )
        return f"{tls}\n{self.config_extra}"

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
                extra=self._config_extra(),
            )
        )
        users = root / "users.xml"
        users.write_text(_USERS.format(user=self.user, password_sha256=digest))
        users.chmod(0o600)

    def query(self, sql: str, *, connect_timeout: float = 2, send_receive_timeout: float = 10) -> list[Any]:
        """Run ``sql`` on the plain native port as the password user, on a connection of its own (closed after)."""
        from clickhouse_driver import Client

        client = Client(
            host=self.host,
            port=self.tcp_port or 0,
            user=self.user,
            password=self._password.get_secret_value(),
            connect_timeout=connect_timeout,
            send_receive_timeout=send_receive_timeout,
        )
        try:
            rows: list[Any] = client.execute(sql)
        finally:
            client.disconnect()
        return rows

    def _probe(self) -> bool:
        code = self._exit_code()
        if code is not None:
            raise ServiceError(
                f"clickhouse-server exited with code {None if code == -1 else code} during startup; "
                f"log dir={self.workdir / 'log'}; last log lines:\n{self.log_tail()}"
            )
        if not port_open(self.host, self.tcp_port or 0):
            return False  # not listening yet (the driver would log a traceback for a refused connection)
        if self.tcp_port_secure is not None and not port_open(self.host, self.tcp_port_secure):
            return False
        (row,) = self.query("SELECT version()", connect_timeout=1, send_receive_timeout=5)
        self.server_version = tuple(int(p) for p in str(row[0]).split(".") if p.isdigit())
        return True

    def _failure_context(self, exc: ServiceError) -> str:
        return "" if "last log lines" in str(exc) else f"; last log lines:\n{self.log_tail()}"

    def _log_paths(self) -> list[Path]:
        return [self.workdir / "log" / "clickhouse-server.err.log", self.workdir / "log" / "stderr.log"]

"""ServerStorage: a ClickHouse server over the native protocol (clickhouse-driver), with TLS and user/password."""

from __future__ import annotations

import datetime as dt
import logging
import re
import ssl
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sparktap.schemas.ddl import Schema, quote_literal
from sparktap.store.base import StorageBase
from sparktap.store.errors import (
    AUTH_CODES,
    RETRYABLE_CODES,
    StorageError,
    StorageUnavailableError,
    describe,
    parse_server_message,
    scrub,
    snippet,
)
from sparktap.store.native import (
    NativeColumns,
    arrow_client_class,
    as_list,
    is_arrow,
    left_to_defaults,
    native_blocks,
)
from sparktap.store.stream import InsertStream, open_stream
from sparktap.store.target import StorageTarget

log = logging.getLogger(__name__)

_UNKNOWN_DATABASE = 81
_URL_HINT = "check SPARKTAP_CLICKHOUSE__URL or that the server is up"


class ServerStorage(StorageBase):
    """Storage on a ClickHouse server (``clickhouse://user:password@host:9000/db?secure=true&verify=false``).

    ``connect_timeout`` bounds connecting; ``send_receive_timeout`` bounds waiting for an answer (a frozen server
    fails after it with ``StorageUnavailableError``).
    """

    kind = "clickhouse"

    def __init__(
        self,
        target: StorageTarget,
        *,
        connect_timeout: float = 10.0,
        send_receive_timeout: float = 60.0,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(target)
        self.connect_timeout = connect_timeout
        self.send_receive_timeout = send_receive_timeout
        self.settings = dict(settings or {})
        if target.cluster:  # inserts durable on every shard before offsets are committed: storage/cluster.py
            from sparktap.store.cluster import CLUSTER_SETTINGS

            self.settings = {**CLUSTER_SETTINGS, **self.settings}
        self._secrets = (target.password.get_secret_value(),)
        self._check_tls_files()
        self._client: Any = self._make_client(target.database)
        self._closed = False
        self._constant_defaults: dict[str, dict[str, Any]] = {}
        """table -> column -> literal DEFAULT: the Arrow columns equal to it are left to the server"""
        self._stream_client: Any = None
        """the connection of ``open_stream``'s INSERTs (the shared one stays free for queries meanwhile)"""

    def _check_tls_files(self) -> None:
        """A TLS file named in the settings that cannot be read is a configuration error, said once, at start."""
        t = self.target
        for name, path in (("ca_certs", t.ca_certs), ("certfile", t.certfile), ("keyfile", t.keyfile)):
            if path is not None and not path.is_file():
                raise StorageError(
                    f'cannot use ClickHouse url="{self.redacted_url}": {name}="{path}" is not a readable file; set '
                    f"SPARKTAP_CLICKHOUSE__{name.upper()} (or {name}= in the URL) to a PEM file"
                )

    def _handshake_hint(self, message: str) -> str:
        """A TLS handshake the server ended: most often it wanted a client certificate. Under TLS 1.3 the client
        finishes its side first, so the refusal reads as an EOF or, when the server's alert arrives before the next
        read, as "alert certificate required": the same cause, either way."""
        ended = ("EOF occurred in violation of protocol", "alert certificate required")
        if self.target.secure and self.target.certfile is None and any(m in message for m in ended):
            return (
                ", and whether the server requires a client certificate (SPARKTAP_CLICKHOUSE__CERTFILE and __KEYFILE, "
                "or certfile= and keyfile= in the URL)"
            )
        return ""

    def _make_client(self, database: str) -> Any:
        t = self.target
        return arrow_client_class()(
            host=t.host,
            port=t.port,
            database=database,
            user=t.user,
            password=t.password.get_secret_value(),
            secure=t.secure,
            verify=t.verify,
            **{
                name: str(path)
                for name, path in (("ca_certs", t.ca_certs), ("certfile", t.certfile), ("keyfile", t.keyfile))
                if path is not None
            },
            client_name="sparktap",
            connect_timeout=self.connect_timeout,
            send_receive_timeout=self.send_receive_timeout,
            sync_request_timeout=min(5.0, self.send_receive_timeout),
            settings=self.settings,
        )

    # ----------------------------------------------------------------------------------------- execution

    def _execute(self, sql: str, data: Any = None, *, client: Any = None, **kwargs: Any) -> Any:
        active = client or self._client
        started = time.monotonic()
        with self._lock:
            if self._closed:
                raise StorageError(f'ClickHouse storage url="{self.redacted_url}" is closed')
            try:
                if data is None:
                    return active.execute(sql, **kwargs)
                return active.execute(sql, data, **kwargs)
            except Exception as exc:
                try:
                    active.disconnect()  # a failed exchange leaves the connection unusable: reconnect next time
                except Exception:  # noqa: S110 - best effort, the original error is what matters
                    pass
                raise self._error(exc, sql, time.monotonic() - started) from exc

    def _error(self, exc: BaseException, sql: str, elapsed: float) -> StorageError:
        from clickhouse_driver import errors

        url = self.redacted_url
        reason = _verify_failure(exc)
        if reason is not None:  # a certificate the CA bundle does not vouch for: retrying will not help
            return StorageError(
                scrub(
                    f'cannot reach ClickHouse url="{url}" ca_certs="{self.target.ca_certs or "system CAs"}": TLS '
                    f"certificate verification failed: {reason}; set SPARKTAP_CLICKHOUSE__CA_CERTS (or ca_certs= in "
                    "the URL) to the PEM bundle of the CA that signed the server's certificate",
                    self._secrets,
                )
            )
        if isinstance(exc, errors.NetworkError | errors.SocketTimeoutError | OSError | EOFError):
            code = getattr(exc, "code", None)
            code, name, message = parse_server_message(str(exc), code if isinstance(code, int) else None)
            if not message or message.startswith("("):  # the driver gives only "(host:port)" for timeouts
                message = f"{'timed out' if code == 209 else type(exc).__name__} {message}".strip()
            return StorageUnavailableError(
                scrub(
                    f'cannot reach ClickHouse url="{url}" after {elapsed:.0f}s: '
                    f"{describe(code, name, type(exc).__name__)}: "
                    f"{message}; {_URL_HINT}{self._handshake_hint(message)}",
                    self._secrets,
                ),
                code=code,
                name=name,
            )
        if isinstance(exc, errors.ServerException):
            code, name, message = parse_server_message(exc.message, exc.code)
            if code in AUTH_CODES:
                return StorageError(
                    scrub(
                        f'ClickHouse refused the login url="{url}" user="{self.target.user}": '
                        f"{describe(code, name)}: {message}; check the user and password in "
                        "SPARKTAP_CLICKHOUSE__URL",
                        self._secrets,
                    ),
                    code=code,
                    name=name,
                )
            where = f'url="{url}" query="{snippet(sql)}"'
            if code in RETRYABLE_CODES:
                shard = (
                    f'; with cluster="{self.target.cluster}" this is often one shard (the address above) down'
                    if self.target.cluster
                    else ""
                )
                return StorageUnavailableError(
                    scrub(
                        f"ClickHouse is unavailable {where}: {describe(code, name)}: {message}{shard}; retry later",
                        self._secrets,
                    ),
                    code=code,
                    name=name,
                )
            hint = "; run ensure_schema() first" if code == _UNKNOWN_DATABASE else ""
            return StorageError(
                scrub(f"ClickHouse rejected the query {where}: {describe(code, name)}: {message}{hint}", self._secrets),
                code=code,
                name=name,
            )
        code = getattr(exc, "code", None)
        return StorageError(
            scrub(
                f'ClickHouse client failed url="{url}" query="{snippet(sql)}": {type(exc).__name__}: {exc}',
                self._secrets,
            ),
            code=code if isinstance(code, int) else None,
        )

    # ----------------------------------------------------------------------------------------- primitives

    def _server_version(self) -> tuple[int, ...]:
        try:
            rows = self._execute("SELECT version()")
        except StorageError as exc:
            if exc.code != _UNKNOWN_DATABASE:
                raise
            rows = self._bootstrap("SELECT version()")
        return tuple(int(p) for p in str(rows[0][0]).split(".") if p.isdigit())

    def _bootstrap(self, sql: str) -> Any:
        """Run ``sql`` on a connection to the ``default`` database (ours may not exist yet)."""
        client = self._make_client("default")
        try:
            return self._execute(sql, client=client)
        finally:
            client.disconnect()

    def _create_database(self, statement: str) -> None:
        try:
            self.command(statement)
        except StorageError as exc:
            if exc.code != _UNKNOWN_DATABASE:
                raise
            self._bootstrap(statement)
            self._client.disconnect()

    def command(self, sql: str) -> None:
        self._execute(sql)

    def query(self, sql: str) -> list[dict[str, Any]]:
        rows, columns = self._execute(sql, with_column_types=True)
        names = [c[0] for c in columns]
        out = []
        for row in rows:
            item = dict(zip(names, row, strict=True))
            for key, value in item.items():
                if isinstance(value, dt.datetime) and value.tzinfo is None:
                    item[key] = value.replace(tzinfo=dt.UTC)
            out.append(item)
        return out

    def insert_columns(self, table: str, columns: Mapping[str, Sequence[Any]]) -> int:
        if not columns:
            return 0
        data: list[Any]
        if native_blocks() and all(is_arrow(values) for values in columns.values()):  # native.py encodes them
            sent = len(next(iter(columns.values())))
            columns = left_to_defaults(columns, self.constant_defaults(table))
            data = NativeColumns(columns, sent)
        else:
            data = [as_list(values) for values in columns.values()]
            sent = len(data[0])
        names = ", ".join(f"`{n}`" for n in columns)
        written = self._execute(
            f"INSERT INTO {self.qualified(table)} ({names}) VALUES", data, columnar=True, types_check=False
        )
        return self._confirmed(table, written, sent)

    def ensure_schema(self, retention_days: int = 30) -> Schema:
        self._constant_defaults = {}  # the tables may change: their defaults are read again
        return super().ensure_schema(retention_days)

    def open_stream(self, table: str, columns: Mapping[str, Any]) -> InsertStream | None:
        """An INSERT into ``table`` kept open over several batches (``stream.py``), ``columns`` sent as its first
        block; None when this storage or these columns cannot stream (a cluster: its Distributed tables insert each
        block on its own; columns not Arrow; a compressed connection), then nothing was sent."""
        if self.target.cluster or self._closed:
            return None
        if self._stream_client is None:
            self._stream_client = self._make_client(self.database)
        return open_stream(self, self._stream_client, table, columns)

    def stream_error(self, exc: BaseException, sql: str, elapsed: float) -> StorageError:
        """The StorageError of an INSERT stream's failed exchange, as for any other query."""
        return self._error(exc, sql, elapsed)

    def constant_defaults(self, table: str) -> dict[str, Any]:
        """Column -> literal ``DEFAULT`` (an integer or a string) of ``table`` as the server has it
        (``system.columns``; read once per table and connection, again after ``ensure_schema``)."""
        found = self._constant_defaults.get(table)
        if found is None:
            rows = self.query(
                "SELECT name, default_expression AS e FROM system.columns "  # noqa: S608 - quoted literals
                f"WHERE database = {quote_literal(self.database)} AND table = {quote_literal(table)} "
                "AND default_kind = 'DEFAULT'"
            )
            found = {}
            for row in rows:
                text = str(row["e"])
                if _INT_LITERAL.fullmatch(text):
                    found[row["name"]] = int(text)
                elif _STR_LITERAL.fullmatch(text):
                    found[row["name"]] = text[1:-1]
            self._constant_defaults[table] = found
        return found

    def _confirmed(self, table: str, written: Any, sent: int) -> int:
        """The row count clickhouse-driver reports for an INSERT (it raises when the server refuses the block);
        a count other than what was sent is an error, never a success."""
        if isinstance(written, int) and written != sent:
            raise StorageUnavailableError(
                f'insert into table="{table}" url="{self.redacted_url}" wrote {written} of {sent} rows; the batch '
                "is retried (nothing is committed before ClickHouse confirms every row)"
            )
        return sent

    def close(self) -> None:
        """Disconnect, after any query under way in another thread (the alerter's follower shares the client)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for client in (self._client, self._stream_client):
                try:
                    if client is not None:
                        client.disconnect()
                except Exception as exc:  # a connection a failed exchange already dropped: nothing left to release
                    log.debug("closing ClickHouse url=%r: %s", self.redacted_url, type(exc).__name__)


_INT_LITERAL = re.compile(r"-?[0-9]{1,18}")
_STR_LITERAL = re.compile(r"'[A-Za-z0-9_.: -]*'")


_VERIFY_FAILED = re.compile(r"certificate verify failed: ([^(]*?)\s*\(_ssl")


def _verify_failure(exc: BaseException) -> str | None:
    """Why the server's certificate was refused, or None when ``exc`` is not that (the driver turns the
    SSLCertVerificationError into a NetworkError carrying its text)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return str(exc.verify_message)
    match = _VERIFY_FAILED.search(str(exc))
    return match.group(1) if match else None

"""ChdbStorage: embedded ClickHouse (chDB) on a local directory.

chDB opens one data directory per *process* (a second process fails with ``Error initializing EmbeddedServer``)
and one directory at a time within a process; the collector process owns the store in embedded mode.
Inserts hand chDB the rows as one Arrow table through ``INSERT … SELECT … FROM Python(table)``: a plain query, so a
refused block raises (chDB's streaming ``send_insert`` reports success for a block refused at write time). Arrow
costs a fraction of JSONEachRow, whose parsing dominated (bench/collector_storage.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from sparktap.schemas.ddl import quote_ident
from sparktap.schemas.fields import arrow_type_of, unwrap
from sparktap.store.base import StorageBase
from sparktap.store.errors import (
    RETRYABLE_CODES,
    StorageError,
    StorageUnavailableError,
    describe,
    parse_server_message,
    snippet,
)
from sparktap.store.target import StorageTarget

_SESSION_SETTINGS = (
    "SET output_format_json_quote_64bit_integers = 0",
    "SET output_format_json_quote_denormals = 0",
    "SET session_timezone = 'UTC'",
    # ReplacingMergeTree would collapse duplicate keys inside each inserted block: over half of the insert's CPU
    # (bench/collector_storage.py), for nothing, since every _dedup view reads with FINAL
    "SET optimize_on_insert = 0",
    # the analyzer's and-compare-chain pass (transitive comparisons inferred over every AND chain) took a third of the
    # planning CPU of the detection query (issue 22: 2.1 -> 1.7 s CPU over all rules at 10 M task rows, same findings);
    # our filters compare columns with constants, so it has nothing to infer
    "SET optimize_and_compare_chain = 0",
)


def _converter(ch_type: str) -> Callable[[Any], Any] | None:
    """How a JSON value of a column becomes the Python value the server engine would return."""
    base = unwrap(ch_type)
    if base.startswith("DateTime"):
        return _parse_datetime
    if base in ("Date", "Date32"):
        return lambda v: dt.date.fromisoformat(v) if isinstance(v, str) else v
    return None


def _parse_datetime(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)


class ChdbStorage(StorageBase):
    """Storage on an embedded chDB directory (``chdb:///path``)."""

    kind = "chdb"

    def __init__(self, target: StorageTarget) -> None:
        super().__init__(target)
        if target.path is None:
            raise StorageError("chDB storage needs a directory: use SPARKTAP_CLICKHOUSE__URL=chdb:///path/to/dir")
        self.path = Path(target.path)
        self._types: dict[str, dict[str, str]] = {}
        self._conn: Any = None
        self.last_rows_read = 0
        """rows the last statement read from storage (chDB's ``storage_rows_read``): what a test of a query's
        bounds compares, exactly"""
        self._open()

    def _open(self) -> None:
        import chdb

        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f'cannot create chDB directory path="{str(self.path)}": {exc.strerror}; '
                "check SPARKTAP_CLICKHOUSE__URL and the directory's permissions"
            ) from exc
        try:
            self._conn = chdb.connect(str(self.path))
        except Exception as exc:  # chDB raises RuntimeError with the engine's message
            raise StorageError(self._open_failure(str(exc))) from exc
        for statement in _SESSION_SETTINGS:
            self.command(statement)
        if self._database_exists():
            self.command(f"USE {self._quoted_db}")

    def _open_failure(self, text: str) -> str:
        where = f'path="{str(self.path)}"'
        if "already initialized with path" in text:
            return (
                f"cannot open chDB store {where}: this process already has another chDB directory open "
                "(chDB opens one directory per process); close that storage first"
            )
        if "EmbeddedServer" in text or "Cannot lock file" in text:
            holder = ""
            try:
                status = (self.path / "status").read_text()
                holder = next(
                    (
                        f" (held by pid={line.split(':', 1)[1].strip()})"
                        for line in status.splitlines()
                        if line.startswith("PID:")
                    ),
                    "",
                )
            except OSError:
                pass
            return (
                f"cannot open chDB store {where}: another process holds it{holder}; chDB opens a directory from "
                "one process only: stop that process, read through it, or point SPARKTAP_CLICKHOUSE__URL elsewhere"
            )
        code, name, message = parse_server_message(text)
        return f"cannot open chDB store {where}: {describe(code, name)}: {message}"

    @property
    def _quoted_db(self) -> str:
        return quote_ident(self.database)

    def _database_exists(self) -> bool:
        db = self.database.replace("\\", "\\\\").replace("'", "\\'")
        return bool(self.query(f"SELECT name FROM system.databases WHERE name = '{db}'"))  # noqa: S608

    # ----------------------------------------------------------------------------------------- primitives

    def _raw(self, sql: str, fmt: str = "CSV") -> bytes:
        with self._lock:
            if self._conn is None:
                raise StorageError(f'chDB storage path="{str(self.path)}" is closed')
            try:
                result = self._conn.query(sql, fmt)
            except Exception as exc:
                raise self._error(exc, sql) from exc
            self.last_rows_read = int(result.storage_rows_read()) if hasattr(result, "storage_rows_read") else 0
        data: bytes = result.bytes() if hasattr(result, "bytes") else bytes(result)
        return data

    def _error(self, exc: BaseException, sql: str) -> StorageError:
        code, name, message = parse_server_message(str(exc))

        text = f'chDB query failed path="{str(self.path)}" query="{snippet(sql)}": {describe(code, name)}: {message}'
        if code in RETRYABLE_CODES:
            return StorageUnavailableError(text + "; retry later", code=code, name=name)
        return StorageError(text, code=code, name=name)

    def _server_version(self) -> tuple[int, ...]:
        (row,) = self.query("SELECT version() AS v")
        return tuple(int(p) for p in str(row["v"]).split(".") if p.isdigit())

    def command(self, sql: str) -> None:
        self._raw(sql)

    def query(self, sql: str) -> list[dict[str, Any]]:
        data = self._raw(sql, "JSONCompactEachRowWithNamesAndTypes")
        if not data:
            return []
        lines = data.splitlines()
        names = orjson.loads(lines[0])
        converters = [_converter(t) for t in orjson.loads(lines[1])]
        out = []
        for line in lines[2:]:
            values = orjson.loads(line)
            for i, conv in enumerate(converters):
                if conv is not None:
                    values[i] = conv(values[i])
            out.append(dict(zip(names, values, strict=True)))
        return out

    def _column_types(self, table: str) -> dict[str, str]:
        types = self._types.get(table)
        if types is None:
            db = self.database.replace("\\", "\\\\").replace("'", "\\'")
            tbl = table.replace("\\", "\\\\").replace("'", "\\'")
            rows = self.query(
                f"SELECT name, type FROM system.columns WHERE database = '{db}' AND table = '{tbl}' "  # noqa: S608
                "AND default_kind NOT IN ('MATERIALIZED', 'ALIAS')"
            )
            if not rows:
                raise StorageError(
                    f'cannot insert into table="{table}" path="{str(self.path)}": Code 60 UNKNOWN_TABLE: the table '
                    f'does not exist in database="{self.database}"; run ensure_schema() first',
                    code=60,
                    name="UNKNOWN_TABLE",
                )
            types = {str(r["name"]): str(r["type"]) for r in rows}
            self._types[table] = types
        return types

    def _schema_changed(self) -> None:
        self._types.clear()
        self.command(f"USE {self._quoted_db}")

    def insert_columns(self, table: str, columns: Mapping[str, Sequence[Any]]) -> int:
        import pyarrow as pa

        if not columns:
            return 0
        types = self._column_types(table)
        arrays = []
        for name, values in columns.items():
            ch_type = types.get(name)
            if ch_type is None:
                raise StorageError(
                    f'cannot insert into table="{table}" path="{str(self.path)}": Code 16 NO_SUCH_COLUMN_IN_TABLE: '
                    f"no column {name!r}; run ensure_schema() to add new columns",
                    code=16,
                    name="NO_SUCH_COLUMN_IN_TABLE",
                )
            arrays.append(self._arrow_array(table, name, ch_type, values))
        data = pa.Table.from_arrays(arrays, names=list(columns))  # columns may be chunked: no copy
        names = ", ".join(f"`{n}`" for n in columns)
        # A plain INSERT … SELECT raises when ClickHouse refuses the block. chDB's streaming insert (send_insert)
        # does not: it reported every row written while storing none of a block refused at write time ("Too many
        # partitions for single INSERT block", a CHECK constraint), and the collector would have committed them.
        # Python(<name>) reads the Arrow table named here, from this frame, without a copy.
        sparktap_insert_block = data  # noqa: F841 - read by chDB's Python() table function
        sql = f"INSERT INTO {self.qualified(table)} ({names}) SELECT {names} FROM Python(sparktap_insert_block)"  # noqa: S608
        self._raw(sql)
        return int(data.num_rows)

    @staticmethod
    def _arrow_array(table: str, name: str, ch_type: str, values: Sequence[Any]) -> Any:
        import pyarrow as pa

        try:
            typ = arrow_type_of(ch_type)
        except ValueError as exc:
            raise StorageError(f"{exc}: insert this column through SQL instead") from exc
        if isinstance(values, pa.Array | pa.ChunkedArray) and values.type == typ:
            return values
        try:
            return pa.array(values, type=typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            if pa.types.is_boolean(typ):  # 0/1 integers from an unvalidated event
                try:
                    return pa.array([None if v is None else bool(v) for v in values], type=typ)
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
                    pass
            raise StorageError(
                f'cannot insert into table="{table}" column="{name}" type="{ch_type}": {exc}; '
                "the rows do not match the column type (validate events before inserting)"
            ) from exc

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

"""One INSERT kept open over several batches, on a ClickHouse server (``ServerStorage.open_stream``).

Each batch goes in as one Native block (``native.py``) of the same INSERT, on a connection of its own. The server
squashes the blocks of one INSERT into one block before it writes (``min_insert_block_size_rows`` and ``_bytes``:
1,048,576 rows and 256 MiB by default), so a stream of seven 30,000-row batches makes one part and fires each
materialized view once, where seven INSERTs make seven parts that its background merges then rewrite: what
ClickHouse's own Kafka engine does with one flush (docs/benchmarks.md). Nothing of it counts as stored before
``finish`` returned: the server confirms the whole INSERT at its end, or refuses it.

A server that shuts down while a stream is open ends it on its own (18.16 treats its shutdown as the end of the
data), writes the blocks it has and answers as if the INSERT were complete, then closes the connection; a block sent
meanwhile would be lost behind that early answer. So before each block and the end the stream checks that the
server said nothing since, and after the confirmation that the connection is still alive (a ping): either failing,
the stream fails, and the collector reads its messages again (what the server wrote is deduplicated).

A block whose columns cannot go into this stream (not Arrow, a type the Native encoder does not handle, a column
the stream leaves to its constant ``DEFAULT`` that varies in this batch) is not sent: ``send`` says so, and the
caller finishes the stream and inserts that batch on its own.
"""

from __future__ import annotations

import select
import time
from collections.abc import Mapping
from typing import Any, Protocol

from sparktap.store.errors import StorageError
from sparktap.store.native import NativeColumns, left_to_defaults


class ServerStorage(Protocol):
    """What a stream asks of the server storage that opened it (``sparktap.store.server.ServerStorage``)."""

    def qualified(self, table: str) -> str: ...

    def constant_defaults(self, table: str) -> dict[str, Any]: ...

    def stream_error(self, exc: BaseException, sql: str, elapsed: float) -> StorageError: ...


_ENDED_EARLY = (
    "the server ended the INSERT before its data did (shutting down?): the blocks sent are not known to be stored"
)


class InsertStream:
    """An open ``INSERT INTO table (names) VALUES`` whose data blocks are the batches sent into it."""

    def __init__(
        self, storage: ServerStorage, client: Any, table: str, sql: str, names: list[str], sample: Any
    ) -> None:
        self.storage = storage
        self.table = table
        self.rows = 0
        """rows sent so far (what ``finish`` confirms)"""
        self.blocks = 0
        self.opened_at = time.monotonic()
        self._client = client
        self._sql = sql
        self._names = names
        self._sample = sample
        self._open = True

    @property
    def age(self) -> float:
        return time.monotonic() - self.opened_at

    def send(self, columns: Mapping[str, Any]) -> bool:
        """Send Arrow columns (equal lengths) as the stream's next block; False, sending nothing, when they cannot
        go into this stream. StorageError (the stream is then closed) when the server or the connection fails."""
        if not self._open:
            raise StorageError(f'the INSERT stream into table="{self.table}" is closed')
        if not columns:
            return False
        varying = left_to_defaults(columns, self.storage.constant_defaults(self.table))
        if set(varying) - set(self._names) or any(name not in columns for name in self._names):
            return False
        rows = len(next(iter(columns.values())))
        encoded = NativeColumns({n: columns[n] for n in self._names}, rows).encode(self._sample.columns_with_types)
        if encoded is None:
            return False

        def block() -> None:
            self._server_silent()
            self._client.write_block(encoded, rows)

        self._exchange(block)
        self.rows += rows
        self.blocks += 1
        return True

    def finish(self) -> int:
        """End the INSERT and wait for the server's confirmation of every row sent; the rows (StorageError when the
        server refuses them: none of them counts as stored)."""
        if not self._open:
            raise StorageError(f'the INSERT stream into table="{self.table}" is closed')

        def end() -> None:
            self._server_silent()
            self._client.end_data()
            self._client.receive_end_of_insert_query()
            if not self._client.connection.ping():
                raise ConnectionError(_ENDED_EARLY)

        self._exchange(end)
        self._open = False
        return self.rows

    def cancel(self) -> None:
        """Drop the connection without ending the INSERT (nothing sent counts as stored; the server may still have
        written it, which the tables' deduplication absorbs when the rows come again)."""
        if self._open:
            self._open = False
            self._disconnect()

    def _server_silent(self) -> None:
        """Raise when the server spoke since the last block: mid-INSERT it only does to refuse it (its exception is
        raised) or, shutting down, to end it early with what it had (it then writes and confirms those blocks,
        and closes the connection: ``finish`` checks that the connection outlived its confirmation)."""
        sock = self._client.connection.socket
        if sock is None:
            return
        poller = select.poll()  # not select(): a process may hold descriptors past FD_SETSIZE (1,024)
        poller.register(sock, select.POLLIN | select.POLLPRI)
        if poller.poll(0):  # readable, or hung up / in error
            self._client.receive_end_of_insert_query()
            raise ConnectionError(_ENDED_EARLY)

    def _exchange(self, step: Any) -> None:
        started = time.monotonic()
        try:
            step()
        except Exception as exc:
            self._open = False
            self._disconnect()
            raise self.storage.stream_error(exc, self._sql, time.monotonic() - started) from exc

    def _disconnect(self) -> None:
        try:
            self._client.disconnect()
        except Exception:  # noqa: S110 - a connection a failed exchange already dropped
            pass


def open_stream(storage: ServerStorage, client: Any, table: str, columns: Mapping[str, Any]) -> InsertStream | None:
    """Open an INSERT of ``columns``' names (without those equal to their constant ``DEFAULT`` in every row) on
    ``client``'s connection and send ``columns`` as its first block; None when they cannot be streamed (then nothing
    was sent)."""
    from sparktap.store.native import is_arrow, native_blocks

    if not columns or not native_blocks() or not all(is_arrow(values) for values in columns.values()):
        return None
    names = list(left_to_defaults(columns, storage.constant_defaults(table)))
    sql = f"INSERT INTO {storage.qualified(table)} ({', '.join(f'`{n}`' for n in names)}) VALUES"
    started = time.monotonic()
    try:
        with client.disconnect_on_error(sql, None):
            if client.connection.compression:  # the Native encoder writes uncompressed blocks only
                return None
            client.connection.send_query(sql)
            client.connection.send_external_tables(None)
            sample = client.receive_sample_block()
    except Exception as exc:
        raise storage.stream_error(exc, sql, time.monotonic() - started) from exc
    stream = InsertStream(storage, client, table, sql, names, sample)
    if not stream.send(columns):
        stream.cancel()
        return None
    return stream

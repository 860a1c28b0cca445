"""The micro-batch ledger and the store server on real chDB and the Debian ClickHouse server (no Spark)."""

from __future__ import annotations

import socket
import struct

import orjson
import pytest

from sparktap.collector.streaming.ingest import LEDGER_TABLE, commit_batch, ensure_ledger, is_committed
from sparktap.collector.streaming.store_server import StoreServer, remote_commit, remote_is_committed
from sparktap.schemas.examples import example_event
from sparktap.schemas.rows import RowBuilder
from sparktap.store import ChdbStorage, Storage, StorageError

pytestmark = pytest.mark.integration


def _columns(storage: Storage, seqs: range) -> dict[str, list[object]]:
    builder = RowBuilder(storage.version())
    rows = [builder.build(example_event("job_end", seq=s).model_dump())[1] for s in seqs]
    return {name: [r[name] for r in rows] for name in rows[0]}


def _count(storage: Storage, table: str) -> int:
    return int(storage.query(f"SELECT count() AS n FROM {storage.qualified(table)}")[0]["n"])  # noqa: S608


def test_a_batch_is_committed_once_and_a_replay_is_skipped(storage: Storage) -> None:
    storage.ensure_schema()
    ensure_ledger(storage)
    batch = {"job_end": _columns(storage, range(1, 11))}
    assert not is_committed(storage, "q1", 0)
    first = commit_batch(storage, "q1", 0, batch, dead_letters=2)
    assert (first.status, first.rows) == ("committed", 10)
    again = commit_batch(storage, "q1", 0, batch)
    assert (again.status, again.rows) == ("skipped", 0)
    other = commit_batch(storage, "q2", 0, batch)  # another query's batch 0 is another batch
    assert other.status == "committed"
    assert _count(storage, "job_end") == 20
    rows = storage.query(
        f"SELECT sink_id, batch_id, rows, dead_letters, tables FROM {storage.qualified(LEDGER_TABLE)} ORDER BY sink_id"
    )  # noqa: S608
    assert [(r["sink_id"], r["batch_id"], r["rows"], r["dead_letters"]) for r in rows] == [
        ("q1", 0, 10, 2),
        ("q2", 0, 10, 0),
    ]
    assert orjson.loads(rows[0]["tables"]) == {"job_end": 10}


def test_store_server_commits_for_another_process_and_checks_its_token(chdb_storage: ChdbStorage) -> None:
    chdb_storage.ensure_schema()
    batch = {"job_end": _columns(chdb_storage, range(1, 6))}
    with StoreServer(chdb_storage) as server:
        assert not remote_is_committed(server.address, server.token, "q", 7)
        result = remote_commit(server.address, server.token, "q", 7, batch)
        assert (result.status, result.rows) == ("committed", 5)
        assert remote_is_committed(server.address, server.token, "q", 7)
        assert remote_commit(server.address, server.token, "q", 7, batch).status == "skipped"
        with pytest.raises(StorageError, match="refused the ingest token"):
            remote_commit(server.address, "not-the-token", "q", 8, batch)
        with pytest.raises(StorageError, match="NO_SUCH_COLUMN_IN_TABLE"):  # the store's own error comes back
            remote_commit(server.address, server.token, "q", 9, {"job_end": {"no_such_column": [1]}})
        assert not remote_is_committed(server.address, server.token, "q", 9)
        # garbage on the socket is dropped without taking the server down
        host, port = server.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(server.token.encode())
            assert sock.recv(1) == b"+"
            sock.sendall(struct.pack(">Q", 3) + b"{x}")
            assert sock.recv(10) == b""
        with socket.create_connection((host, int(port)), timeout=5) as sock:  # no token: refused before any frame
            sock.sendall(b"x" * len(server.token))
            assert sock.recv(10) == b"-"
        assert remote_is_committed(server.address, server.token, "q", 7)
    assert _count(chdb_storage, "job_end") == 5

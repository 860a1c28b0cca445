"""Serving a chDB store from the process owning it, for Spark's commits (``StoreServer``) and the calls that reach it
(``remote_commit``, ``remote_is_committed``).

chDB opens a directory from one process only, and Spark commits in a Python worker process, not in the
process that started the query. ``StoreServer`` therefore runs inside the process that holds the chDB store
(``sparktap collect --engine spark`` holds it, like the consumer-group collector does): Spark's commit sends
the batch to it over 127.0.0.1 (a random token, acknowledged, then a length-prefixed JSON frame), and it commits the
batch with the ledger (``ingest.py``).
"""

from __future__ import annotations

import hmac
import logging
import secrets
import socket
import socketserver
import struct
import threading
from collections.abc import Mapping
from typing import Any

import orjson

from sparktap.collector.streaming.ingest import (
    COMMIT_LOCK,
    BatchResult,
    Columns,
    commit_batch,
    ensure_ledger,
    is_committed,
)
from sparktap.collector.streaming.offsets import StreamingError
from sparktap.store import Storage, StorageError, StorageUnavailableError

log = logging.getLogger("sparktap.collector.streaming")

_FRAME = struct.Struct(">Q")
_ACCEPTED, _REFUSED = b"+", b"-"
_TOKEN_BYTES = 32  # secrets.token_hex(16)
_IDLE_TIMEOUT = 600.0  # a connection that sends nothing for this long is dropped
_MAX_FRAME = 4 << 30


def _send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_FRAME.pack(len(payload)) + payload)


def _recv(sock: socket.socket) -> bytes:
    header = _recv_exact(sock, _FRAME.size)
    (size,) = _FRAME.unpack(header)
    if size > _MAX_FRAME:
        raise StreamingError(f"refusing a {size}-byte frame from the ingest connection")
    return _recv_exact(sock, size)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ConnectionError("the ingest connection closed mid-frame")
        chunks += chunk
    return bytes(chunks)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        owner = self.server.owner
        try:
            # the token comes first and is answered with one byte, before any frame is read
            self.request.settimeout(_IDLE_TIMEOUT)
            token = _recv_exact(self.request, _TOKEN_BYTES)
            if not hmac.compare_digest(token, owner.token.encode("ascii")):
                self.request.sendall(_REFUSED)
                return
            self.request.sendall(_ACCEPTED)
            request = orjson.loads(_recv(self.request))
        except (ConnectionError, OSError, orjson.JSONDecodeError, StreamingError) as exc:
            log.warning("ingest: unreadable request from %s: %s", self.client_address, exc)
            return
        reply = owner.handle(request)
        try:
            _send(self.request, orjson.dumps(reply))
        except OSError as exc:
            log.warning("ingest: cannot answer %s: %s", self.client_address, exc)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: StoreServer


class StoreServer:
    """Serves ``commit_batch`` on ``storage`` to Spark's commit step (in another process) over 127.0.0.1.

    >>> with StoreServer(storage) as server:
    ...     writer.option("ingest", server.address).option("ingestToken", server.token)
    """

    def __init__(self, storage: Storage, host: str = "127.0.0.1", port: int = 0) -> None:
        self.storage = storage
        self.token = secrets.token_hex(_TOKEN_BYTES // 2)
        self._server = _Server((host, port), _Handler, bind_and_activate=True)
        self._server.owner = self
        self._thread: threading.Thread | None = None
        self.batches = 0

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> StoreServer:
        """Create the ledger table if needed, then serve in a daemon thread."""
        if self._thread is None:
            ensure_ledger(self.storage)
            self._thread = threading.Thread(target=self._server.serve_forever, name="sparktap-ingest", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> StoreServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def handle(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):
            return {"ok": False, "error": "malformed ingest request: not an object", "retryable": False}
        op = request.get("op")
        try:
            if op == "ping":
                return {"ok": True}
            if op == "check":
                with COMMIT_LOCK:
                    done = is_committed(self.storage, str(request["sink_id"]), int(request["batch_id"]))
                return {"ok": True, "committed": done}
            if op == "commit":
                result = commit_batch(
                    self.storage,
                    str(request["sink_id"]),
                    int(request["batch_id"]),
                    request["tables"],
                    int(request.get("dead_letters", 0)),
                )
                self.batches += 1
                return {"ok": True, "status": result.status, "rows": result.rows}
        except StorageError as exc:
            return {"ok": False, "error": str(exc), "retryable": isinstance(exc, StorageUnavailableError)}
        except (KeyError, TypeError, ValueError) as exc:
            return {"ok": False, "error": f"malformed ingest request: {type(exc).__name__}: {exc}", "retryable": False}
        return {"ok": False, "error": f"unknown ingest operation {op!r}", "retryable": False}


def _remote(address: str, token: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    host, _, port = address.rpartition(":")
    try:
        payload = orjson.dumps(request)
    except TypeError as exc:
        raise StreamingError(f"cannot encode the request for the ingest connection: {exc}") from exc
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(token.encode("ascii", "replace")[:_TOKEN_BYTES].ljust(_TOKEN_BYTES, b"\0"))
            if _recv_exact(sock, 1) != _ACCEPTED:
                raise StorageError(f'the process serving the store ingest="{address}" refused the ingest token')
            _send(sock, payload)
            reply: dict[str, Any] = orjson.loads(_recv(sock))
    except (OSError, ValueError) as exc:
        raise StorageUnavailableError(
            f'cannot reach the process serving the store ingest="{address}": {type(exc).__name__}: {exc}; '
            "the collector that started this query must still be running"
        ) from exc
    if not reply.get("ok"):
        error = str(reply.get("error", "unknown error"))
        if reply.get("retryable"):
            raise StorageUnavailableError(error)
        raise StorageError(error)
    return reply


def remote_is_committed(address: str, token: str, sink_id: str, batch_id: int, timeout: float = 60.0) -> bool:
    """Whether the process serving the store has this batch in its ledger."""
    reply = _remote(address, token, {"op": "check", "sink_id": sink_id, "batch_id": batch_id}, timeout)
    return bool(reply.get("committed"))


def remote_commit(
    address: str,
    token: str,
    sink_id: str,
    batch_id: int,
    tables: Mapping[str, Columns],
    dead_letters: int = 0,
    timeout: float = 600.0,
) -> BatchResult:
    """Ask the process serving the store to commit a batch (see ``StoreServer``)."""
    request = {
        "op": "commit",
        "sink_id": sink_id,
        "batch_id": batch_id,
        "tables": tables,
        "dead_letters": dead_letters,
    }
    reply = _remote(address, token, request, timeout)
    return BatchResult(str(reply["status"]), int(reply.get("rows", 0)))

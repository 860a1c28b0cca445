"""Which applications just got rows on a ClickHouse server or cluster: what ``sparktap alert`` follows to evaluate
them at once (``Alerter.follow``).

- ``InsertFollower`` reads one server's parts.
- ``ShardFollowers`` does it for every shard of a cluster, through one connection per shard: parts live on each
  server's ``<table>_local`` replicas, so the server the storage URL names only sees its own shard's.
- ``follower_for(storage)`` picks the one the storage needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from sparktap.detection.findings import QueryFn
from sparktap.errors import SparktapError

log = logging.getLogger(__name__)


class Follower(Protocol):
    def poll(self) -> set[tuple[str, str]]: ...

    def close(self) -> None: ...


class InsertFollower:
    """Which applications got rows since the last ``poll``, read from a ClickHouse server's parts.

    Every insert makes a new part and takes a new block number in its partition; a merge makes a part spanning the
    block numbers of what it merged. ``poll`` lists the active parts of the event tables (``system.parts``, block
    ranges included) and for each part spanning a block number not seen before reads its distinct (cluster, app_id)
    (``_part IN (…)``: only those parts are read). So a merge of seen parts yields nothing new, and a part fetched
    late by a replica (an insert taken by the other replica of the shard, its block older than parts already seen)
    still counts. A part merged from seen and unseen blocks between two polls names the applications of both: an
    evaluation more, never a message more (``Alerter.evaluate_apps`` sends only what is new). The first poll only
    records where the tables are. Works from clickhouse-server 18.16. The replicas of one shard share block numbers,
    so a follower may move from one replica to another of the same shard.
    """

    def __init__(self, query: QueryFn, database: str) -> None:
        self.query = query
        self.database = database
        self._seen: dict[tuple[str, str], list[tuple[int, int]]] | None = None

    def poll(self) -> set[tuple[str, str]]:
        from sparktap.schemas.ddl import EVENT_TYPES, quote_ident, quote_literal

        tables = ", ".join(quote_literal(t) for name in EVENT_TYPES for t in (name, f"{name}_local"))
        rows = self.query(
            "SELECT table, partition, name, min_block_number, max_block_number "  # noqa: S608 - our identifiers
            f"FROM system.parts WHERE database = {quote_literal(self.database)} AND active AND table IN ({tables})"
        )
        first = self._seen is None
        seen = self._seen if self._seen is not None else {}
        fresh: dict[str, list[str]] = {}
        for row in rows:
            key = (str(row["table"]), str(row["partition"]))
            blocks = (int(row["min_block_number"]), int(row["max_block_number"]))
            if not first and not _covered(seen.get(key, []), blocks):
                fresh.setdefault(key[0], []).append(str(row["name"]))
        apps: set[tuple[str, str]] = set()
        read: set[tuple[str, str]] = set()
        for table, parts in fresh.items():
            names = ", ".join(quote_literal(p) for p in parts)
            for row in self.query(
                f"SELECT DISTINCT _part AS part, toString(cluster) AS cluster, "  # noqa: S608
                f"toString(app_id) AS app_id FROM {quote_ident(self.database)}.{quote_ident(table)} "
                f"WHERE _part IN ({names})"
            ):
                apps.add((str(row["cluster"]), str(row["app_id"])))
                read.add((table, str(row["part"])))
        # only now are the parts seen: a poll that fails half-way reads the same parts again next time. A new part
        # that gave no row was merged away meanwhile: its blocks stay unseen, so the merged part counts as new.
        for row in rows:
            table, name = str(row["table"]), str(row["name"])
            if table in fresh and name in fresh[table] and (table, name) not in read:
                continue
            key = (table, str(row["partition"]))
            seen[key] = _with(seen.get(key, []), (int(row["min_block_number"]), int(row["max_block_number"])))
        self._seen = seen
        return apps

    def close(self) -> None:
        """Nothing to release: the query function belongs to the caller."""


def _covered(seen: list[tuple[int, int]], blocks: tuple[int, int]) -> bool:
    """Whether the block range lies within one of the seen ranges (sorted, disjoint, not adjacent)."""
    low, high = blocks
    return any(a <= low and high <= b for a, b in seen)


def _with(seen: list[tuple[int, int]], blocks: tuple[int, int]) -> list[tuple[int, int]]:
    """The seen ranges with ``blocks`` added, merged: they stay as many as the holes in the block numbers."""
    merged: list[tuple[int, int]] = []
    for low, high in sorted([*seen, blocks]):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


class _Shard:
    """One shard's ``InsertFollower``, over a connection to one of its replicas; when that replica fails, the next
    poll tries the next one. They share block numbers, so nothing is missed by the move; parts the new replica holds
    and the old one had not fetched yet are new to the follower, and their applications are named (again)."""

    def __init__(
        self, number: int, replicas: list[tuple[str, int]], connect: Callable[[str, int], Any], database: str
    ) -> None:
        self.number = number
        self.replicas = replicas
        self._connect = connect
        self._current = 0
        self._storage: Any = None
        self._follower = InsertFollower(self._query, database)

    @property
    def replica(self) -> str:
        host, port = self.replicas[self._current]
        return f"{host}:{port}"

    def _query(self, sql: str) -> list[dict[str, Any]]:
        if self._storage is None:
            self._storage = self._connect(*self.replicas[self._current])
        return list(self._storage.query(sql))

    def poll(self) -> set[tuple[str, str]]:
        try:
            return self._follower.poll()
        except SparktapError:
            self._drop()
            self._current = (self._current + 1) % len(self.replicas)
            raise

    def _drop(self) -> None:
        storage, self._storage = self._storage, None
        if storage is not None:
            storage.close()

    def close(self) -> None:
        self._drop()


class ShardFollowers:
    """``InsertFollower`` on every shard of a ClickHouse cluster (``system.clusters``), each through its own
    connection with the storage URL's user: an insert on any shard names its application. A shard that cannot be
    read is skipped for that poll (logged once, and once when it is read again); ``poll`` raises only when no shard
    could be read. The hosts are those of ``remote_servers``: the alerter must reach them as the servers do."""

    def __init__(self, storage: Any) -> None:
        from sparktap.store.cluster import shard_replicas

        self.cluster = str(storage.target.cluster)
        connect = _server_connection(storage)
        self.shards = [
            _Shard(n, r, connect, storage.database) for n, r in sorted(shard_replicas(storage, self.cluster).items())
        ]
        self._failing: set[int] = set()

    def poll(self) -> set[tuple[str, str]]:
        apps: set[tuple[str, str]] = set()
        errors: list[str] = []
        for shard in self.shards:
            replica = shard.replica
            try:
                apps |= shard.poll()
            except SparktapError as exc:
                errors.append(f"shard {shard.number} ({replica}): {exc}")
                if shard.number not in self._failing:
                    log.warning(
                        "alerter: cannot read the new parts of shard %d at %s (its inserts wait for the "
                        "periodic pass): %s",
                        shard.number,
                        replica,
                        exc,
                    )
                self._failing.add(shard.number)
                continue
            if shard.number in self._failing:
                log.info("alerter: reading the new parts of shard %d again (%s)", shard.number, replica)
                self._failing.discard(shard.number)
        if len(errors) == len(self.shards):
            raise SparktapError(f'no shard of cluster "{self.cluster}" could be read: ' + "; ".join(errors))
        return apps

    def close(self) -> None:
        for shard in self.shards:
            shard.close()


def _server_connection(storage: Any) -> Callable[[str, int], Any]:
    """Open a ``ServerStorage`` on (host, port) with the storage's user, database and timeouts."""
    from sparktap.store import ServerStorage

    def connect(host: str, port: int) -> Any:
        target = storage.target.model_copy(update={"host": host, "port": port})
        return ServerStorage(
            target, connect_timeout=storage.connect_timeout, send_receive_timeout=storage.send_receive_timeout
        )

    return connect


def follower_for(storage: Any) -> Follower:
    """``ShardFollowers`` for a cluster storage URL (``?cluster=``), else an ``InsertFollower`` on the server."""
    if getattr(storage.target, "cluster", None):
        return ShardFollowers(storage)
    return InsertFollower(storage.query, storage.database)

"""A throwaway ClickHouse cluster on 127.0.0.1: one ZooKeeper and one clickhouse-server per replica.

``ClickHouseCluster(shards=(1, 2))`` is 2 shards, the second with 2 replicas (the test layout). Every server gets
the same ``remote_servers`` section (cluster ``name``, ``internal_replication`` on: a Distributed table writes one
replica per shard and replication copies it), ``macros`` (``shard`` = ``01``…, ``replica`` unique in the cluster,
e.g. ``s02r2``, and ``cluster``), the ZooKeeper node and ``distributed_ddl`` (``ON CLUSTER``). All servers share
one user and password (Distributed tables log in to the other servers with them).

    with ClickHouseCluster(shards=(1, 2)) as cluster:
        url = cluster.url("db")                 # clickhouse://…@<first server>/db?cluster=sparktap
        cluster.node(1, 0).stop(); …; cluster.node(1, 0).start()   # a replica away for a while

Nodes are ``ClickHouseServerProcess`` objects (``stop``/``start`` keep data and ports, ``pause``/``resume``).
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from sparktap.local.ports import free_port, wait_until
from sparktap.store.target import StorageTarget
from tests.support.services.clickhouse import ClickHouseServerProcess
from tests.support.services.zookeeper import ZooKeeperProcess

DEFAULT_CLUSTER = "sparktap"


def _cluster_config(
    name: str,
    layout: Sequence[Sequence[int]],
    user: str,
    password: str,
    zk: str,
    shard: int,
    replica: int,
    interserver_port: int,
) -> str:
    shards = []
    for ports in layout:
        replicas = "".join(
            f"<replica><host>127.0.0.1</host><port>{p}</port><user>{user}</user><password>{password}</password>"
            "</replica>"
            for p in ports
        )
        shards.append(f"<shard><internal_replication>true</internal_replication>{replicas}</shard>")
    zk_host, zk_port = zk.rsplit(":", 1)
    return f"""    <remote_servers><{name}>{"".join(shards)}</{name}></remote_servers>
    <zookeeper><node><host>{zk_host}</host><port>{zk_port}</port></node><session_timeout_ms>30000</session_timeout_ms>
    </zookeeper>
    <macros><cluster>{name}</cluster><shard>{shard + 1:02d}</shard><replica>s{shard + 1:02d}r{replica + 1}</replica>
    </macros>
    <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <interserver_http_port>{interserver_port}</interserver_http_port>"""


class ClickHouseCluster:
    """ZooKeeper plus ``sum(shards)`` clickhouse-server processes forming cluster ``name``."""

    def __init__(
        self,
        shards: Sequence[int] = (1, 2),
        *,
        name: str = DEFAULT_CLUSTER,
        user: str = "sparktap",
        workdir: Path | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        if not shards or min(shards) < 1:
            raise ValueError(f"shards must list at least one shard of >= 1 replicas, got {list(shards)}")
        self.name = name
        self.shards = tuple(shards)
        self.user = user
        self._password = secrets.token_hex(16)  # goes into remote_servers in plain text: hex, no XML escaping
        self._owns_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="sparktap-chcluster-")) if workdir is None else Path(workdir)
        self.zookeeper = ZooKeeperProcess(self.workdir / "zookeeper", startup_timeout=startup_timeout)
        self.startup_timeout = startup_timeout
        self.nodes: list[list[ClickHouseServerProcess]] = []

    def start(self) -> ClickHouseCluster:
        self.zookeeper.start()
        if not self.nodes:
            layout = [[free_port() for _ in range(n)] for n in self.shards]
            for s, ports in enumerate(layout):
                row = []
                for r, port in enumerate(ports):
                    extra = _cluster_config(
                        self.name, layout, self.user, self._password, self.zookeeper.address, s, r, free_port()
                    )
                    node = ClickHouseServerProcess(
                        self.workdir / f"s{s + 1:02d}r{r + 1}",
                        user=self.user,
                        password=self._password,
                        startup_timeout=self.startup_timeout,
                        config_extra=extra,
                    )
                    node.tcp_port, node.http_port = port, free_port()
                    row.append(node)
                self.nodes.append(row)
        for node in self.all_nodes():
            node.start()
        for node in self.all_nodes():
            self._wait_zookeeper(node)
        return self

    def _wait_zookeeper(self, node: ClickHouseServerProcess) -> None:
        """Wait until the server has a ZooKeeper session (18.16 can crash on an ON CLUSTER query without one)."""

        def ready() -> bool:
            rows = node.query("SELECT count() FROM system.zookeeper WHERE path = '/'")
            return bool(rows) and int(rows[0][0]) > 0

        wait_until(
            ready, self.startup_timeout, f"ZooKeeper session of clickhouse-server on port {node.tcp_port}", interval=0.2
        )

    def all_nodes(self) -> list[ClickHouseServerProcess]:
        return [node for row in self.nodes for node in row]

    def node(self, shard: int, replica: int = 0) -> ClickHouseServerProcess:
        """The server of shard ``shard`` (0-based), replica ``replica`` (0-based)."""
        return self.nodes[shard][replica]

    @property
    def server_version(self) -> tuple[int, ...]:
        return self.node(0).server_version

    def target(self, database: str = "sparktap", shard: int = 0, replica: int = 0) -> StorageTarget:
        """The cluster-mode StorageTarget through one node (the first by default)."""
        return self.node(shard, replica).target(database).model_copy(update={"cluster": self.name})

    def url(self, database: str = "sparktap", shard: int = 0, replica: int = 0) -> str:
        """``clickhouse://user:password@host:port/db?cluster=<name>``: contains the password, never log it."""
        return f"{self.node(shard, replica).url(database)}?cluster={self.name}"

    def redacted_url(self, database: str = "sparktap") -> str:
        return self.target(database).redacted

    def stop(self) -> None:
        for node in self.all_nodes():
            node.stop()
        self.zookeeper.stop()

    def close(self) -> None:
        for node in self.all_nodes():
            node.close()
        self.zookeeper.close()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ClickHouseCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

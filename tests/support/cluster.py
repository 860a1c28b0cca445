"""Direct SQL on one node of the test ClickHouse cluster."""

from __future__ import annotations

from clickhouse_driver import Client

from tests.support.services.clickhouse import ClickHouseServerProcess


def node_client(node: ClickHouseServerProcess, database: str) -> Client:
    return Client(
        host=node.host,
        port=node.tcp_port,
        user=node.user,
        password=node.password.get_secret_value(),
        database=database,
        connect_timeout=5,
        send_receive_timeout=60,
    )


def on_node(node: ClickHouseServerProcess, database: str, sql: str) -> list[tuple[object, ...]]:
    client = node_client(node, database)
    try:
        return list(client.execute(sql))
    finally:
        client.disconnect()

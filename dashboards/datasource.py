"""The ``grafana-clickhouse-datasource`` datasource, for file provisioning and for the HTTP API.

It points at a ClickHouse *server* (Grafana cannot read an embedded chDB directory): host, native port, database,
user; the password stays out of generated files (``$CLICKHOUSE_PASSWORD`` in provisioning, revealed only in the
API request of ``deploy``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import SecretStr

from sparktap.dashboards.builders import Json
from sparktap.dashboards.config import DEFAULT_CONFIG, GrafanaConfig
from sparktap.dashboards.defaults import DATASOURCE_TYPE, SECRET_ENV


@dataclass(frozen=True)
class ClickHouseEndpoint:
    """Where Grafana reaches ClickHouse (native protocol)."""

    host: str = "clickhouse"
    port: int = 9000
    user: str = "default"
    secure: bool = False
    password: SecretStr | None = None

    @classmethod
    def from_url(cls, url: str) -> ClickHouseEndpoint:
        """From a ``clickhouse://user:password@host:port/db`` storage URL."""
        from sparktap.store.target import parse_storage_url

        target = parse_storage_url(url)
        if not target.capabilities.remote:
            raise ValueError("Grafana needs a ClickHouse server URL (clickhouse://…), not an embedded chDB directory")
        password = target.password if target.password.get_secret_value() else None
        return cls(target.host, target.port, target.user, target.secure, password)


def json_data(endpoint: ClickHouseEndpoint, cfg: GrafanaConfig) -> Json:
    return {
        "host": endpoint.host,
        "port": endpoint.port,
        "protocol": "native",
        "secure": endpoint.secure,
        "username": endpoint.user,
        "defaultDatabase": cfg.database,
        "queryTimeout": "60",
        "dialTimeout": "10",
    }


def datasource_file(endpoint: ClickHouseEndpoint, cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    """A ``datasources`` provisioning file."""
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": cfg.datasource_name,
                "uid": cfg.datasource_uid,
                "type": DATASOURCE_TYPE,
                "access": "proxy",
                "orgId": 1,
                "editable": False,
                "jsonData": json_data(endpoint, cfg),
                "secureJsonData": {"password": f"${SECRET_ENV['clickhouse_password']}"},
            }
        ],
    }


def datasource_body(endpoint: ClickHouseEndpoint, cfg: GrafanaConfig = DEFAULT_CONFIG) -> Json:
    """``AddDataSourceCommand`` / ``UpdateDataSourceCommand`` body (the password revealed only here)."""
    body: Json = {
        "name": cfg.datasource_name,
        "uid": cfg.datasource_uid,
        "type": DATASOURCE_TYPE,
        "access": "proxy",
        "jsonData": json_data(endpoint, cfg),
    }
    if endpoint.password is not None:
        body["secureJsonData"] = {"password": endpoint.password.get_secret_value()}
    return body

"""ClickHouse over TLS with a private CA bundle, on clickhouse-server 18.16 (the session server's
``tcp_port_secure``, its certificate signed by a CA made at session start): exact rows in and out with
verification on, through ``ca_certs`` given in the target, the URL or the settings; a wrong CA is one clear line;
a client certificate (``certfile``/``keyfile``) opens a server that requires one (its own server, ~2 s)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from sparktap.collector.decode import Decoder
from sparktap.schemas.examples import example_event
from sparktap.schemas.rows import RowBuilder
from sparktap.store import ServerStorage, StorageError, StorageUnavailableError, open_storage
from sparktap.store.settings import ClickHouseSettings
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.services import unavailable
from tests.support.decode import NOW_MS, encode
from tests.support.services.clickhouse import ClickHouseServerProcess, find_server_binary
from tests.support.services.tls import issue, make_ca

pytestmark = pytest.mark.integration

N = 200
ARROW = 10_000
"""rows per Arrow block: its 8-byte columns (80 KB) are past the size sent straight to the socket (64 KiB)"""


def test_exact_rows_in_and_out_over_tls_verified_against_the_private_ca(clickhouse_server: ClickHouseServer) -> None:
    database = random_database()
    target = clickhouse_server.tls_target(database)
    password = target.password.get_secret_value()
    url = (
        f"clickhouses://{target.user}:{quote(password, safe='')}@{target.host}:{target.port}/{database}"
        f"?ca_certs={quote(str(clickhouse_server.ca))}"
    )
    settings = ClickHouseSettings.model_validate({"url": url})
    assert settings.target().ca_certs == clickhouse_server.ca and settings.target().verify
    storage = open_storage(settings.target(), connect_timeout=5)
    try:
        assert isinstance(storage, ServerStorage)
        storage.ensure_schema()
        builder = RowBuilder(storage.version())
        base = example_event("task_end").model_dump()
        rows = [builder.build({**base, "seq": seq, "task_id": seq})[1] for seq in range(1, N + 1)]
        storage.insert("task_end", rows)
        assert storage.query("SELECT count() AS n, uniqExact(task_id) AS tasks FROM task_end") == [{"n": N, "tasks": N}]
        # the C reader's Arrow columns as Native blocks, their large buffers sent straight to the TLS socket: one
        # INSERT, then an INSERT stream of two blocks
        full = {k: v for k, v in example_event("task_end").model_dump().items() if v is not None}
        decoder = Decoder(storage.schema(), arrow=True, clock=lambda: NOW_MS / 1000)
        chunks = [
            decoder.decode([encode({**full, "seq": s, "task_id": s}) for s in range(start, start + ARROW)])
            .tables["task_end"]
            .columns
            for start in range(10_000, 10_000 + 3 * ARROW, ARROW)
        ]
        assert storage.insert_columns("task_end", chunks[0]) == ARROW
        stream = storage.open_stream("task_end", chunks[1])
        assert stream is not None and stream.send(chunks[2]) and stream.finish() == 2 * ARROW
        total = N + 3 * ARROW
        assert storage.query("SELECT count() AS n, uniqExact(task_id) AS tasks FROM task_end") == [
            {"n": total, "tasks": total}
        ]
        connection = storage._client.connection
        assert (connection.secure_socket, connection.verify_cert) == (True, True)
        assert connection.ssl_options["ca_certs"] == str(clickhouse_server.ca)
    finally:
        storage.close()
        drop_database(clickhouse_server, database)


def test_a_wrong_ca_bundle_is_one_clear_error_line(clickhouse_server: ClickHouseServer, tmp_path: Path) -> None:
    other = make_ca(tmp_path / "other", "not the server's CA")
    target = clickhouse_server.tls_target("default")
    password = target.password.get_secret_value()
    settings = ClickHouseSettings.model_validate(
        {"url": f"clickhouses://{target.user}:{quote(password, safe='')}@{target.host}:{target.port}/default",
         "ca_certs": str(other.cert)}
    )  # fmt: skip
    storage = open_storage(settings.target(), connect_timeout=5)
    try:
        with pytest.raises(StorageError) as info:
            storage.query("SELECT 1")
    finally:
        storage.close()
    message = str(info.value)
    assert message == (
        f'cannot reach ClickHouse url="{target.redacted}" ca_certs="{other.cert}": TLS certificate verification '
        "failed: unable to get local issuer certificate; set SPARKTAP_CLICKHOUSE__CA_CERTS (or ca_certs= in the "
        "URL) to the PEM bundle of the CA that signed the server's certificate"
    )
    assert password not in message


def test_a_ca_bundle_that_is_not_a_file_is_refused_at_start(
    clickhouse_server: ClickHouseServer, tmp_path: Path
) -> None:
    target = clickhouse_server.tls_target("default").model_copy(update={"ca_certs": tmp_path / "missing.pem"})
    with pytest.raises(StorageError) as info:
        open_storage(target, connect_timeout=5)
    assert str(info.value) == (
        f'cannot use ClickHouse url="{target.redacted}": ca_certs="{tmp_path / "missing.pem"}" is not a readable '
        "file; set SPARKTAP_CLICKHOUSE__CA_CERTS (or ca_certs= in the URL) to a PEM file"
    )


def test_a_client_certificate_from_the_url_opens_a_server_that_requires_one(tmp_path: Path) -> None:
    if find_server_binary() is None:
        unavailable("clickhouse-server", "clickhouse-server is not installed (apt-get install clickhouse-server)")
    tls = tmp_path / "tls"
    ca = make_ca(tls)
    client = issue(ca, tls, "sparktap-collector")
    with ClickHouseServerProcess(tmp_path / "ch", tls=issue(ca, tls, "clickhouse"), verify_clients=True) as server:
        target = server.target("default", secure=True)
        password = quote(target.password.get_secret_value(), safe="")
        url = (
            f"clickhouses://{target.user}:{password}@{target.host}:{target.port}/default?ca_certs={quote(str(ca.cert))}"
            f"&certfile={quote(str(client.cert))}&keyfile={quote(str(client.key))}"
        )
        with_certificate = open_storage(ClickHouseSettings.model_validate({"url": url}).target(), connect_timeout=5)
        without = open_storage(target, connect_timeout=5)
        try:
            assert with_certificate.query("SELECT count() AS n FROM numbers(200)") == [{"n": 200}]
            with pytest.raises(StorageUnavailableError) as info:
                without.query("SELECT 1")  # the server ends the handshake: no certificate
            assert str(info.value).endswith(
                "check SPARKTAP_CLICKHOUSE__URL or that the server is up, and whether the server requires a client "
                "certificate (SPARKTAP_CLICKHOUSE__CERTFILE and __KEYFILE, or certfile= and keyfile= in the URL)"
            )
        finally:
            with_certificate.close()
            without.close()

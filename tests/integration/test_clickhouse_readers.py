"""Least privilege on the real clickhouse-server 18.16: the read-only user of ``users_xml`` (Grafana, ``sparktap
findings``, ``sparktap report``) reads the sparktap database and nothing else, and can change nothing; and what
18.16 allows for team isolation (no row filter: users.xml ``<filter>`` is ignored), which ``users_xml`` refuses."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from sparktap.detection.findings import Detector
from sparktap.local.ports import wait_until
from sparktap.report.collect import collect
from sparktap.schemas.schema import schema_for
from sparktap.store import ServerStorage, Storage, StorageError, open_storage
from sparktap.store.access import Reader, policy_tables, reader_statements, users_xml
from sparktap.store.teams import ensure_readers
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.support import detection_samples as samples
from tests.support import sample_app
from tests.support.detection import WINDOW, load

pytestmark = pytest.mark.integration


def _login(server: ClickHouseServer, database: str, user: str, password: SecretStr) -> ServerStorage:
    """A connection as ``user``, once the server has reloaded its users (it rereads users.d/ every few seconds)."""
    target = server.target(database).model_copy(update={"user": user, "password": password})
    found: list[ServerStorage] = []

    def ready() -> bool:
        storage = ServerStorage(target, connect_timeout=5, send_receive_timeout=30)
        try:
            storage.query("SELECT 1 AS x")
        except StorageError:
            storage.close()
            return False
        found.append(storage)
        return True

    wait_until(ready, 60, f"user {user} can log in", interval=0.5)
    return found[0]


def _users_d(server: ClickHouseServer, name: str, text: str) -> Path:
    folder = server.require_process().workdir / "users.d"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def data(clickhouse_server: ClickHouseServer) -> Iterator[Storage]:
    database = random_database("readers")
    storage = open_storage(clickhouse_server.target(database))
    try:
        storage.ensure_schema()
        load(storage, [samples.skewed_join(), samples.balanced()])
        load(storage, [sample_app.App("app-us-2", cluster="prod-us").start()])
        yield storage
    finally:
        storage.close()
        drop_database(clickhouse_server, database, timeout=120)


def _refused(storage: ServerStorage, sql: str) -> str:
    with pytest.raises(StorageError) as info:
        storage.command(sql)
    return str(info.value)


def test_the_reader_reads_the_sparktap_database_and_changes_nothing(
    clickhouse_server: ClickHouseServer, data: Storage
) -> None:
    db = data.database
    password = SecretStr(secrets.token_urlsafe(16))
    path = _users_d(clickhouse_server, "sparktap-readers.xml", users_xml(db, [Reader("sparktap_grafana", password)]))
    assert password.get_secret_value() not in path.read_text()
    reader = _login(clickhouse_server, db, "sparktap_grafana", password)
    try:
        assert reader.query("SELECT count() AS n FROM app_start_dedup") == data.query(
            "SELECT count() AS n FROM app_start_dedup"
        )
        version = clickhouse_server.version
        findings = Detector(reader.query, database=db, version=version).findings(*WINDOW)
        assert sorted({f.app_id for f in findings}) == ["app-skewed-join"]  # sparktap findings as the reader
        report = collect(reader.query, "app-skewed-join", database=db, version=version)  # sparktap report
        assert (report.app_id, report.cluster) == ("app-skewed-join", "prod-eu")
        before = data.query("SELECT count() AS n FROM task_end")
        assert "READONLY" in _refused(reader, f"INSERT INTO `{db}`.app_start SELECT * FROM `{db}`.app_start")
        assert "READONLY" in _refused(reader, f"ALTER TABLE `{db}`.app_start ADD COLUMN x UInt8")
        assert "READONLY" in _refused(reader, f"ALTER TABLE `{db}`.task_end DELETE WHERE 1")
        assert "READONLY" in _refused(reader, f"DROP TABLE `{db}`.app_start")
        assert "READONLY" in _refused(reader, f"TRUNCATE TABLE `{db}`.task_end")
        assert "READONLY" in _refused(reader, f"CREATE TABLE `{db}`.x (a UInt8) ENGINE = Memory")
        assert "READONLY" in _refused(reader, "SET readonly = 0")
        assert "READONLY" in _refused(reader, "SELECT count() FROM url('http://127.0.0.1:1/', CSV, 'a String')")
        assert "Code 60" in _refused(reader, "SELECT * FROM system.users")  # 18.16 has no system.users
        assert "DATABASE_ACCESS_DENIED" in _refused(reader, "SELECT count() FROM default.one")  # other databases
        assert "READONLY" in _refused(reader, "SELECT 1 AS x SETTINGS max_execution_time = 5")  # readonly = 1
        assert "READONLY" in _refused(reader, f"SELECT count() FROM remote('127.0.0.1', `{db}`, app_start)")
        assert "READONLY" in _refused(reader, "SELECT count() FROM file('x.csv', CSV, 'a String')")
        assert data.query("SELECT count() AS n FROM task_end") == before
        assert data.query(f"SELECT count() AS n FROM system.tables WHERE database = '{db}' AND name = 'app_start'")
    finally:
        reader.close()
        path.unlink()


def test_18_16_ignores_users_xml_row_filters(clickhouse_server: ClickHouseServer, data: Storage) -> None:
    """What 18.16 allows: a users.xml ``<databases><db><table><filter>`` (the row filter of later versions) is
    accepted and ignored: the user sees every cluster. Hence the team databases below."""
    if clickhouse_server.version[:2] != (18, 16):
        pytest.skip(f"a finding about 18.16; this server is {clickhouse_server.version}")
    db = data.database
    password = SecretStr(secrets.token_urlsafe(16))
    text = users_xml(db, [Reader("sparktap_filtered", password)]).replace(
        "</allow_databases>",
        f"</allow_databases><databases><{db}><app_start><filter>cluster IN ('prod-eu')</filter></app_start>"
        f"</{db}></databases>",
    )
    path = _users_d(clickhouse_server, "sparktap-filtered.xml", text)
    reader = _login(clickhouse_server, db, "sparktap_filtered", password)
    try:
        clusters = reader.query("SELECT DISTINCT cluster FROM app_start ORDER BY cluster")
        assert [r["cluster"] for r in clusters] == ["prod-eu", "prod-us"]  # the filter had no effect
    finally:
        reader.close()
        path.unlink()


def test_the_schema_step_says_what_to_do_on_18_16(data: Storage, caplog: pytest.LogCaptureFixture) -> None:
    if data.version()[:2] >= (20, 4):
        pytest.skip("this server has SQL access control")
    schema = schema_for(data.version(), data.database)
    with caplog.at_level(logging.WARNING, logger="sparktap.store.access"):
        assert ensure_readers(data, schema, [Reader("sparktap_grafana", SecretStr(secrets.token_urlsafe(16)))]) is False
    assert [r.getMessage() for r in caplog.records] == [
        f"clickhouse-server {'.'.join(map(str, data.version()))} has no SQL user management: the read-only users were "
        "not created; install the users.d file of `python -m sparktap.store` on the server "
        "(docs/dashboards.md)"
    ]


def test_the_reader_sql_parses_on_a_current_clickhouse(chdb_storage: Storage) -> None:
    """chDB (ClickHouse 26.x) parses every statement of the >= 20.4 path (its embedded user may not run them:
    access management is off there), with and without ON CLUSTER; a malformed one is refused the same way."""
    readers = [Reader("sparktap_grafana", SecretStr("a")), Reader("team_a", SecretStr("b"), ("prod-eu", "prod-us"))]
    schema = schema_for(chdb_storage.version(), "sparktap", cluster="c")
    statements = reader_statements("sparktap", readers, policy_tables(schema), schema.on_cluster)
    statements += reader_statements("sparktap", readers, ["app_start"])
    kinds = [chdb_storage.query(f"EXPLAIN AST {sql}")[0]["explain"].split(" (")[0] for sql in statements]
    assert len(kinds) == len(statements) and all(kinds), kinds
    assert {"CreateRoleQuery", "GrantQuery", "CreateSettingsProfileQuery", "CreateUserQuery"} <= set(kinds)
    assert sum(k.startswith("CREATE ROW POLICY") for k in kinds) == 2 * len(policy_tables(schema)) + 2
    with pytest.raises(StorageError, match="Syntax error"):
        chdb_storage.query("EXPLAIN AST CREATE ROW POLICY p ON sparktap.app_start USING TO team_a")


def test_team_readers_see_only_their_clusters_on_18_16(clickhouse_server: ClickHouseServer, data: Storage) -> None:
    """Team isolation where there is no row policy: each team reader reads only ``<db>_<team>``, which the schema
    step fills through materialized views (rows stored before: copied once; rows inserted after: by the views)."""
    if data.version()[:2] >= (20, 4):
        pytest.skip("this server has row policies: the team databases are for servers without them")
    db = data.database
    teams = [
        Reader("team_a", SecretStr(secrets.token_urlsafe(16)), ("prod-eu",)),
        Reader("team_b", SecretStr(secrets.token_urlsafe(16)), ("prod-us",)),
    ]
    schema = schema_for(data.version(), db)
    path = _users_d(clickhouse_server, "sparktap-teams.xml", users_xml(db, teams))
    readers: list[ServerStorage] = []
    try:
        assert ensure_readers(data, schema, teams) is False  # users come from users.d here
        assert ensure_readers(data, schema, teams) is False  # idempotent: nothing copied twice
        load(data, [sample_app.App("app-eu-late").start(), sample_app.App("app-us-late", cluster="prod-us").start()])
        for team, own, other in ((teams[0], "prod-eu", "prod-us"), (teams[1], "prod-us", "prod-eu")):
            reader = _login(clickhouse_server, f"{db}_{team.name}", team.name, team.password)
            readers.append(reader)
            for table in schema.tables:
                expected = data.query(f"SELECT count() AS n FROM `{table}` WHERE cluster = '{own}'")  # noqa: S608
                assert reader.query(f"SELECT count() AS n FROM `{table}`") == expected, (team.name, table)  # noqa: S608
                assert reader.query(f"SELECT count() AS n FROM `{table}_dedup` WHERE cluster = '{other}'") == [{"n": 0}]
            apps = {r["app_id"] for r in reader.query("SELECT app_id FROM app_start_dedup")}
            expected_apps = {
                r["app_id"] for r in data.query(f"SELECT app_id FROM app_start_dedup WHERE cluster = '{own}'")
            }  # noqa: S608
            assert apps == expected_apps and apps
            assert "DATABASE_ACCESS_DENIED" in _refused(reader, f"SELECT count() FROM `{db}`.app_start")
            other_team = teams[1] if team is teams[0] else teams[0]
            assert "DATABASE_ACCESS_DENIED" in _refused(
                reader, f"SELECT count() FROM `{db}_{other_team.name}`.app_start"
            )
        team_a = readers[0]
        findings = Detector(team_a.query, database=f"{db}_team_a", version=data.version()).findings(*WINDOW)
        assert sorted({f.app_id for f in findings}) == ["app-skewed-join"]
        assert {r["app_id"] for r in team_a.query("SELECT app_id FROM app_start_dedup")} == {
            "app-skewed-join",
            "app-balanced",
            "app-eu-late",
        }
    finally:
        for reader in readers:
            reader.close()
        path.unlink()
        for team in teams:
            drop_database(clickhouse_server, f"{db}_{team.name}", timeout=120)

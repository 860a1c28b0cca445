"""The read-only users' SQL (ClickHouse >= 20.4) and users.xml (18.16): exact text, no password anywhere."""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET

import pytest
from pydantic import SecretStr

from sparktap.errors import ConfigError
from sparktap.store.access import Reader, has_sql_access_control, reader_statements, users_xml

PASSWORD = "Canary-Reader-Pw-41"  # noqa: S105 - a canary, not a credential
SHA = hashlib.sha256(PASSWORD.encode()).hexdigest()


def test_reader_statements_grant_select_only_and_filter_team_rows() -> None:
    readers = [Reader("sparktap_grafana", SecretStr(PASSWORD)), Reader("team_a", SecretStr(PASSWORD), ("prod-eu",))]
    statements = reader_statements("sparktap", readers, ["app_start", "task_end"])
    assert statements == [
        "CREATE ROLE IF NOT EXISTS `sparktap_reader`",
        "GRANT SELECT ON `sparktap`.* TO `sparktap_reader`",
        "CREATE SETTINGS PROFILE IF NOT EXISTS `sparktap_readonly` SETTINGS readonly = 2",
        f"CREATE USER IF NOT EXISTS `sparktap_grafana` IDENTIFIED WITH sha256_hash BY '{SHA}'",
        f"ALTER USER `sparktap_grafana` IDENTIFIED WITH sha256_hash BY '{SHA}' SETTINGS PROFILE `sparktap_readonly`",
        "GRANT `sparktap_reader` TO `sparktap_grafana`",
        "ALTER USER `sparktap_grafana` DEFAULT ROLE `sparktap_reader`",
        f"CREATE USER IF NOT EXISTS `team_a` IDENTIFIED WITH sha256_hash BY '{SHA}'",
        f"ALTER USER `team_a` IDENTIFIED WITH sha256_hash BY '{SHA}' SETTINGS PROFILE `sparktap_readonly`",
        "GRANT `sparktap_reader` TO `team_a`",
        "ALTER USER `team_a` DEFAULT ROLE `sparktap_reader`",
        "CREATE ROW POLICY OR REPLACE `sparktap_everyone` ON `sparktap`.`app_start` FOR SELECT USING 1 "
        "TO ALL EXCEPT `team_a`",
        "CREATE ROW POLICY OR REPLACE `sparktap_team_a` ON `sparktap`.`app_start` FOR SELECT USING "
        "cluster IN ('prod-eu') TO `team_a`",
        "CREATE ROW POLICY OR REPLACE `sparktap_everyone` ON `sparktap`.`task_end` FOR SELECT USING 1 "
        "TO ALL EXCEPT `team_a`",
        "CREATE ROW POLICY OR REPLACE `sparktap_team_a` ON `sparktap`.`task_end` FOR SELECT USING "
        "cluster IN ('prod-eu') TO `team_a`",
    ]
    assert all(PASSWORD not in s for s in statements)
    on_cluster = reader_statements("sparktap", readers[:1], [], on_cluster=" ON CLUSTER `c`")
    assert on_cluster[0] == "CREATE ROLE IF NOT EXISTS `sparktap_reader` ON CLUSTER `c`"


def test_users_xml_is_readonly_one_database_and_hash_only() -> None:
    text = users_xml("sparktap", [Reader("sparktap_grafana", SecretStr(PASSWORD))])
    assert PASSWORD not in text
    root = ET.fromstring(text)  # noqa: S314 - our own text
    user = root.find("users/sparktap_grafana")
    assert user is not None
    assert user.findtext("password_sha256_hex") == SHA
    assert user.findtext("profile") == "sparktap_readonly"
    assert [d.text for d in user.findall("allow_databases/database")] == ["sparktap"]
    assert root.findtext("profiles/sparktap_readonly/readonly") == "1"
    assert root.findtext("profiles/sparktap_readonly/max_execution_time") == "60"
    team = ET.fromstring(users_xml("sparktap", [Reader("team_a", SecretStr(PASSWORD), ("prod-eu",))]))  # noqa: S314
    assert [d.text for d in team.findall("users/team_a/allow_databases/database")] == ["sparktap_team_a"]


@pytest.mark.parametrize(
    ("name", "password", "clusters", "message"),
    [
        ("bad-name", PASSWORD, (), 'invalid reader user="bad-name"'),
        ("<x>", PASSWORD, (), "invalid reader user="),
        ("ok", "", (), 'reader user="ok" has no password'),
        ("ok", PASSWORD, ("prod'eu",), "1 cluster name"),
    ],
)
def test_readers_are_checked(name: str, password: str, clusters: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        Reader(name, SecretStr(password), clusters)
    assert PASSWORD not in str(info.value)


def test_sql_access_control_from_20_4() -> None:
    assert [has_sql_access_control(v) for v in [(18, 16, 1), (20, 3), (20, 4), (26, 9)]] == [False, False, True, True]


def test_settings_give_the_readers() -> None:
    from sparktap.settings import load_settings

    settings = load_settings(
        clickhouse={
            "readonly_user": "sparktap_grafana",
            "readonly_password": PASSWORD,
            "teams": {"team_a": ["prod-eu", "prod-us"]},
            "team_passwords": {"team_a": PASSWORD},
        }
    )
    readers = settings.clickhouse.readers()
    assert [(r.name, r.clusters, r.sha256_hex) for r in readers] == [
        ("sparktap_grafana", (), SHA),
        ("team_a", ("prod-eu", "prod-us"), SHA),
    ]
    assert load_settings().clickhouse.readers() == []
    with pytest.raises(ConfigError, match='reader user="team_b" has no password') as info:
        load_settings(clickhouse={"teams": {"team_b": ["prod-eu"]}})
    assert PASSWORD not in str(info.value)

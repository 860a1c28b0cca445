"""Hostile table names and locations (issue 42, the canary suite extended) on chDB and clickhouse-server 18.16.

``table_access`` events whose table names and locations carry SQL, Grafana macros and variables, markup, control
characters and credentials go through the collector's decode path (``collector/decode.py``: caps, control characters,
redaction) into the store, beside a legitimate table of another team on another cluster. Then:

- SQL: the Tables dashboard's panels and variable, with ``$table`` set to each canary (a crafted URL can set any
  value) and ``$cluster`` holding canaries too, run as written: nothing injected executes, no table is dropped or
  made, and only the selected cluster's rows come back (never the other team's);
- detection: the table rules name the hostile tables as data, and the findings keep no credential or control
  character; chat: Slack and Teams payloads show the names as literal text (no markup, mention or link);
- report: the Tables section shows them HTML-escaped.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest

from sparktap.collector.decode import Decoder
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import panel_queries, tables
from sparktap.detection import Detector, Finding
from sparktap.detection.macros import expand, interpolate
from sparktap.detection.notify import Notification, slack_payload, teams_payload
from sparktap.report.collect import collect
from sparktap.report.render import render
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.support import table_samples
from tests.support.decode import decoded_rows, encode
from tests.support.detection import WINDOW
from tests.support.identifier_canaries import CANARIES, INJECTION, injected_marker
from tests.support.sample_app import BASE_TIME_MS, App

pytestmark = pytest.mark.integration

MiB = table_samples.MiB
SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"  # noqa: S105 - a canary, no credential
"""a credential in a location's user info and query string: the collector's redaction removes both"""
MARKUP = "<script>alert('t')</script><img src=x onerror=alert(1)>"
TABLE_CANARIES = {
    "sql": "sales.orders'; DROP TABLE table_rollup --",
    "union": INJECTION,
    "macro": "$__timeFilter(event_time) OR 1",
    "variable": "${cluster}",
    "markup": f"sales.{MARKUP}",
    "chat": "sales.<!channel> <https://evil.example|click> @here *bold*",
    "control": "sales.evil\x1b[31m\x07\u2028name",
    "braces-comma": "{sales,orders}",
    "backslash": "sales\\",
}
LOCATIONS = (
    f"s3a://AKIAIOSFODNN7EXAMPLE:{SECRET}@lake/sales/x",
    f"abfss://lake@acct.dfs.core.windows.net/x?sig={SECRET}&password={SECRET}",
    f"hdfs://nn/warehouse/{MARKUP}",
)
TEAM_B_TABLE = "payroll.salaries"


def _apps() -> list[App]:
    """Each canary table written 20 times by a recurring job of team A on prod-eu (1,000 files of 1 MiB: a growth
    finding each), and team B's table on prod-us."""
    apps = []
    for i, (key, name) in enumerate(TABLE_CANARIES.items()):
        table = table_samples.Table(name, "delta", LOCATIONS[i % len(LOCATIONS)])
        apps += table_samples.nightly(table, 20, 1_000, MiB, name=f"job-{key}", team="team-a", prefix=f"app-{key}")
    team_b = table_samples.Table(TEAM_B_TABLE, "delta", "s3a://payroll/salaries")
    apps += table_samples.nightly(
        team_b, 20, 1_000, MiB, name="payroll", cluster="prod-us", team="team-b", prefix="app-b"
    )
    return apps


def _store_through_the_collector(storage: Storage) -> None:
    storage.ensure_schema()
    decoder = Decoder(storage.schema())
    messages = [encode(e.model_dump(mode="json")) for app in _apps() for e in app.events]
    decoded = decoder.decode(messages)
    assert not decoded.rejects
    by_table: dict[str, list[dict[str, Any]]] = {}
    for _, (table, row) in sorted(decoded_rows(decoded).items()):
        by_table.setdefault(table, []).append(row)
    for table, rows in by_table.items():
        storage.insert(table, rows)


@pytest.fixture(scope="module", params=["chdb", "server"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    if request.param == "chdb":
        target = StorageTarget(kind="chdb", path=tmp_path_factory.mktemp("hostile-tables") / "chdb", database="ht")
        storage = open_storage(target)
        try:
            _store_through_the_collector(storage)
            yield storage
        finally:
            storage.close()
        return
    server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
    database = random_database("hostile_tables")
    storage = open_storage(server.target(database))
    try:
        _store_through_the_collector(storage)
        yield storage
    finally:
        storage.close()
        drop_database(server, database, timeout=120)


def _cells(rows: list[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        for value in row.values():
            yield from (str(v) for v in value) if isinstance(value, list | tuple) else (str(value),)


def _objects(storage: Storage) -> list[str]:
    return [r["name"] for r in storage.query(f"SELECT name FROM system.tables WHERE database = '{storage.database}'")]


def test_stored_names_keep_no_credential_or_control_character(store: Storage) -> None:
    rows = store.query("SELECT DISTINCT `table`, location FROM table_rollup_dedup")
    text = "".join(_cells(rows))
    assert SECRET not in text
    assert not any(unicodedata.category(c) == "Cc" for c in text)
    assert len({r["table"] for r in rows}) == len(TABLE_CANARIES) + 1  # every hostile name stored, as data


def test_the_tables_dashboard_runs_every_canary_as_data_and_shows_one_team_its_rows(store: Storage) -> None:
    marker = injected_marker(store.query("SELECT version() AS v")[0]["v"])
    board = tables(GrafanaConfig(database=store.database, clickhouse_version=store.version()))
    queries = list(panel_queries(board))
    objects = _objects(store)
    stored = {str(r["table"]) for r in store.query("SELECT DISTINCT `table` FROM table_rollup_dedup")}
    hostile_clusters = [*CANARIES.values(), INJECTION]
    (variable,) = [sql for title, sql in queries if title == "variable $table"]
    offered = {
        str(r["table_name"])
        for r in store.query(expand(interpolate(variable, {"cluster": ["prod-eu"]}), *WINDOW, interval_ms=60_000))
    }
    assert offered == stored - {TEAM_B_TABLE}  # team A's cluster: never team B's table
    for value in [*stored, *TABLE_CANARIES.values(), TEAM_B_TABLE]:
        variables: dict[str, str | list[str]] = {"cluster": ["prod-eu", *hostile_clusters], "table": value}
        for title, sql in queries:
            rows = store.query(expand(interpolate(sql, variables), *WINDOW, interval_ms=60_000))
            cells = set(_cells(rows))
            assert marker not in cells, (title, value)
            if title == "variable $cluster":  # the clusters to choose from: both legitimate ones, never a canary
                assert [r["cluster"] for r in rows] == ["prod-eu", "prod-us"]
                continue
            assert TEAM_B_TABLE not in cells, (title, value)
            assert all(row.get("cluster", "prod-eu") == "prod-eu" for row in rows), (title, value)
            if title == "Writers of $table":  # the selected table's own writers in the range: its job's last run
                expected = [] if value not in stored or value == TEAM_B_TABLE else [1]
                assert [int(r["runs"]) for r in rows] == expected, value
    assert _objects(store) == objects


def _growth(store: Storage) -> list[Finding]:
    detector = Detector(
        store.query,  # type: ignore[arg-type]
        database=store.database,
        version=store.version(),
        rules=("table_file_growth",),
    )
    return detector.findings(*WINDOW)


def test_findings_and_chat_show_the_names_as_literal_text(store: Storage) -> None:
    findings = _growth(store)
    stored = {str(r["table"]) for r in store.query("SELECT DISTINCT `table` FROM table_rollup_dedup")}
    assert {f.stage_name for f in findings} == stored
    by_team = {f.stage_name: f.team for f in findings}
    assert by_team[TEAM_B_TABLE] == "team-b" and {t for n, t in by_team.items() if n != TEAM_B_TABLE} == {"team-a"}
    for f in findings:
        text = f.explanation + f.suggested_fix + f.stage_name
        assert SECRET not in text and not any(unicodedata.category(c) == "Cc" for c in text), f.stage_name
        assert f.explanation.startswith(f.stage_name + " (delta")  # the name as stored, as data
        slack = slack_payload(Notification("firing", "new", f))
        mrkdwn = [t for t in _texts(slack, "mrkdwn")]
        assert mrkdwn and not any("<" in t or ">" in t for t in mrkdwn), mrkdwn  # no markup, mention or link
        assert not any("@here" in t for t in _texts(slack)), f.stage_name  # a zero-width space breaks a mention
        # Adaptive Card markdown: every special character of the text escaped ("**Fix:**" is the card's own)
        teams = [t.removeprefix("**Fix:** ") for t in _texts(teams_payload(Notification("firing", "new", f)))]
        bad = [t for t in teams if re.search(r"(?<!\\)[<>*\[]", t.replace("\\\\", ""))]
        assert teams and not bad, bad
        assert SECRET not in json.dumps(slack) + json.dumps(teams)
    (markup,) = [f for f in findings if f.stage_name == TABLE_CANARIES["markup"]]
    assert any("sales.&lt;script&gt;" in t for t in _texts(slack_payload(Notification("firing", "new", markup))))


def _texts(payload: Any, kind: str | None = None) -> list[str]:
    """Every ``text`` (and fact ``value``) string of a chat payload; ``kind``: only of objects of that type."""
    out: list[str] = []
    if isinstance(payload, dict):
        for key, value in payload.items():
            if key in ("text", "value") and isinstance(value, str) and (kind is None or payload.get("type") == kind):
                out.append(value)
            else:
                out += _texts(value, kind)
    elif isinstance(payload, list):
        for item in payload:
            out += _texts(item, kind)
    return out


def test_the_report_escapes_table_names_and_locations(store: Storage) -> None:
    report = collect(store.query, "app-markup-19", database=store.database, version=store.version())
    assert [(u.role, u.name, u.files, u.trend_files, u.trend_days) for u in report.tables] == [
        ("write", TABLE_CANARIES["markup"], 1_000, 20_000, 20)
    ]
    page = render(report)
    assert '<section id="tables">' in page
    assert MARKUP not in page and "onerror=alert(1)>" not in page
    assert "sales.&lt;script&gt;alert(&#x27;t&#x27;)&lt;/script&gt;" in page
    assert SECRET not in page
    assert BASE_TIME_MS  # the samples' day

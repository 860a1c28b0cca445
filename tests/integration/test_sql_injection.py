"""Identifiers are data, never SQL: every dashboard panel, template-variable and alert-rule query, rendered as
Grafana renders it (``detection.macros``: the plugin's variable formats and macros), over legacy rows whose
identifiers are canaries (inserted bypassing the collector's check), on chDB and on clickhouse-server 18.16:

- the variable queries offer only legitimate identifiers;
- with the legitimate values and every canary in the variables (a crafted dashboard URL can set any value), every
  query runs as written: nothing injected executes (``INJECTION`` would return ``injected_marker``), no table is
  dropped or created, and panels show only legitimate rows (alert rules, unscoped, show stored values as data);
- the format the dashboards used before (``singlequote``) did execute ``INJECTION``: the canary is live.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sparktap.dashboards.alerts import alert_query
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import all_dashboards, app_variable, cluster_variable, panel_queries
from sparktap.detection import RULE_IDS
from sparktap.detection.macros import expand, interpolate
from sparktap.detection.sql import in_variable
from sparktap.schemas.rows import RowBuilder
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.support import detection_samples as samples
from tests.support import plan_samples, sample_app
from tests.support.detection import WINDOW, load
from tests.support.identifier_canaries import CANARIES, INJECTION, injected_marker

pytestmark = pytest.mark.integration

LEGIT_CLUSTERS = {"prod-eu", "prod-us"}
HOSTILE = [*CANARIES.values(), INJECTION]


def _legacy(app: sample_app.App, **identifiers: str) -> list[dict[str, Any]]:
    """The events of ``app`` with ``identifiers`` (and every free-text field) replaced: rows an older collector
    stored, inserted below bypassing the collector's checks."""
    text = identifiers.get("app_id", identifiers.get("cluster", ""))
    events = []
    for e in app.events:
        event: dict[str, Any] = {**e.model_dump(mode="json"), **identifiers, "app_name": text}
        for key in ("name", "description", "details"):
            if isinstance(event.get(key), str):
                event[key] = text
        events.append(event)
    return events


def _fill(storage: Storage) -> None:
    storage.ensure_schema()
    load(storage, [samples.skewed_join(), samples.balanced(), plan_samples.plans(), plan_samples.stream_behind()])
    legacy = _legacy(samples.skewed_join("app-us-1"), cluster="prod-us")
    for i, value in enumerate(HOSTILE):
        legacy += _legacy(samples.skewed_join(f"app-legacy-{i}"), cluster=value, app_id=value)
        legacy += _legacy(samples.balanced(f"app-legacy-eu-{i}"), cluster="prod-eu", app_id=value)
    for table, rows in RowBuilder(storage.version()).group(legacy).items():  # one insert (one part) per table
        storage.insert(table, rows)


@pytest.fixture(scope="module", params=["chdb", "server"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    if request.param == "chdb":
        target = StorageTarget(kind="chdb", path=tmp_path_factory.mktemp("inject") / "chdb", database="inject")
        storage = open_storage(target)
        try:
            _fill(storage)
            yield storage
        finally:
            storage.close()
        return
    server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
    database = random_database("inject")
    storage = open_storage(server.target(database))
    try:
        _fill(storage)
        yield storage
    finally:
        storage.close()
        drop_database(server, database, timeout=120)


def _run(storage: Storage, sql: str, variables: dict[str, str | list[str]]) -> list[dict[str, Any]]:
    return storage.query(expand(interpolate(sql, variables), *WINDOW, interval_ms=60_000))


def _cells(rows: list[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        for value in row.values():
            yield from (str(v) for v in value) if isinstance(value, list | tuple) else (str(value),)


def _tables(storage: Storage) -> list[str]:
    return [r["name"] for r in storage.query(f"SELECT name FROM system.tables WHERE database = '{storage.database}'")]


def _queries(storage: Storage) -> tuple[GrafanaConfig, list[tuple[str, str]]]:
    cfg = GrafanaConfig(database=storage.database, clickhouse_version=storage.version())
    panels = [(f"{b['uid']}:{title}", sql) for b in all_dashboards(cfg) for title, sql in panel_queries(b)]
    return cfg, panels + [(f"alert:{rule}", alert_query(rule, cfg)) for rule in RULE_IDS]


def test_variables_offer_only_identifiers_and_queries_never_execute_canaries(store: Storage) -> None:
    marker = injected_marker(store.query("SELECT version() AS v")[0]["v"])
    cfg, queries = _queries(store)
    tables = _tables(store)
    clusters = [r["cluster"] for r in _run(store, cluster_variable(cfg)["query"], {})]
    assert clusters == sorted(LEGIT_CLUSTERS)
    app_sql = app_variable(cfg)["query"]
    apps = {r["app_id"] for r in _run(store, app_sql, {"cluster": "prod-eu"})}
    assert apps == {"app-skewed-join", "app-balanced", "app-plans", "app-stream-behind"}
    assert {r["app_id"] for r in _run(store, app_sql, {"cluster": clusters})} == {*apps, "app-us-1"}
    assert _run(store, app_sql, {"cluster": INJECTION}) == []  # one value (a string): no braces, same decoding
    legit_apps = {*apps, "app-us-1"}
    # every query once, the variables holding the legitimate clusters and every canary (a crafted URL can set
    # any value): only legitimate rows come back, and nothing injected runs
    variables: dict[str, str | list[str]] = {
        "cluster": [*clusters, *HOSTILE],
        "app": "app-skewed-join",
        "user": ["bob", "(none)", *HOSTILE],  # the Spark Connect view's (issue 26)
        "team": ["payments", "(none)", *HOSTILE],
        "table": INJECTION,  # the Tables dashboard's (every table canary: test_tables_hostile.py)
    }
    hostile = set(HOSTILE)
    for title, sql in queries:
        rows = _run(store, sql, variables)
        assert marker not in set(_cells(rows)), title
        for row in rows:
            if title.startswith("alert:"):  # unscoped: the stored data as it is, legacy rows included, as data
                assert row["cluster"] in LEGIT_CLUSTERS | hostile, (title, row)
                continue
            assert row.get("cluster", "prod-eu") in LEGIT_CLUSTERS, (title, row)
            assert row.get("app_id", "app-skewed-join") in legit_apps, (title, row)
    assert _tables(store) == tables


def test_the_old_singlequote_format_ran_the_injection(store: Storage) -> None:
    """The canary is live: the app variable as it was (``${cluster:singlequote}``) returns what INJECTION selects."""
    marker = injected_marker(store.query("SELECT version() AS v")[0]["v"])
    cfg = GrafanaConfig(database=store.database, clickhouse_version=store.version())
    sql = app_variable(cfg)["query"].replace(in_variable("cluster", "cluster"), "cluster IN (${cluster:singlequote})")
    assert "${cluster:singlequote}" in sql
    assert marker in set(_cells(_run(store, sql, {"cluster": [INJECTION]})))

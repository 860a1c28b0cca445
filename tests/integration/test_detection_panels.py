"""Every dashboard panel query, template-variable query and Grafana alert-rule query, with the plugin's macros
expanded as ``shared/contracts/clickhouse-datasource/macro-expansions.derived.json`` says and the template variables
substituted, runs on chDB (and, rendered for its version, on clickhouse-server 18.16) over the scenario data and
returns the columns its panel or rule uses."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparktap.dashboards.alerts import LABEL_COLUMNS, alert_query
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import all_dashboards, panel_queries, panels_of
from sparktap.detection import RULE_IDS, Detector, Finding
from sparktap.detection.finding_store import FindingsStore
from sparktap.detection.macros import expand, interpolate
from sparktap.detection.teams import UNMAPPED, TeamRule, owner
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.support import cost_samples, native_samples, sample_app, table_samples
from tests.support import detection_samples as samples
from tests.support.dashboard_columns import COLUMNS
from tests.support.detection import WINDOW, load

pytestmark = pytest.mark.integration

DATABASE = "panels"
CFG = GrafanaConfig(database=DATABASE)
VARIABLES = {
    "cluster": ["prod-eu"],
    "app": "app-skewed-join",
    "user": ["bob", "etl", "(none)"],  # the Spark Connect view's "All" (issue 26)
    "team": ["payments", "(none)"],
    "table": "sales.orders",  # the Tables dashboard's one table
}

TABLES = table_samples.nightly(table_samples.ORDERS, 20, 1_000, table_samples.MiB)
NATIVE = [native_samples.comet_fallback()]  # native_fallback's sample: every rule has one
"""a Delta table getting 1,000 files of 1 MiB a day from a recurring job: table_file_growth and the Tables panels"""


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Storage, list[Finding]]]:
    """The chDB store of the scenarios, and the findings of the detection pass stored in it."""
    target = StorageTarget(kind="chdb", path=Path(tmp_path_factory.mktemp("panels")) / "chdb", database=DATABASE)
    storage = open_storage(target)
    try:
        storage.ensure_schema()
        load(
            storage,
            [
                *samples.scenario_apps(),
                *cost_samples.rule_apps(sample_app.BASE_TIME_MS - 2 * 3_600_000),
                *TABLES,
                *NATIVE,
            ],
        )
        yield storage, _store_findings(storage)
    finally:
        storage.close()


@pytest.fixture(scope="module")
def store(scenarios: tuple[Storage, list[Finding]]) -> Storage:
    return scenarios[0]


def _store_findings(storage: Storage) -> list[Finding]:
    """What the alerter does after a pass (or ``sparktap findings --store``): the findings panels read them."""
    findings = Detector(storage.query, database=storage.database, version=storage.version()).findings(*WINDOW)
    FindingsStore(storage).write(findings, WINDOW[1], None, WINDOW[0])
    return findings


def run(storage: Storage, sql: str) -> tuple[list[str], list[dict[str, object]]]:
    """Result column names (from the first row, else DESCRIBE of the query) and rows."""
    final = expand(interpolate(sql, VARIABLES), *WINDOW, interval_ms=60_000)
    rows = storage.query(final)
    if rows:
        return list(rows[0]), rows
    described = storage.query(f"DESCRIBE TABLE ({final})")
    return [str(r["name"]) for r in described], rows


QUERIES = [(b["uid"], title, sql) for b in all_dashboards(CFG) for title, sql in panel_queries(b)]


@pytest.mark.parametrize(("uid", "title", "sql"), QUERIES, ids=[f"{u}:{t}" for u, t, _ in QUERIES])
def test_panel_query_runs_and_returns_its_columns(store: Storage, uid: str, title: str, sql: str) -> None:
    columns, _ = run(store, sql)
    assert set(COLUMNS.get(sql.strip(), ())) <= set(columns), (title, columns)
    if "$__interval_s" in sql:  # a time series: the bucket first
        assert columns[0] == "time"


def test_panels_show_the_findings(scenarios: tuple[Storage, list[Finding]]) -> None:
    store, expected = scenarios  # the stored pass's findings: what the panels read
    boards = {b["uid"]: b for b in all_dashboards(CFG)}
    panels = {
        (uid, p["title"]): p["targets"][0]["rawSql"]
        for uid, b in boards.items()
        for p in panels_of(b)
        if p.get("targets")
    }
    _, rows = run(store, panels[("sparktap-overview", "Open findings")])
    assert len(rows) == len(expected)
    # the most time lost first (issue 22), as Detector.findings: app-remote's 540 s of fetch wait, a warning
    assert (rows[0]["rule"], rows[0]["severity"]) == (expected[0].rule, expected[0].severity)
    assert (expected[0].app_id, expected[0].rule) == ("app-remote", "remote_heavy_shuffle")
    counts = {
        s: run(store, panels[("sparktap-overview", f"{s.capitalize()} findings")])[1][0]["findings"]
        for s in ("critical", "warning", "info")
    }
    assert counts == {s: sum(1 for f in expected if f.severity == s) for s in counts}
    _, app_rows = run(store, panels[("sparktap-application", "Findings")])
    assert sorted(r["rule"] for r in app_rows) == ["data_skew", "skew_not_fixed", "task_time_skew"]
    _, timeline = run(store, panels[("sparktap-application", "Stage timeline")])
    assert [(r["stage_id"], r["name"], r["state"]) for r in timeline] == [(1, "join at skew.py:20", "succeeded")]
    _, skew = run(store, panels[("sparktap-application", "Skew per stage")])
    assert skew[0]["bytes_max_over_median"] == 102.4 and skew[0]["duration_max_over_median"] == 20


def warnings_by_rule(detector: Detector) -> Counter[str]:
    """The findings of warning and above of one detection pass over the scenarios, counted by rule (no rule's
    findings depend on another's: one pass gives each rule what a pass of that rule alone gives)."""
    return Counter(f.rule for f in detector.findings(*WINDOW))


@pytest.fixture(scope="module")
def warnings(store: Storage) -> Counter[str]:
    return warnings_by_rule(Detector(store.query, database=DATABASE, min_severity="warning"))


def test_the_native_engine_panel_splits_each_query_by_engine(store: Storage) -> None:
    """The application dashboard's native-engine panel over the Comet sample: its one SQL execution, with four
    operators on Comet, one on the JVM (the Python UDF) and the two transitions around it."""
    (board,) = [b for b in all_dashboards(CFG) if b["uid"] == "sparktap-application"]
    (sql,) = [q for title, q in panel_queries(board) if title == "Native engine per query"]
    final = expand(interpolate(sql, {**VARIABLES, "app": "app-comet"}), *WINDOW, interval_ms=60_000)
    rows = [{k: r[k] for k in ("execution_id", "engine", "native_operators", "jvm_operators", "transitions")}
            for r in store.query(final)]  # fmt: skip
    assert rows == [{"execution_id": 5, "engine": "comet", "native_operators": 4, "jvm_operators": 1, "transitions": 2}]


@pytest.mark.parametrize("rule", RULE_IDS)
def test_alert_rule_query_returns_labels_and_one_value(store: Storage, warnings: Counter[str], rule: str) -> None:
    columns, rows = run(store, alert_query(rule, CFG))
    assert columns == [*LABEL_COLUMNS, "value"]
    assert rows, f"the scenarios give {rule} at least one warning finding"
    assert len(rows) == warnings[rule]
    for row in rows:
        assert all(isinstance(row[c], str) for c in LABEL_COLUMNS), row  # string columns become alert labels
        assert isinstance(row["value"], int | float) and row["value"] > 0  # the threshold step fires on > 0
        assert row["rule"] == rule and row["severity"] in ("warning", "critical")
    assert len({tuple(r[c] for c in LABEL_COLUMNS) for r in rows}) == len(rows)  # one alert instance per finding


@pytest.fixture(scope="module")
def server_store(clickhouse_server: ClickHouseServer) -> Iterator[Storage]:
    database = random_database("panels")
    storage = open_storage(clickhouse_server.target(database))
    try:
        storage.ensure_schema()
        load(
            storage,
            [
                *samples.scenario_apps(),
                *cost_samples.rule_apps(sample_app.BASE_TIME_MS - 2 * 3_600_000),
                *TABLES,
                *NATIVE,
            ],
        )
        _store_findings(storage)
        yield storage
    finally:
        storage.close()
        drop_database(clickhouse_server, database)


def test_every_panel_and_alert_query_runs_on_clickhouse_server(store: Storage, server_store: Storage) -> None:
    """The same dashboards rendered for the server's version (18.16 here) run there and return the columns their
    panels read; each alert rule's query, with the team mapping, returns one row per finding the detection pass
    returns there, labelled as on chDB (where ``test_the_alert_rules_team_label_is_the_mapped_owner`` checks each
    label against the mapping; an 18.16 alert query takes seconds, so each runs once here)."""
    reads = {(uid, title): set(COLUMNS.get(sql.strip(), ())) for uid, title, sql in QUERIES}
    cfg = GrafanaConfig(database=server_store.database, clickhouse_version=server_store.version())
    ran = 0
    for board in all_dashboards(cfg):
        for title, sql in panel_queries(board):
            columns, _ = run(server_store, sql)
            assert reads[(board["uid"], title)] <= set(columns), (board["uid"], title, columns)
            ran += 1
    assert ran == len(QUERIES)
    warnings = warnings_by_rule(
        Detector(
            server_store.query, database=server_store.database, version=server_store.version(), min_severity="warning"
        )  # fmt: skip
    )
    on_chdb = dataclasses.replace(CFG, clickhouse_version=store.version(), teams=TEAMS)
    for rule in RULE_IDS:
        columns, rows = run(server_store, alert_query(rule, dataclasses.replace(cfg, teams=TEAMS)))
        assert columns == [*LABEL_COLUMNS, "value"], rule
        assert len(rows) == warnings[rule] > 0, rule
        assert labels_of(rows) == labels_of(run(store, alert_query(rule, on_chdb))[1]), rule


def labels_of(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return sorted(tuple(r[c] for c in LABEL_COLUMNS) for r in rows)


TEAMS = (
    TeamRule(app_name=("tiny-*", "gc-heavy"), team="platform"),  # owns these applications
    TeamRule(cluster=("prod-*",), trust_tag=("payments",)),  # there only the payments tag (skewed-join's) may own
)


def mapped_owners(storage: Storage, rule: str, tagged: list[dict[str, object]], mapped: GrafanaConfig) -> list[str]:
    """Run ``rule``'s alert query with the team mapping; assert it gives the alert instances of ``tagged`` (the
    query without the mapping), each with the owner the mapping gives; return those team labels."""
    _, owned = run(storage, alert_query(rule, mapped))
    key = [c for c in LABEL_COLUMNS if c != "team"]
    tags = {tuple(r[c] for c in key): str(r["team"]) for r in tagged}
    assert sorted(tags) == sorted(tuple(r[c] for c in key) for r in owned), rule
    labels = []
    for row in owned:
        tag = tags[tuple(row[c] for c in key)]
        expected = owner(TEAMS, str(row["cluster"]), str(row["user"]), str(row["app_name"]), tag)[0] or UNMAPPED
        assert row["team"] == expected, (rule, row["app_name"], tag)
        labels.append(str(row["team"]))
    return labels


def test_the_alert_rules_team_label_is_the_mapped_owner(store: Storage) -> None:
    """With the routing file's team mapping (``teams:``) the alert rules' ``team`` label, which the exported policies
    match, is the owner the mapping gives (``detection/teams.py``, the alerter's), not the application's own tag.
    On clickhouse-server 18.16, ``test_every_panel_and_alert_query_runs_on_clickhouse_server`` finds the same labels
    as here."""
    plain = GrafanaConfig(database=store.database, clickhouse_version=store.version())
    mapped = dataclasses.replace(plain, teams=TEAMS)
    labels: list[str] = []
    for rule in RULE_IDS:
        _, tagged = run(store, alert_query(rule, plain))
        labels += mapped_owners(store, rule, tagged, mapped)
    assert {"platform", "payments", UNMAPPED} <= set(labels)

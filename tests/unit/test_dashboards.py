"""Grafana artefacts as code: dashboard JSON schema, panels, alert provisioning format, contact points, policy,
HTTP API bodies against the spec, export and its CLI (no server, no database)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from sparktap.cli import cli
from sparktap.dashboards.alerts import LABEL_COLUMNS, provisioned_group, provisioned_rule, rule_uid
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.contact_points import embedded_contact_points, merge_route, sparktap_route
from sparktap.dashboards.dashboards import all_dashboards, panel_queries, panels_of
from sparktap.dashboards.datasource import ClickHouseEndpoint, datasource_body
from sparktap.dashboards.export import alerting_file, export, files
from sparktap.dashboards.health_panels import MAX_POINTS, grafana_interval
from sparktap.detection import RULE_IDS
from sparktap.detection.sql import in_variable
from tests.fixtures.grafana import load_spec

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT.parent / "shared" / "contracts"
DASHBOARD_SCHEMA = json.loads((CONTRACTS / "grafana/foundation-sdk-jsonschema/dashboard.jsonschema.json").read_text())
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
BOARDS = all_dashboards()
GO_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w))+$")


# ----------------------------------------------------------------------------------------------- dashboards


@pytest.mark.parametrize("board", BOARDS, ids=[b["uid"] for b in BOARDS])
def test_dashboard_validates_against_the_schema(board: dict[str, Any]) -> None:
    errors = [
        f"{list(e.absolute_path)}: {e.message[:200]}"
        for e in jsonschema.Draft7Validator(DASHBOARD_SCHEMA).iter_errors(board)
    ]
    assert errors == []


@pytest.mark.parametrize("board", BOARDS, ids=[b["uid"] for b in BOARDS])
def test_every_panel_has_title_description_unit_and_the_clickhouse_datasource(board: dict[str, Any]) -> None:
    panels = [p for p in panels_of(board) if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel["title"] and panel["description"], panel
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["datasource"] == {"type": "grafana-clickhouse-datasource", "uid": "sparktap-clickhouse"}
        (target,) = panel["targets"]
        assert target["editorType"] == "sql" and target["format"] in (0, 1) and target["rawSql"]
        assert (
            "$__timeFilter" in target["rawSql"]
            or "$__fromTime" in target["rawSql"]
            or "$__toTime" in target["rawSql"]
            or "app_start_dedup" in target["rawSql"]
        ), panel["title"]
    ids = [p["id"] for p in panels_of(board)]
    assert len(ids) == len(set(ids))
    titles = [p["title"] for p in panels]
    assert len(titles) == len(set(titles)), "panel titles are unique within a dashboard"
    for panel in panels_of(board):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24


def test_template_variables() -> None:
    by_uid = {b["uid"]: b for b in BOARDS}
    names = {uid: [v["name"] for v in b["templating"]["list"]] for uid, b in by_uid.items()}
    assert names == {
        "sparktap-overview": ["cluster"],
        "sparktap-application": ["cluster", "app"],
        "sparktap-cluster": ["cluster"],
        "sparktap-streaming": ["cluster"],
        "sparktap-connect": ["cluster", "user", "team"],
        "sparktap-fleet": ["cluster"],
        "sparktap-tables": ["cluster", "table"],
    }
    for board in BOARDS:
        for title, sql in panel_queries(board):
            if title.startswith("variable $cluster"):
                continue
            assert in_variable("cluster", "cluster") in sql, title
            if board["uid"] == "sparktap-application" and not title.startswith("variable"):
                assert in_variable("app_id", "app") in sql, title


def test_the_dashboards_show_what_the_issue_asks_for() -> None:
    titles = {b["uid"]: {p["title"] for p in panels_of(b)} for b in BOARDS}
    assert {
        "Critical findings",
        "Warning findings",
        "Info findings",
        "Open findings",
        "Applications",
        "Listener and relay losses",
        "Events missing (sequence gaps)",
        "Events stored by the collector",
        "Last event per cluster",
    } <= titles["sparktap-overview"]
    assert {
        "Stage timeline",
        "Task duration distribution per stage",
        "Skew per stage",
        "Shuffle read: local vs remote",
        "Spills per stage",
        "AQE plan changes",
        "AQE shuffle reads",
        "SQL executions",
        "Findings",
        "Plan: estimated vs actual rows",
        "Codegen coverage",
        "Native engine per query",
    } <= titles["sparktap-application"]
    assert {
        "Applications started",
        "Task time by application",
        "Top applications by task time",
        "Findings by rule",
        "Listener health by application",
    } <= titles["sparktap-cluster"]
    assert {
        "Streaming findings",
        "Streaming queries",
        "Input vs processed rows/s",
        "Batch duration vs interval",
        "Source backlog",
        "State rows",
        "State memory",
    } <= titles["sparktap-streaming"]
    assert {
        "Cost by team",
        "Cost by user",
        "Cost by application",
        "Idle core-hours by team",
        "Idle core-hours by application",
        "Top wasters",
        "Memory headroom per recurring job",
    } <= titles["sparktap-fleet"]
    assert titles["sparktap-tables"] == {
        "Top tables by files written",
        "Top tables by small-file share",
        "Top tables by bytes read",
        "Files written per day: $table",
        "Writers of $table",
        "Tables of the fleet",
        "One table",
    }
    tables = {v["name"]: v for v in next(b for b in BOARDS if b["uid"] == "sparktap-tables")["templating"]["list"]}
    assert "decodeURLComponent('${table:percentencode}')" not in tables["table"]["query"]  # offered, never read
    for board in BOARDS:  # a table name reaches SQL only percent-encoded, decoded by ClickHouse
        for _, sql in panel_queries(board):
            assert "$table" not in sql.replace("${table:percentencode}", "").replace("per day: $table", ""), sql


# ----------------------------------------------------------------------------------------------- alerting file


def _alerting() -> dict[str, Any]:
    parsed: dict[str, Any] = yaml.safe_load(files(GrafanaConfig(), ClickHouseEndpoint())["alerting/sparktap.yaml"])
    return parsed


RULE_KEYS = {
    "uid",
    "title",
    "condition",
    "data",
    "dashboardUid",
    "panelId",
    "noDataState",
    "execErrState",
    "for",
    "annotations",
    "labels",
    "isPaused",
    "notification_settings",
}
QUERY_KEYS = {"refId", "queryType", "relativeTimeRange", "datasourceUid", "model"}


def test_the_events_stored_panel_asks_for_coarse_buckets_on_long_ranges() -> None:
    """At most 200 points and whole minutes: Grafana then asks 5-minute buckets for a day (read from the 5-minute
    rollup), where a half-width panel's ~900 pixels would ask 2-minute ones (the minute rollup's whole day)."""
    (board,) = [b for b in BOARDS if b["uid"] == "sparktap-overview"]
    (panel,) = [p for p in panels_of(board) if p["title"] == "Events stored by the collector"]
    assert (panel["maxDataPoints"], panel["interval"]) == (MAX_POINTS, "1m") == (200, "1m")
    day, hour = 86_400_000, 3_600_000
    assert [grafana_interval(r, 200, 60_000) for r in (hour, 6 * hour, 12 * hour, day, 7 * day)] == [
        60_000,
        120_000,
        300_000,
        300_000,
        3_600_000,
    ]
    assert grafana_interval(day, 900, 60_000) == 120_000


def test_alert_rules_follow_the_file_provisioning_format() -> None:
    doc = _alerting()
    upstream = yaml.safe_load(
        (CONTRACTS / "grafana/provisioning-examples/upstream-rules.correct-properties.yml").read_text()
    )
    assert doc["apiVersion"] == upstream["apiVersion"] == 1
    assert set(doc) <= {
        "apiVersion",
        "groups",
        "deleteRules",
        "contactPoints",
        "deleteContactPoints",
        "policies",
        "resetPolicies",
        "muteTimes",
        "templates",
    }
    (group,) = doc["groups"]
    assert set(upstream["groups"][0]) <= set(group) | {"orgId"}
    assert group["folder"] == "sparktap" and GO_DURATION.match(group["interval"])
    assert [r["uid"] for r in group["rules"]] == [rule_uid(r) for r in RULE_IDS]
    for rule in group["rules"]:
        assert set(rule) <= RULE_KEYS and {"uid", "title", "condition", "data", "for"} <= set(rule)
        assert GO_DURATION.match(rule["for"]) and rule["noDataState"] in ("OK", "NoData", "Alerting", "KeepLast")
        assert rule["execErrState"] in ("OK", "Error", "Alerting", "KeepLast")
        assert rule["condition"] in {q["refId"] for q in rule["data"]}
        for query in rule["data"]:
            assert set(query) <= QUERY_KEYS and query["model"]["refId"] == query["refId"]
        first = rule["data"][0]
        assert first["datasourceUid"] == "sparktap-clickhouse" and first["relativeTimeRange"] == {
            "from": 21600,
            "to": 0,
        }
        assert first["model"]["datasource"]["type"] == "grafana-clickhouse-datasource"
        assert "$__timeFilter(event_time)" in first["model"]["rawSql"]  # the model is not env-interpolated
        # labels and annotations are: every template `$` is written `$$`
        assert rule["labels"]["severity"] == "{{ $$labels.severity }}" and rule["labels"]["source"] == "sparktap"
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])
        for text in [*rule["labels"].values(), *rule["annotations"].values()]:
            assert not re.search(r"(?<!\$)\$(?!\$)", text), text


def test_every_alert_has_a_runbook_entry() -> None:
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$", RUNBOOK, re.M)}
    for rule in _alerting()["groups"][0]["rules"]:
        url = rule["annotations"]["runbook_url"]
        assert url.split("#")[1] in anchors, url
    assert len(anchors) == len(RULE_IDS)


def test_contact_points_and_policy() -> None:
    doc = _alerting()
    receivers = {r["type"]: r for cp in doc["contactPoints"] for r in cp["receivers"] if cp["name"] == "sparktap-chat"}
    assert set(receivers) == {"slack", "teams", "webhook"}
    assert receivers["slack"]["settings"]["url"] == "$SLACK_WEBHOOK_URL"
    assert receivers["teams"]["settings"]["url"] == "$TEAMS_WEBHOOK_URL"
    assert receivers["webhook"]["settings"]["url"] == "$SPARKTAP_WEBHOOK_URL"
    (tree,) = doc["policies"]
    (route,) = tree["routes"]
    assert route["object_matchers"] == [["source", "=", "sparktap"]]
    routing = {m[2]: r["receiver"] for r in route["routes"] for m in r["object_matchers"] if m[0] == "severity"}
    assert routing == {"critical": "sparktap-chat", "warning": "sparktap-chat", "info": "sparktap-webhook"}
    only_slack = alerting_file(GrafanaConfig(channels=("slack",)))
    assert [r["type"] for cp in only_slack["contactPoints"] for r in cp["receivers"]] == ["slack"]
    assert [r["object_matchers"][0][2] for r in only_slack["policies"][0]["routes"][0]["routes"]] == [
        "critical",
        "warning",
    ]


def test_policy_merge_keeps_the_rest_of_the_tree() -> None:
    tree = {
        "receiver": "email",
        "routes": [
            {"receiver": "team-a", "object_matchers": [["team", "=", "a"]]},
            {"receiver": "old", "object_matchers": [["source", "=", "sparktap"]]},
        ],
    }
    merged = merge_route(tree, sparktap_route())
    assert merged["receiver"] == "email"
    assert [r["receiver"] for r in merged["routes"]] == ["sparktap-chat", "team-a"]
    assert merge_route(merged, sparktap_route()) == merged


# ----------------------------------------------------------------------------------------------- HTTP bodies


SPEC = load_spec()


def _validate(definition: str, value: Any) -> list[str]:
    schema = {"$ref": f"#/definitions/{definition}", "definitions": SPEC["definitions"]}
    validator = jsonschema.Draft4Validator(schema)
    return [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(value)]


def test_api_bodies_validate_against_the_grafana_spec() -> None:
    cfg = GrafanaConfig()
    for rule in RULE_IDS:
        assert _validate("ProvisionedAlertRule", provisioned_rule(rule, cfg, 5)) == []
    assert _validate("AlertRuleGroup", provisioned_group(cfg, 5)) == []
    for point in embedded_contact_points(cfg, {"slack": "https://s", "teams": "https://t", "webhook": "https://w"}):
        assert _validate("EmbeddedContactPoint", point) == []
    assert _validate("Route", merge_route({"receiver": "x"}, sparktap_route())) == []
    assert _validate("AddDataSourceCommand", datasource_body(ClickHouseEndpoint())) == []
    # the double is strict: a misspelt field is a violation
    assert _validate("ProvisionedAlertRule", {**provisioned_rule("gc_pressure"), "folderUid": "x"}) != []


def test_alert_query_columns_are_labels_plus_one_number() -> None:
    sql = provisioned_rule("data_skew")["data"][0]["model"]["rawSql"]
    select = sql.split("\nFROM", 1)[0]
    assert select.startswith("SELECT ") and select.rstrip().endswith(", value")
    for column in LABEL_COLUMNS:
        assert re.search(rf"\b{column}\b", select)


# ----------------------------------------------------------------------------------------------- export


def test_export_writes_provisioning_files_idempotently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTAP_ALERTS__SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T/B/canary-secret")
    monkeypatch.setenv("SPARKTAP_CLICKHOUSE__URL", "clickhouse://grafana:canary-password@ch.internal:9440/spark")
    result = CliRunner().invoke(cli, ["grafana", "export", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote 10 of 10 provisioning files under {tmp_path}\n"
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == [
        "alerting/sparktap.yaml",
        "dashboards/sparktap.yaml",
        "dashboards/sparktap/sparktap-application.json",
        "dashboards/sparktap/sparktap-cluster.json",
        "dashboards/sparktap/sparktap-connect.json",
        "dashboards/sparktap/sparktap-fleet.json",
        "dashboards/sparktap/sparktap-overview.json",
        "dashboards/sparktap/sparktap-streaming.json",
        "dashboards/sparktap/sparktap-tables.json",
        "datasources/sparktap.yaml",
    ]
    for path in tmp_path.rglob("*.*"):
        text = path.read_text()
        assert "canary" not in text, path
    ds = yaml.safe_load((tmp_path / "datasources/sparktap.yaml").read_text())["datasources"][0]
    assert ds["type"] == "grafana-clickhouse-datasource"
    assert ds["secureJsonData"] == {"password": "$CLICKHOUSE_PASSWORD"}
    assert ds["jsonData"]["host"] == "ch.internal" and ds["jsonData"]["port"] == 9440
    assert ds["jsonData"]["defaultDatabase"] == "spark"
    board = json.loads((tmp_path / "dashboards/sparktap/sparktap-overview.json").read_text())
    assert "`spark`.`stage_completed_dedup`" in json.dumps(board)
    again = CliRunner().invoke(cli, ["grafana", "export", str(tmp_path)])
    assert again.output.startswith("wrote 0 of 10")
    assert export(tmp_path) != []  # a different config (default database) rewrites


def test_export_sidecar_layout(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["grafana", "export", str(tmp_path), "--layout", "sidecar"])
    assert result.exit_code == 0, result.output
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == [
        "alerting/sparktap.yaml",
        "dashboards/sparktap-application.json",
        "dashboards/sparktap-cluster.json",
        "dashboards/sparktap-connect.json",
        "dashboards/sparktap-fleet.json",
        "dashboards/sparktap-overview.json",
        "dashboards/sparktap-streaming.json",
        "dashboards/sparktap-tables.json",
        "datasources/sparktap.yaml",
    ]


def test_export_rejects_unknown_channels(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["grafana", "export", str(tmp_path), "--channels", "slack,pager"])
    assert result.exit_code != 0 and "unknown channel" in str(result.exception)

"""``sparktap grafana deploy`` against a Grafana stand-in on 127.0.0.1 that checks every request against Grafana's
HTTP API spec (``tests/fixtures/grafana.py``): everything is created, a second deploy creates nothing, the
organisation's own notification policies survive, and every request validates."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import SecretStr

from sparktap.cli import cli
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.datasource import ClickHouseEndpoint
from sparktap.dashboards.deploy import DeployError, deploy
from sparktap.detection import RULE_IDS
from tests.fixtures.grafana import FakeGrafana, grafana_server  # noqa: F401 - the fixture
from tests.support.routing_samples import ROUTES

pytestmark = pytest.mark.integration

SLACK = "https://hooks.slack.com/services/T0/B0/canary-slack"
URLS = {
    "slack": SecretStr(SLACK),
    "teams": SecretStr("https://example.invalid/workflows/canary-teams"),
    "webhook": SecretStr("https://example.invalid/hook/canary-hook"),
}
ENDPOINT = ClickHouseEndpoint("clickhouse.internal", 9000, "grafana", False, SecretStr("canary-password"))


def _deploy(server: FakeGrafana, urls: dict[str, SecretStr] = URLS, token: str | None = None) -> object:
    return deploy(server.url, SecretStr(token or server.token), GrafanaConfig(), ENDPOINT, urls, timeout=30)


def test_deploy_creates_everything_with_valid_requests(grafana_server: FakeGrafana) -> None:  # noqa: F811
    report = _deploy(grafana_server)
    assert grafana_server.violations == []
    assert all(r.operation for r in grafana_server.requests)
    s = grafana_server.state
    assert s.folders["sparktap"]["title"] == "sparktap"
    ds = s.datasources["sparktap-clickhouse"]
    assert ds["type"] == "grafana-clickhouse-datasource" and ds["jsonData"]["host"] == "clickhouse.internal"
    assert ds["secureJsonData"] == {"password": "canary-password"}
    assert sorted(s.dashboards) == [
        "sparktap-application",
        "sparktap-cluster",
        "sparktap-connect",
        "sparktap-fleet",
        "sparktap-overview",
        "sparktap-streaming",
        "sparktap-tables",
    ]
    assert {d["meta"]["folderUid"] for d in s.dashboards.values()} == {"sparktap"}
    assert sorted(s.rules) == sorted("sparktap-" + r.replace("_", "-") for r in RULE_IDS)
    for rule in s.rules.values():
        assert rule["folderUID"] == "sparktap" and rule["ruleGroup"] == "sparktap-detection" and rule["for"] == "1m"
        assert rule["labels"]["severity"] == "{{ $labels.severity }}"
        assert rule["annotations"]["runbook_url"].split("#")[1]
    assert s.groups[("sparktap", "sparktap-detection")] == 60
    ours = {uid: c for uid, c in s.contact_points.items() if uid.startswith("sparktap-")}
    assert {(c["name"], c["type"]) for c in ours.values()} == {
        ("sparktap-chat", "slack"),
        ("sparktap-chat", "teams"),
        ("sparktap-chat", "webhook"),
        ("sparktap-webhook", "webhook"),
    }
    assert ours["sparktap-slack"]["settings"]["url"] == SLACK
    assert s.policy["receiver"] == "grafana-default-email"  # the organisation's root is kept …
    assert [r["receiver"] for r in s.policy["routes"]] == ["sparktap-chat", "team-a"]  # … and its routes
    # folder, datasource, 6 dashboards, one alert rule per detection rule, 4 contact points
    assert report.count("created") == 1 + 1 + 7 + len(RULE_IDS) + 4  # type: ignore[attr-defined]


def test_second_deploy_changes_nothing(grafana_server: FakeGrafana) -> None:  # noqa: F811
    _deploy(grafana_server)
    before = json.dumps(
        [grafana_server.state.rules, grafana_server.state.dashboards, grafana_server.state.policy], sort_keys=True
    )
    n = len(grafana_server.requests)
    report = _deploy(grafana_server)
    writes = [(r.method, r.path) for r in grafana_server.requests[n:] if r.method != "GET"]
    # only what carries secrets Grafana never returns (the datasource password, the webhook URLs) is re-sent
    assert writes == [("PUT", "/api/datasources/uid/sparktap-clickhouse")] + [
        ("PUT", f"/api/v1/provisioning/contact-points/{uid}")
        for uid in ("sparktap-slack", "sparktap-teams", "sparktap-webhook", "sparktap-webhook-info")
    ]
    assert report.count("created") == 0  # type: ignore[attr-defined]
    after = json.dumps(
        [grafana_server.state.rules, grafana_server.state.dashboards, grafana_server.state.policy], sort_keys=True
    )
    assert after == before and grafana_server.violations == []


def test_changed_channels_update_and_remove_integrations(grafana_server: FakeGrafana) -> None:  # noqa: F811
    _deploy(grafana_server)
    _deploy(grafana_server, {"slack": URLS["slack"]})
    ours = sorted(uid for uid in grafana_server.state.contact_points if uid.startswith("sparktap-"))
    assert ours == ["sparktap-slack"]
    sparktap_route = grafana_server.state.policy["routes"][0]
    assert [r["object_matchers"][0][2] for r in sparktap_route["routes"]] == ["critical", "warning"]
    assert grafana_server.violations == []


def test_without_channels_rules_are_deployed_but_not_routed(grafana_server: FakeGrafana) -> None:  # noqa: F811
    _deploy(grafana_server, {})
    assert len(grafana_server.state.rules) == len(RULE_IDS)  # one alert rule per rule of the registry
    assert not any(r.path.endswith("/policies") and r.method == "PUT" for r in grafana_server.requests)
    assert grafana_server.violations == []


def test_cli_deploy(grafana_server: FakeGrafana, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("SPARKTAP_GRAFANA_TOKEN", grafana_server.token)
    monkeypatch.setenv("SPARKTAP_ALERTS__TEAMS_WEBHOOK_URL", "https://example.invalid/workflows/canary-teams")
    monkeypatch.setenv("SPARKTAP_CLICKHOUSE__URL", "clickhouse://grafana:canary-pw@ch:9000/spark")
    result = CliRunner().invoke(cli, ["grafana", "deploy", "--url", grafana_server.url])
    assert result.exit_code == 0, result.output
    created = 1 + 7 + len(RULE_IDS) + 2  # folder, dashboards, rules, the Teams contact point and the policy subtree
    assert result.output == f"deployed to {grafana_server.url}: {created} created, 1 updated, 1 unchanged\n"
    assert "canary" not in result.output and grafana_server.violations == []
    assert grafana_server.state.datasources["sparktap-clickhouse"]["jsonData"]["defaultDatabase"] == "spark"
    assert "`spark`.`stage_completed_dedup`" in json.dumps(grafana_server.state.rules)


def test_clear_errors(grafana_server: FakeGrafana) -> None:  # noqa: F811
    with pytest.raises(DeployError, match=r"refused to read the folder: HTTP 401 .*Admin role") as info:
        _deploy(grafana_server, token="wrong")  # noqa: S106
    assert "wrong" not in str(info.value)
    with pytest.raises(DeployError, match=r'cannot reach Grafana url="http://127.0.0.1:9"'):
        deploy("http://admin:pw@127.0.0.1:9", SecretStr("t"), GrafanaConfig(), ENDPOINT, {}, timeout=5)


def test_the_stand_in_rejects_what_grafana_would_not_accept(grafana_server: FakeGrafana) -> None:  # noqa: F811
    """Negative control: the double really validates (a misspelt field, a wrong type, an unknown operation)."""

    def send(method: str, path: str, body: object) -> int:
        request = urllib.request.Request(  # noqa: S310 - 127.0.0.1
            grafana_server.url + path,
            data=json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {grafana_server.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - 127.0.0.1
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    assert send("POST", "/api/folders", {"title": "x", "uid": "x", "parentUID": "y"}) == 400
    assert send("PUT", "/api/v1/provisioning/policies", {"receiver": "x", "group_by": "cluster"}) == 400
    assert send("POST", "/api/v1/nothing-here", {}) == 422
    assert len(grafana_server.violations) == 3
    assert "parentUID" in grafana_server.violations[0] and "group_by" in grafana_server.violations[1]


def test_deploy_follows_the_routing_file_route_for_route(
    grafana_server: FakeGrafana,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret_file = tmp_path / "data-url"
    secret_file.write_text("https://example.invalid/workflows/canary-data\n")
    for name in ("T_PAGER", "T_ONCALL", "T_ALICE"):
        monkeypatch.setenv(name, f"https://example.invalid/{name.lower()}/canary")
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES.replace("/run/secrets/data", str(secret_file)))
    monkeypatch.setenv("SPARKTAP_GRAFANA_TOKEN", grafana_server.token)
    monkeypatch.setenv("SPARKTAP_CLICKHOUSE__URL", "clickhouse://grafana:canary-pw@ch:9000/spark")
    result = CliRunner().invoke(cli, ["grafana", "deploy", "--url", grafana_server.url, "--routing", str(path)])
    assert result.exit_code == 0, result.output
    assert "canary" not in result.output and grafana_server.violations == []
    s = grafana_server.state
    points: dict[str, list[tuple[str, str]]] = {}
    for c in s.contact_points.values():
        if c["name"].startswith("sparktap-route-"):
            points.setdefault(c["name"], []).append((c["type"], c["settings"]["url"]))
    assert points == {
        "sparktap-route-prod-critical": [
            ("webhook", "https://example.invalid/t_pager/canary"),
            ("slack", "https://example.invalid/t_oncall/canary"),
        ],
        "sparktap-route-nightly": [
            ("teams", "https://example.invalid/workflows/canary-data"),
            ("slack", "https://example.invalid/t_oncall/canary"),
        ],
        "sparktap-route-team-x": [("teams", "https://example.invalid/workflows/canary-data")],
        "sparktap-route-alice": [("webhook", "https://example.invalid/t_alice/canary")],
        "sparktap-route-default": [("webhook", "https://example.invalid/t_pager/canary")],
    }
    sparktap, *others = s.policy["routes"]
    assert [r["receiver"] for r in others] == ["team-a"] and s.policy["receiver"] == "grafana-default-email"
    assert sparktap["receiver"] == "sparktap-route-default"
    assert [(r["receiver"], r["continue"], r["repeat_interval"]) for r in sparktap["routes"]] == [
        ("sparktap-route-prod-critical", True, "1h"),
        ("sparktap-route-nightly", False, "4h"),
        ("sparktap-route-team-x", False, "4h"),
        ("sparktap-route-alice", False, "4h"),
    ]
    # a route removed from the file: its contact point goes at the next deploy, the policy follows
    path.write_text(
        ROUTES.replace("/run/secrets/data", str(secret_file)).split("  - name: alice")[0]
        + "default:"
        + ROUTES.split("default:")[1]
    )
    result = CliRunner().invoke(cli, ["grafana", "deploy", "--url", grafana_server.url, "--routing", str(path)])
    assert result.exit_code == 0, result.output
    names = {c["name"] for c in grafana_server.state.contact_points.values() if c["name"].startswith("sparktap-")}
    assert "sparktap-route-alice" not in names and len(grafana_server.state.policy["routes"][0]["routes"]) == 3
    # a channel whose variable is missing: named, the deploy stops before touching contact points
    monkeypatch.delenv("T_ALICE")
    path.write_text(ROUTES.replace("/run/secrets/data", str(secret_file)))
    result = CliRunner().invoke(cli, ["grafana", "deploy", "--url", grafana_server.url, "--routing", str(path)])
    assert result.exit_code != 0 and "environment variable T_ALICE is not set" in str(result.exception)
    assert grafana_server.violations == []

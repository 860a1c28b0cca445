"""The routing file as pydantic models with a JSON Schema (issue 38), and the team mapping that decides who owns a
finding where a Spark user's own tags could otherwise choose it (issue 41, item 8): routes and silences."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import SecretStr

from sparktap.cli import cli
from sparktap.detection.notify import WebhookChannel, webhook_payload
from sparktap.detection.routing import Router, RoutingError, finding_attrs, parse_routing, routing_schema
from sparktap.detection.silences import Silence, silenced
from sparktap.detection.teams import UNMAPPED, TeamRule, owner, owner_sql

ROOT = Path(__file__).resolve().parents[2]

MAPPED = """
channels:
  payments: {type: webhook, url_env: T_PAY}
  data: {type: webhook, url_env: T_DATA}
  oncall: {type: webhook, url_env: T_ONCALL}
routes:
  - {name: payments, match: {team: payments}, channels: [payments]}
  - {name: data, match: {team: data-eng}, channels: [data]}
default: {channels: [oncall]}
teams:
  - {cluster: "pay-*", team: payments}
  - {user: etl, app_name: "nightly-*", team: data-eng}
  - {cluster: "shared-*", trust_tag: true}
  - {cluster: dev, trust_tag: [ml]}
"""


class _F:
    def __init__(self, **kw: Any) -> None:
        base = {"cluster": "prod-eu", "app_name": "adhoc", "rule": "data_skew", "severity": "warning", "key": "k"}
        self.__dict__.update({**base, "team": "", "user": "", "job_tags": (), **kw})


def _router(text: str) -> Router:
    routing = parse_routing(yaml.safe_load(text), "routes.yaml")
    channels = {n: WebhookChannel(n, SecretStr(f"http://127.0.0.1:9/{n}"), webhook_payload) for n in routing.channels}
    return Router(routing, channels, 3600)


def _channels(router: Router, **kw: Any) -> list[str]:
    return [t.channel.name for t in router.targets(_F(**kw))]


def test_the_checked_in_schema_is_the_export_and_refuses_what_the_loader_refuses() -> None:
    result = CliRunner().invoke(cli, ["alerts", "schema"])
    assert result.exit_code == 0, result.output
    assert result.output == (ROOT / "docs" / "routing.schema.json").read_text(encoding="utf-8")
    schema = json.loads(result.output)
    assert schema == routing_schema()
    assert schema["additionalProperties"] is False
    assert sorted(schema["properties"]) == ["channels", "default", "handles", "routes", "teams"]
    rule = schema["$defs"]["TeamRule"]
    assert rule["additionalProperties"] is False
    assert sorted(rule["properties"]) == ["app_name", "cluster", "team", "trust_tag", "user"]
    assert schema["$defs"]["RouteFile"]["properties"]["continue"]["type"] == "boolean"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "teams: [{cluster: x, team: a, colour: red}]",
            "teams[0].colour: unknown key; expected one of cluster, user, app_name, team, trust_tag",
        ),
        (
            "teams: [{cluster: x, team: a, trust_tag: true}]",
            "teams[0]: give exactly one of team: NAME or trust_tag: true (or a list of team names)",
        ),
        (
            "teams: [{cluster: x}]",
            "teams[0]: give exactly one of team: NAME or trust_tag: true (or a list of team names)",
        ),
        ("teams: [{cluster: 'a[', team: a}]", "teams[0].cluster: 'a[': '[' at position 2 is never closed by ']'"),
        (
            "routes: [{name: r, channels: [c], match: {cluster: x, colour: red}}]\n"
            "channels: {c: {type: slack, url_env: C}}",
            'routes[0] (name="r").match.colour: unknown key; expected one of cluster, app_name, team, user, rule, '
            "severity",
        ),
        ("surprise: 1", "surprise: unknown key; expected one of channels, handles, routes, default, teams"),
    ],
)
def test_unknown_keys_and_bad_rules_are_one_line_with_their_path(text: str, problem: str) -> None:
    with pytest.raises(RoutingError) as caught:
        parse_routing(yaml.safe_load(text), "routes.yaml")
    assert str(caught.value).splitlines() == [
        'routing file path="routes.yaml": 1 problem(s); fix them:',
        f"  {problem}",
    ]


def test_a_forged_team_tag_routes_nowhere_new_where_the_mapping_owns_the_cluster() -> None:
    r = _router(MAPPED)
    # the hostile input: a Spark user on a payments-owned cluster... is payments; the same tag elsewhere is not
    assert _channels(r, cluster="pay-eu", team="data-eng") == ["payments"]
    assert _channels(r, cluster="prod-eu", team="payments") == ["oncall"]
    assert _channels(r, cluster="prod-eu", job_tags=("payments",)) == ["oncall"]
    assert _channels(r, cluster="prod-eu", user="etl", app_name="nightly-1", team="payments") == ["data"]
    assert _channels(r, cluster="prod-eu", user="mallory", app_name="nightly-1", team="payments") == ["oncall"]
    # where the mapping trusts tags, they decide: any value on shared-*, only ml on dev
    assert _channels(r, cluster="shared-1", team="payments") == ["payments"]
    assert _channels(r, cluster="shared-1", job_tags=("x", "data-eng")) == ["data"]
    assert _channels(r, cluster="dev", team="payments") == ["oncall"]
    # the finding's own tags stay visible beside the owner
    attrs = finding_attrs(_F(cluster="prod-eu", team="payments", job_tags=("payments",)), r.teams)
    assert (attrs["team"], attrs["job_tags"], attrs["tag_team"], attrs["tags"]) == ("", (), "payments", ("payments",))


def test_without_a_mapping_tags_are_trusted_as_before() -> None:
    r = _router(MAPPED.split("teams:")[0])
    assert r.teams is None
    assert _channels(r, cluster="prod-eu", team="payments") == ["payments"]
    assert _channels(r, cluster="prod-eu", job_tags=("data-eng",)) == ["data"]


def test_a_team_silence_mutes_only_what_the_mapping_gives_that_team() -> None:
    r = _router(MAPPED)
    silence = Silence(
        id="s1", rule="", app_name="", cluster="", team="payments", user="", starts_at_ms=0, ends_at_ms=10**13,
        created_by="ops", created_at_ms=0, reason="payments maintenance",
    )  # fmt: skip
    forged = _F(cluster="prod-eu", team="payments", job_tags=("payments",))
    assert silenced([silence], forged, 1000, r.teams) is None  # the forger's finding is still sent
    assert silenced([silence], forged, 1000, None) is silence  # (what a tag did before the mapping)
    assert silenced([silence], _F(cluster="pay-eu"), 1000, r.teams) is silence
    assert silenced([silence], _F(cluster="shared-2", team="payments"), 1000, r.teams) is silence


def test_owner_and_its_sql_agree() -> None:
    rules = tuple(TeamRule.model_validate(r) for r in yaml.safe_load(MAPPED)["teams"])
    assert owner(rules, "pay-1", "x", "a", "ml") == ("payments", ())
    assert owner(rules, "dev", "x", "a", "payments", ("ml",)) == ("", ("ml",))
    assert owner(rules, "prod", "x", "a", "payments") == ("", ())
    assert owner(None, "prod", "x", "a", "payments", ("t",)) == ("payments", ("t",))
    sql = owner_sql(rules, "cluster", "user", "app_name", "team")
    assert sql == (
        "multiIf((match(cluster, '^(?:pay-.*)$')), 'payments', (match(user, '^(?:etl)$')) AND "
        "(match(app_name, '^(?:nightly-.*)$')), 'data-eng', (match(cluster, '^(?:shared-.*)$')) AND team != '', "
        f"team, (match(cluster, '^(?:dev)$')) AND has(['ml'], team), team, '{UNMAPPED}')"
    )

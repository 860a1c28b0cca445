"""The routing file (``detection/routing.py``): every problem reported on one line with its path in the file,
Alertmanager's first-match / continue semantics, team and user matching on the attribution columns, mentions,
re-notify per route, and the single-list settings as the default route."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import SecretStr

from sparktap.cli import cli
from sparktap.detection.notify import WebhookChannel, webhook_payload
from sparktap.detection.routing import (
    Router,
    RoutingError,
    finding_attrs,
    load_routing,
    parse_duration,
    parse_routing,
)
from tests.support.routing_samples import ROUTES


def attrs(**kw: Any) -> dict[str, Any]:
    base = {
        "cluster": "prod-us",
        "app_name": "adhoc",
        "rule": "data_skew",
        "severity": "warning",
        "team": "",
        "user": "",
        "job_tags": (),
    }
    return {**base, **kw}


class _F:
    """A finding's routing attributes (``finding_attrs`` reads attributes)."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(attrs(**kw))


def channel(name: str) -> WebhookChannel:
    return WebhookChannel(name, SecretStr(f"http://127.0.0.1:9/{name}"), webhook_payload)


def router(text: str = ROUTES, legacy: tuple[str, ...] = ()) -> Router:
    routing = parse_routing(__import__("yaml").safe_load(text), "routes.yaml")
    channels = {n: channel(n) for n in routing.channels}
    return Router(routing, channels, 3600 * 6, [channel(n) for n in legacy])


def test_first_match_continue_and_default() -> None:
    r = router()
    names = lambda **kw: [x.name for x in r.routes_for(attrs(**kw))]  # noqa: E731
    # continue: true on the first route, so the nightly route is tried too, and it stops the search
    assert names(cluster="prod-eu", severity="critical", app_name="nightly-join") == ["prod-critical", "nightly"]
    assert names(cluster="prod-eu", severity="warning", app_name="nightly-join") == ["nightly"]
    assert names(app_name="batch-7") == ["nightly"] and names(app_name="batch-77") == ["default"]
    assert names(app_name="Nightly-x") == ["default"]  # globs are case-sensitive
    # team: the finding's team or one of its job tags; user and rule: equal
    assert names(team="team-x") == ["team-x"] and names(job_tags=("a", "team-x")) == ["team-x"]
    assert names(user="alice") == ["alice"] and names(user="alice", rule="task_failures") == ["default"]
    assert names(user="bob") == ["default"]  # alice's route gets nothing of bob's
    assert names() == ["default"]


def test_targets_each_channel_once_with_the_shortest_renotify_and_mentions() -> None:
    r = router()
    both = {t.channel.name: t for t in r.targets(_F(cluster="prod-eu", severity="critical", app_name="nightly-1"))}
    assert sorted(both) == ["data", "oncall", "pager"]
    assert both["oncall"].renotify_seconds == 3600 and both["data"].renotify_seconds == 4 * 3600
    assert both["pager"].route == "prod-critical" and both["data"].route == "nightly"
    team = r.targets(_F(team="team-x", user="alice"))
    assert [(t.channel.name, t.mention) for t in team] == [("data", "<@U0ALICE>")]
    assert [(t.channel.name, t.mention) for t in r.targets(_F(team="team-x", user="dave"))] == [("data", "")]
    alice = r.targets(_F(user="alice"))
    assert [(t.channel.name, t.mention, t.renotify_seconds) for t in alice] == [("alice-hook", "<@U0CAROL>", 6 * 3600)]
    assert [(t.channel.name, t.renotify_seconds) for t in r.targets(_F())] == [("pager", 7200)]


def test_the_single_list_settings_are_the_default_route() -> None:
    without_default = ROUTES.split("default:")[0]
    r = router(without_default, legacy=("slack", "webhook"))
    assert [t.channel.name for t in r.targets(_F())] == ["slack", "webhook"]
    assert [c.name for c in r.channels] == ["pager", "oncall", "data", "alice-hook", "slack", "webhook"]
    # no routing file at all: exactly the old behaviour, every finding to every configured channel
    plain = Router.build(None, [channel("slack"), channel("teams")], 4 * 3600)
    assert [(t.channel.name, t.renotify_seconds) for t in plain.targets(_F(severity="critical"))] == [
        ("slack", 4 * 3600),
        ("teams", 4 * 3600),
    ]
    # a file with a default: the single-list channels are not used
    assert [t.channel.name for t in router(legacy=("slack",)).targets(_F())] == ["pager"]


def test_every_problem_is_one_line_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(
        """
channels:
  oncall: {type: slack, url: "https://hooks.slack.com/services/T0/B0/s3cr3t"}
  data: {type: teamz, url_env: DATA}
  slack: {type: slack, url_env: X}
  ok: {type: webhook, url_env: OK}
routes:
  - name: a
    match: {severity: [urgent], rule: nope, colour: red}
    channels: [ok, missing]
    renotify: 5 parsecs
    continue: sometimes
  - match: {cluster: c}
    channels: []
    mention: [bob]
  - name: a
    channels: [ok]
"""
    )
    with pytest.raises(RoutingError) as caught:
        load_routing(path)
    lines = str(caught.value).splitlines()
    assert lines[0] == f'routing file path="{path}": 14 problem(s); fix them:'
    problems = [line.strip() for line in lines[1:]]
    assert problems == [  # part by part, as the file lists them
        "channels.data.type: 'teamz' is not a channel type; expected one of slack, teams, webhook",
        "channels.oncall: give exactly one of url_env (an environment variable) or url_file (a secret file)",
        "channels.oncall.url: webhook URLs are secrets and never go in this file: put the URL in an environment "
        "variable (url_env: NAME) or a mounted secret file (url_file: /path)",
        "channels.slack: the names slack, teams, webhook are the SPARKTAP_ALERTS__* channels'; choose another",
        "routes[0] (name=\"a\").renotify: '5 parsecs' is not a duration: expected a number and a unit s, m, h, d "
        "or w, e.g. 4h",
        'routes[0] (name="a").match.rule: no detection rule "nope" (see docs/runbook.md for the rule ids)',
        "routes[0] (name=\"a\").match.severity: 'urgent' is not a severity; expected info, warning, critical",
        'routes[0] (name="a").match.colour: unknown key; expected one of cluster, app_name, team, user, rule, severity',
        "routes[0] (name=\"a\").continue: expected true or false, got 'sometimes'",
        'routes[0] (name="a").channels[1]: no channel named "missing" under channels:',
        "routes[1].channels: a route sends to at least one channel",
        'routes[1].mention[0]: user "bob" has no handle under handles: (or write mention: user)',
        "routes[1].name: every route needs a name: letters, digits, '_', '.', '-' (up to 63), starting with a letter "
        "or digit",
        'routes[2].name: "a" is the name of an earlier route; names are unique',
    ]
    assert "s3cr3t" not in str(caught.value)
    path.write_text("routes: [\n  - a: b\n")
    with pytest.raises(RoutingError, match=r"is not valid YAML at line 2, column 3"):
        load_routing(path)


def test_check_routes_offline_and_secrets_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    result = CliRunner().invoke(cli, ["alerts", "check-routes", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output == f"{path}: 4 route(s), 4 channel(s), 2 handle(s); default → pager\n"
    # at start the secrets are read: a missing variable or file is named, the URL never
    monkeypatch.setenv("T_PAGER", "https://hooks.example.com/s3cr3t")
    monkeypatch.setenv("T_ONCALL", "ftp://hooks.example.com/s3cr3t")
    with pytest.raises(RoutingError) as caught:
        Router.build(load_routing(path), [], 3600)
    assert str(caught.value).splitlines()[1:] == [
        '  channel "oncall": its URL (environment variable T_ONCALL) must be http(s)',
        '  channel "data": cannot read url_file="/run/secrets/data": No such file or directory; mount the secret '
        "there or fix the path",
        '  channel "alice-hook": environment variable T_ALICE is not set; set it to the webhook webhook URL (from a '
        "Kubernetes secret) or use url_file",
    ]
    assert "s3cr3t" not in str(caught.value)
    bad = tmp_path / "bad.yaml"
    bad.write_text("routes: {}\nsurprise: 1\n")
    result = CliRunner().invoke(cli, ["alerts", "check-routes", str(bad)])
    assert result.exit_code != 0 and "surprise: unknown key" in str(result.exception)


def test_durations_and_attributes_of_findings_without_attribution() -> None:
    assert parse_duration("90s") == 90 and parse_duration("4h") == 14400 and parse_duration(60) == 60
    for bad in ("0m", "4 hours", "", True):
        with pytest.raises(ValueError, match="is not a duration"):
            parse_duration(bad)
    got = finding_attrs(type("F", (), {"cluster": "c", "app_name": "a", "rule": "r", "severity": "info"})())
    assert got == {
        "cluster": "c",
        "app_name": "a",
        "rule": "r",
        "severity": "info",
        "team": "",
        "user": "",
        "job_tags": (),
    }


def test_an_embedded_collector_refuses_to_start_on_a_bad_routing_file(tmp_path: Path) -> None:
    from sparktap.collector.consumer import CollectorHooks
    from sparktap.detection.embedded import attach
    from sparktap.settings import Settings

    path = tmp_path / "routes.yaml"
    path.write_text("routes:\n  - name: x\n    channels: [nowhere]\ndefault: {channels: [nowhere]}\n")
    settings = Settings(clickhouse={"url": f"chdb://{tmp_path}/chdb"}, alerts={"routing_path": path})
    with pytest.raises(RoutingError, match=r'routes\[0\] \(name="x"\)\.channels\[0\]: no channel named "nowhere"'):
        attach(CollectorHooks(), settings)
    path.write_text(ROUTES)  # valid, but T_PAGER and the others are not set: named at start, before any store opens
    with pytest.raises(RoutingError, match="environment variable T_PAGER is not set"):
        attach(CollectorHooks(), settings)
    server = Settings(clickhouse={"url": "clickhouse://u@127.0.0.1:9/db"}, alerts={"routing_path": path})
    assert attach(CollectorHooks(), server) is None  # on a server, `sparktap alert` routes, not the collector

"""Alert routing and silences against real ClickHouse (chDB; the silences table on clickhouse-server 18.16 too) and
a local HTTP receiver standing in for every channel: five routes over findings of several severities, clusters
and application names — each message arrives at exactly the channels its route names, once, the default route
gets the rest, each route repeats after its own interval; a silence keeps a rule quiet for ``nightly-*`` while it
lasts on two alerter replicas, and its findings are sent once it ends."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sparktap.cli import cli
from sparktap.dashboards.panels import active_silences
from sparktap.detection.alerter import Alerter
from sparktap.detection.macros import expand, interpolate
from sparktap.detection.settings import AlertSettings
from sparktap.detection.silences import SilenceError, SilenceStore, os_user
from sparktap.detection.sql import SqlContext
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.clickhouse import ClickHouseServer
from tests.fixtures.receiver import SECRET, Receiver
from tests.support import detection_samples as samples
from tests.support import sample_app
from tests.support.detection import Clock, load

pytestmark = pytest.mark.integration

T0 = sample_app.BASE_TIME_MS

ROUTES = """
channels:
  pager: {type: webhook, url_env: T_ROUTE_PAGER}
  oncall: {type: slack, url_env: T_ROUTE_ONCALL}
  data: {type: teams, url_file: %(data_file)s}
  dev: {type: webhook, url_env: T_ROUTE_DEV}
  perf-slack: {type: slack, url_env: T_ROUTE_PERF_SLACK}
  perf: {type: webhook, url_env: T_ROUTE_PERF}
  team-x: {type: webhook, url_env: T_ROUTE_TEAM_X}
  catchall: {type: webhook, url_env: T_ROUTE_CATCHALL}
handles: {alice: "<@U0ALICE>"}
routes:
  - name: prod-eu-critical
    match: {cluster: prod-eu, severity: critical}
    channels: [pager, oncall]
    renotify: 1h
    continue: true
  - name: nightly
    match: {app_name: "nightly-*"}
    channels: [data]
    renotify: 2h
  - name: dev
    match: {cluster: dev, severity: [warning, critical]}
    channels: [dev]
    renotify: 10m
    mention: [alice]
  - name: prod-us-failures
    match: {cluster: prod-us, rule: task_failures}
    channels: [perf-slack, perf]
  - name: team-x
    match: {team: team-x}
    channels: [team-x]
default:
  channels: [catchall]
"""

# what the receiver's paths are: one per channel
PATHS = ("pager", "oncall", "data", "dev", "perf-slack", "perf", "team-x", "catchall")

K = {
    "gc": "gc_pressure|prod-us|app-gc|1|stage=1.0",
    "tiny": "small_partitions|prod-eu|app-tiny-tasks|1|stage=1.0",
    "data_skew": "data_skew|prod-eu|app-skewed-join|1|stage=1.0",
    "time_skew": "task_time_skew|prod-eu|app-skewed-join|1|stage=1.0",
    "not_fixed": "skew_not_fixed|prod-eu|app-skewed-join|1|stage=1.0",
    "dev_crit": "task_failures|dev|app-failures|1|stage=3.0",
    "dev_warn": "task_failures|dev|app-failures|1|stage=2.0",
    "dev_info": "task_failures|dev|app-failures|1|stage=1.0",
    "us_warn": "task_failures|prod-us|app-running|1|stage=3.0",
}


def moved(app: sample_app.App, cluster: str, name: str) -> sample_app.App:
    app.events = [e.model_copy(update={"cluster": cluster, "app_name": name}) for e in app.events]
    return app


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    """Nine findings: critical, warning and info, on prod-eu, prod-us and dev, nightly-* and other names."""
    target = StorageTarget(kind="chdb", path=Path(tmp_path_factory.mktemp("routing")) / "chdb", database="routing")
    storage = open_storage(target)
    try:
        storage.ensure_schema()
        load(
            storage,
            [
                moved(samples.skewed_join(), "prod-eu", "nightly-join"),
                moved(samples.failing_tasks(), "dev", "adhoc-flaky"),
                moved(samples.running_failures(), "prod-us", "long-runner"),
                moved(samples.gc_heavy(), "prod-us", "nightly-gc"),
                moved(samples.tiny_tasks(), "prod-eu", "adhoc-tiny"),
            ],
        )
        yield storage
    finally:
        storage.close()


@pytest.fixture
def routed(receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AlertSettings:
    data_file = tmp_path / "data-url"
    data_file.write_text(receiver.url("data") + "\n")
    for name in PATHS:
        if name != "data":
            monkeypatch.setenv("T_ROUTE_" + name.upper().replace("-", "_"), receiver.url(name))
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES % {"data_file": data_file})
    return AlertSettings(
        routing_path=routes,
        min_severity="info",
        renotify_seconds=4 * 3600,
        lookback_seconds=6 * 3600,
        state_path=tmp_path / "state.json",
    )


def keys(got: dict[str, list[Any]]) -> dict[str, list[str]]:
    """Channel -> the finding keys it got, sorted (Slack and Teams messages name the application, not the key)."""
    out: dict[str, list[str]] = {}
    for path, messages in got.items():
        for m in messages:
            if "key" in m:
                out.setdefault(path, []).append(m["key"])
            else:
                text = m["text"] if "text" in m else m["attachments"][0]["content"]["body"][0]["text"]
                out.setdefault(path, []).append(text)
    return {p: sorted(v) for p, v in out.items()}


def test_five_routes_each_message_exactly_where_its_route_says(
    store: Storage, receiver: Receiver, routed: AlertSettings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock(T0 + 60_000)
    alerter = Alerter.from_storage(store, routed, clock=clock)
    report = alerter.evaluate()
    assert report.findings == 9 and report.failed == [] and report.silenced == 0
    got = receiver.take()
    assert sorted(got) == ["catchall", "data", "dev", "oncall", "pager", "perf", "perf-slack"]  # team-x: nothing
    hooks = keys({p: got[p] for p in ("pager", "dev", "perf", "catchall")})
    assert hooks == {
        "pager": sorted([K["data_skew"], K["time_skew"]]),  # prod-eu critical (and on, through continue)
        "dev": sorted([K["dev_crit"], K["dev_warn"]]),  # dev, warning and critical
        "perf": [K["us_warn"]],  # prod-us task failures
        "catchall": sorted([K["tiny"], K["dev_info"]]),  # what no route took
    }
    # Slack (oncall, perf-slack) and Teams (data): one message per finding, naming its application
    oncall = [m["text"] for m in got["oncall"]]
    assert len(oncall) == 2 and all(t.startswith("🔴 CRITICAL") and "nightly-join" in t for t in oncall)
    assert [m["text"].split(" · ")[1] for m in got["perf-slack"]] == ["Task failures"]
    teams = sorted(m["attachments"][0]["content"]["body"][0]["text"] for m in got["data"])
    # nightly-*: the skewed join's three findings (two of them reached it after prod-eu-critical's continue), and
    # nightly-gc's GC pressure; first match: the GC finding on prod-us never reaches a later route
    assert len(teams) == 4 and sum("nightly-join" in t for t in teams) == 3
    assert sum("nightly-gc" in t for t in teams) == 1
    # the dev route mentions alice's handle; the others mention nobody
    assert [m["mention"] for m in got["dev"]] == ["<@U0ALICE>", "<@U0ALICE>"]
    assert all("mention" not in m for m in got["pager"] + got["catchall"])

    # each route repeats after its own interval: 61 min later, prod-eu-critical (1 h) and dev (10 min) only
    clock.ms += 61 * 60_000
    alerter.evaluate()
    again = receiver.take()
    assert sorted(again) == ["dev", "oncall", "pager"]
    assert keys({"pager": again["pager"], "dev": again["dev"]}) == {
        "pager": sorted([K["data_skew"], K["time_skew"]]),
        "dev": sorted([K["dev_crit"], K["dev_warn"]]),
    }
    assert all(m["reason"] == "reminder" for m in again["pager"] + again["dev"]) and len(again["oncall"]) == 2
    assert SECRET not in caplog.text and SECRET not in routed.state_path.read_text()


WHO = """
channels:
  alice: {type: webhook, url_env: T_WHO_ALICE}
  bob: {type: webhook, url_env: T_WHO_BOB}
  team-x: {type: webhook, url_env: T_WHO_TEAM_X}
  payments: {type: webhook, url_env: T_WHO_PAYMENTS}
  rest: {type: webhook, url_env: T_WHO_REST}
handles: {alice: "<@U0ALICE>", bob: "<@U0BOB>"}
routes:
  - name: alice
    match: {user: alice}
    channels: [alice]
  - name: bob-critical
    match: {user: bob, severity: critical}
    channels: [bob]
    mention: user
    continue: true
  - name: team-x
    match: {team: team-x}
    channels: [team-x]
  - name: payments
    match: {team: payments}
    channels: [payments]
default:
  channels: [rest]
"""


def test_team_and_user_routes_on_the_attribution_columns(
    store: Storage, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The skewed join ran as bob's Spark Connect operation, its job tagged team-x, in an application of team
    payments (tests/support/detection_samples.py): alice's route gets nothing of bob's; bob's critical findings
    reach his route (mentioning him) and, through continue, the team-x route (a job tag), which stops the search
    before the payments route (the application's team tag)."""
    for name in ("alice", "bob", "team-x", "payments", "rest"):
        monkeypatch.setenv("T_WHO_" + name.upper().replace("-", "_"), receiver.url(name))
    routes = tmp_path / "who.yaml"
    routes.write_text(WHO)
    settings = AlertSettings(routing_path=routes, min_severity="info", state_path=tmp_path / "state.json")
    report = Alerter.from_storage(store, settings, clock=Clock(T0 + 60_000)).evaluate()
    assert report.findings == 9 and report.failed == []
    got = receiver.take()
    assert sorted(got) == ["bob", "rest", "team-x"]  # alice and payments: nothing
    assert keys({p: got[p] for p in ("bob", "team-x")}) == {
        "bob": sorted([K["data_skew"], K["time_skew"]]),
        "team-x": sorted([K["data_skew"], K["time_skew"], K["not_fixed"]]),
    }
    assert [m["mention"] for m in got["bob"]] == ["<@U0BOB>", "<@U0BOB>"]
    assert all(m["finding"]["user"] == "bob" and m["finding"]["team"] == "payments" for m in got["team-x"])
    assert len(got["rest"]) == 6 and K["data_skew"] not in {m["key"] for m in got["rest"]}


MAPPED = (
    WHO.replace("  rest:", "  platform: {type: webhook, url_env: T_WHO_PLATFORM}\n  rest:").replace(
        "default:", "  - name: platform\n    match: {team: platform}\n    channels: [platform]\ndefault:"
    )
    + "teams:\n  - {cluster: prod-eu, app_name: 'nightly-*', team: platform}\n"
)


def test_a_team_tag_a_user_set_neither_routes_nor_silences_under_the_team_mapping(
    store: Storage, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41, item 8. The skewed join's application is tagged ``payments`` and its job ``team-x`` by the Spark
    user; the platform's mapping gives prod-eu's nightly-* jobs to ``platform``. Its findings go to the platform
    route (bob's own route still gets his critical ones), never to team-x or payments; a silence of team payments
    mutes none of them, one of team platform does; the tags stay visible in the message."""
    for name in ("alice", "bob", "team-x", "payments", "platform", "rest"):
        monkeypatch.setenv("T_WHO_" + name.upper().replace("-", "_"), receiver.url(name))
    routes = tmp_path / "mapped.yaml"
    routes.write_text(MAPPED)
    clock = Clock(T0 + 60_000)
    silences = SilenceStore.of(store, clock)
    forged = silences.add(rule="data_skew", team="payments", duration="1h", reason="payments: known skew")
    owned = silences.add(rule="task_time_skew", team="platform", duration="1h", reason="platform: known")
    try:
        settings = AlertSettings(routing_path=routes, min_severity="info", state_path=tmp_path / "state.json")
        report = Alerter.from_storage(store, settings, clock=clock).evaluate()
        assert report.findings == 9 and report.failed == [] and report.silenced == 1  # the time skew only
        got = receiver.take()
        assert sorted(got) == ["bob", "platform", "rest"]  # team-x and payments: nothing
        assert keys({p: got[p] for p in ("bob", "platform")}) == {
            "bob": [K["data_skew"]],
            "platform": sorted([K["data_skew"], K["not_fixed"]]),
        }
        shown = {(m["finding"]["team"], "team-x" in m["finding"]["job_tags"]) for m in got["platform"]}
        assert shown == {("payments", True)}
        assert len(got["rest"]) == 6
        audit = store.query(f"SELECT silence_id, finding_key FROM {store.database}.alert_silenced")
        assert [(r["silence_id"], r["finding_key"]) for r in audit if r["silence_id"] in (forged.id, owned.id)] == [
            (owned.id, K["time_skew"])
        ]
    finally:
        silences.expire(forged.id)
        silences.expire(owned.id)


def test_a_silence_holds_on_every_replica_and_its_findings_go_once_it_ends(
    store: Storage, receiver: Receiver, routed: AlertSettings, tmp_path: Path
) -> None:
    clock = Clock(T0 + 60_000)
    silences = SilenceStore.of(store, clock)
    quiet = silences.add(rule="task_time_skew", app_name="nightly-*", duration="24h", reason="known skew, fix Monday")
    short = silences.add(rule="gc_pressure", app_name="nightly-*", cluster="prod-us", duration="30m", reason="tuning")
    other = silences.add(rule="gc_pressure", app_name="adhoc-*", duration="25h", reason="matches nothing here")
    assert [s.id for s in silences.active()] == [short.id, quiet.id, other.id]  # by end time
    panel = active_silences(SqlContext(store.database, store.version()))["targets"][0]["rawSql"]
    shown = store.query(expand(interpolate(panel, {"cluster": ["prod-eu"]}), T0, T0 + 60_000))
    assert [r["id"] for r in shown] == [quiet.id, other.id]  # on chDB; the prod-us one is not for this cluster
    replicas = [
        Alerter.from_storage(store, routed.model_copy(update={"state_path": tmp_path / f"state-{i}.json"}), clock=clock)
        for i in (1, 2)
    ]
    for replica in replicas:  # each replica has its own state, both read the silences from ClickHouse
        report = replica.evaluate()
        assert report.findings == 9 and report.silenced == 2
        got = receiver.take()
        assert keys({"pager": got["pager"]}) == {"pager": [K["data_skew"]]}  # task_time_skew silenced
        assert len(got["data"]) == 2  # nightly-join's data_skew and skew_not_fixed; not its time skew nor nightly-gc
        assert len(got["catchall"]) == 2

    # 31 minutes on, the short silence has lapsed: nightly-gc's GC pressure goes to the nightly route, once
    first, second = replicas
    clock.ms += 31 * 60_000
    report = first.evaluate()
    assert report.silenced == 1 and sorted(c for c, _ in report.sent) == ["data", "dev", "dev"]
    got = receiver.take()
    (message,) = got["data"]
    assert "nightly-gc" in message["attachments"][0]["content"]["body"][0]["text"]
    assert [m["reason"] for m in got["dev"]] == ["reminder", "reminder"]  # the dev route's 10 min

    # expired by hand (on either replica's store: it is the same table): the time skew goes out at each replica's
    # next pass, as a new finding, to its route's channels only; the GC finding the first replica sent is not repeated
    assert silences.expire(quiet.id).ends_at_ms == clock.ms
    assert [s.id for s in silences.active()] == [other.id]
    report = second.evaluate()  # its own state: both silences have ended since its last pass
    assert report.silenced == 0
    assert sorted(c for c, _ in report.sent) == ["data", "data", "dev", "dev", "oncall", "pager"]
    assert [(m["key"], m["reason"]) for m in receiver.take()["pager"]] == [(K["time_skew"], "new")]
    report = first.evaluate()
    assert report.silenced == 0 and sorted(c for c, _ in report.sent) == ["data", "oncall", "pager"]
    got = receiver.take()
    assert [(m["key"], m["reason"]) for m in got["pager"]] == [(K["time_skew"], "new")]
    assert "Task-time skew" in got["data"][0]["attachments"][0]["content"]["body"][0]["text"]

    with pytest.raises(SilenceError, match='no silence id="nope"'):
        silences.expire("nope")
    with pytest.raises(SilenceError, match="needs --rule or an --app-name glob"):
        silences.add(cluster="prod-eu", reason="everything")


def test_silences_on_clickhouse_server(
    server_storage: Storage, clickhouse_server: ClickHouseServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table is created by the schema step on 18.16; an app-name glob with quotes stays a value; the CLI adds,
    lists and expires, and says what is wrong in one line."""
    server_storage.ensure_schema()
    clock = Clock(T0)
    store = SilenceStore.of(server_storage, clock)
    glob = "it's-`x`\\'; DROP TABLE alert_silences; --*"
    made = store.add(app_name=glob, team="team-x", user="bob", duration="2h", reason="r'", author="ops")
    (listed,) = store.active()
    assert listed == made and listed.app_name == glob and listed.reason == "r'"
    # the Overview dashboard's Active silences panel, run on 18.16: the silence in force at the range's end
    sql = active_silences(SqlContext(server_storage.database, server_storage.version()))["targets"][0]["rawSql"]
    sql = interpolate(sql, {"cluster": ["prod-eu"]})
    (row,) = server_storage.query(expand(sql, T0 - 3_600_000, T0 + 30_000))
    assert (row["id"], row["app_name_glob"], row["team"], row["user"], row["created_by"]) == (
        made.id,
        glob,
        "team-x",
        "bob",
        f"{os_user()} (as ops)",  # the OS account, the --author name beside it
    )
    clock.ms += 60_000
    assert store.expire(made.id).ends_at_ms == T0 + 60_000
    assert store.active() == [] and [s.ends_at_ms for s in store.all()] == [T0 + 60_000]
    assert server_storage.query(expand(sql, T0 - 3_600_000, T0 + 120_000)) == []  # expired: no longer listed

    monkeypatch.setenv("SPARKTAP_CLICKHOUSE__URL", clickhouse_server.url(server_storage.database))
    runner = CliRunner()
    added = runner.invoke(
        cli, ["silence", "add", "--rule", "data_skew", "--app-name", "nightly-*", "--for", "2h", "--reason", "known"]
    )
    assert added.exit_code == 0, added.output
    silence_id = added.output.split()[1].rstrip(":")
    assert added.output.startswith(f"silence {silence_id}: rule=data_skew app_name=nightly-* until ")
    listed = runner.invoke(cli, ["silence", "list", "--format", "json"])
    assert [json.loads(line)["id"] for line in listed.output.splitlines()] == [silence_id]
    assert runner.invoke(cli, ["silence", "expire", silence_id]).exit_code == 0
    assert runner.invoke(cli, ["silence", "list", "--format", "json"]).output == ""
    assert len(runner.invoke(cli, ["silence", "list", "--all", "--format", "json"]).output.splitlines()) == 2
    bad = runner.invoke(cli, ["silence", "add", "--rule", "data_skew", "--for", "5 parsecs", "--reason", "x"])
    assert (
        str(bad.exception)
        == "--for '5 parsecs' is not a duration: expected a number and a unit s, m, h, d or w, e.g. 4h"
    )

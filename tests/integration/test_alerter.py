"""The built-in alerter against a local HTTP receiver standing in for Slack, Teams and a generic webhook: exactly one
message per finding and channel, each channel's format, nothing re-sent within the re-notify interval, a reminder
after it, a resolve when the finding clears, retries after a failed delivery, and no webhook URL in any log line."""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from sparktap.detection.alerter import Alerter, AlerterError, FileState, MemoryState, serve_metrics
from sparktap.detection.settings import AlertSettings
from sparktap.local.ports import wait_until
from sparktap.schemas.rows import RowBuilder
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.receiver import SECRET, Receiver
from tests.support import detection_samples as samples
from tests.support import sample_app
from tests.support.detection import Clock, load

pytestmark = pytest.mark.integration

T0 = sample_app.BASE_TIME_MS


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    """The skewed join and a running application with failing tasks, plus a balanced control."""
    target = StorageTarget(kind="chdb", path=Path(tmp_path_factory.mktemp("alerter")) / "chdb", database="alerts")
    storage = open_storage(target)
    try:
        storage.ensure_schema()
        load(storage, [samples.skewed_join(), samples.running_failures(), samples.balanced()])
        yield storage
    finally:
        storage.close()


def settings(receiver: Receiver, tmp_path: Path, **overrides: Any) -> AlertSettings:
    return AlertSettings(
        slack_webhook_url=SecretStr(receiver.url("slack")),
        teams_webhook_url=SecretStr(receiver.url("teams")),
        webhook_url=SecretStr(receiver.url("hook")),
        grafana_url="https://grafana.example.com",
        renotify_seconds=3600,
        lookback_seconds=6 * 3600,
        state_path=tmp_path / "state.json",
        **overrides,
    )


# the skewed join: task_time_skew (critical), data_skew (critical), skew_not_fixed (warning);
# the running application: task_failures (warning, running)
FIRING = {
    "task_time_skew|prod-eu|app-skewed-join|1|stage=1.0",
    "data_skew|prod-eu|app-skewed-join|1|stage=1.0",
    "skew_not_fixed|prod-eu|app-skewed-join|1|stage=1.0",
    "task_failures|prod-eu|app-running|1|stage=3.0",
}


def test_one_message_per_finding_no_repeat_reminder_and_resolve(
    store: Storage, receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock(T0 + 60_000)
    alerter = Alerter.from_storage(store, settings(receiver, tmp_path), clock=clock)

    first = alerter.evaluate()
    got = receiver.take()
    assert first.findings == 4 and first.failed == [] and len(first.sent) == 12
    assert {m["key"] for m in got["hook"]} == FIRING and len(got["hook"]) == 4
    assert all(m["status"] == "firing" and m["reason"] == "new" for m in got["hook"])
    assert len(got["slack"]) == 4 and all("blocks" in m and "text" in m for m in got["slack"])
    assert len(got["teams"]) == 4 and all(
        m["attachments"][0]["contentType"] == "application/vnd.microsoft.card.adaptive" for m in got["teams"]
    )
    hook = {m["key"]: m for m in got["hook"]}["data_skew|prod-eu|app-skewed-join|1|stage=1.0"]
    assert hook["finding"]["severity"] == "critical" and hook["finding"]["evidence"]["ratio"] == 102.4
    assert hook["dashboard_url"].startswith("https://grafana.example.com/d/sparktap-application/")
    assert "var-app=app-skewed-join" in hook["dashboard_url"]

    # within the re-notify interval: nothing
    clock.ms += 30 * 60_000
    assert alerter.evaluate().sent == [] and receiver.take() == {}

    # the running stage recovers: 4 failures in 100 finished tasks is below 5 %: a resolve, on every channel
    more = sample_app.App("app-running", "long-runner")
    more._seq = iter(range(10_000, 20_000))
    more.tasks(3, T0 + 50_000, [1_000] * 70)
    load(store, [more])
    resolved = alerter.evaluate()
    got = receiver.take()
    assert [(m["status"], m["reason"], m["key"]) for m in got["hook"]] == [
        ("resolved", "cleared", "task_failures|prod-eu|app-running|1|stage=3.0")
    ]
    assert len(got["slack"]) == len(got["teams"]) == 1 and resolved.findings == 3
    assert got["slack"][0]["text"].startswith("✅ RESOLVED")

    # after the re-notify interval: one reminder per open finding
    clock.ms += 31 * 60_000
    alerter.evaluate()
    got = receiver.take()
    assert sorted(m["reason"] for m in got["hook"]) == ["reminder"] * 3

    # out of the lookback window: resolved as aged out
    clock.ms += 7 * 3_600_000
    alerter.evaluate()
    got = receiver.take()
    assert sorted((m["status"], m["reason"]) for m in got["hook"]) == [("resolved", "aged_out")] * 3
    assert alerter.evaluate().sent == [] and receiver.take() == {}

    assert SECRET not in caplog.text and SECRET not in (tmp_path / "state.json").read_text()


def test_failed_delivery_is_retried_for_that_channel_only(
    store: Storage, receiver: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(T0 + 60_000)
    alerter = Alerter.from_storage(store, settings(receiver, tmp_path, min_severity="critical"), clock=clock)
    receiver.status["teams"] = 500
    report = alerter.evaluate()
    assert report.findings == 2 and [c for c, _ in report.failed] == ["teams", "teams"]
    assert "teams webhook answered HTTP 500" in report.failed[0][1] and SECRET not in caplog.text
    got = receiver.take()
    assert len(got["slack"]) == len(got["hook"]) == 2 and "teams" not in got
    receiver.status.clear()
    clock.ms += 60_000
    alerter.evaluate()
    got = receiver.take()
    assert set(got) == {"teams"} and len(got["teams"]) == 2


def test_state_survives_a_restart(store: Storage, receiver: Receiver, tmp_path: Path) -> None:
    cfg = settings(receiver, tmp_path, min_severity="critical")
    Alerter.from_storage(store, cfg, clock=Clock(T0 + 60_000)).evaluate()
    assert len(receiver.take()["hook"]) == 2
    restarted = Alerter.from_storage(store, cfg, clock=Clock(T0 + 120_000))
    assert restarted.evaluate().sent == [] and receiver.take() == {}
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["version"] == 1 and len(state["open"]) == 2


def test_needs_a_channel_and_readable_state(store: Storage, tmp_path: Path) -> None:
    with pytest.raises(AlerterError, match="no alert channel configured"):
        Alerter.from_storage(store, AlertSettings(state_path=tmp_path / "s.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(AlerterError, match="cannot read alerter state"):
        FileState(tmp_path / "bad.json").load()
    assert MemoryState().load() == {}


def test_runs_in_a_background_thread(store: Storage, receiver: Receiver, tmp_path: Path) -> None:
    """The collector embeds the alerter (chDB is opened by one process): start() and stop()."""
    alerter = Alerter.from_storage(
        store,
        settings(receiver, tmp_path, interval_seconds=3600, min_severity="critical"),
        state=MemoryState(),
        clock=Clock(T0 + 60_000),
    )
    metrics = serve_metrics(alerter, 0, host="127.0.0.1")
    base = f"http://127.0.0.1:{metrics.server_address[1]}"
    try:
        thread = alerter.start()
        wait_until(lambda: alerter.cycles >= 1, timeout=60, what="the alerter's first cycle")
        alerter.stop(timeout=30)
        assert not thread.is_alive()
        assert len(receiver.take()["hook"]) == 2  # the first cycle ran before the wait
        with urllib.request.urlopen(base + "/metrics", timeout=30) as response:  # noqa: S310 - 127.0.0.1
            text = response.read().decode()
        assert "sparktap_alerter_cycles_total 1.0" in text and "sparktap_alerter_findings 2.0" in text
        assert 'sparktap_alerter_notifications_total{channel="webhook",status="firing"} 2.0' in text
        with urllib.request.urlopen(base + "/healthz", timeout=30) as response:  # noqa: S310 - 127.0.0.1
            assert response.status == 200 and json.loads(response.read())["cycles"] == 1
    finally:
        metrics.shutdown()
        metrics.server_close()


def test_event_driven_pass_sends_and_resolves_only_for_the_applications_named(
    store: Storage, receiver: Receiver, tmp_path: Path
) -> None:
    # chDB opens one directory per process: another database of the module's store
    target = StorageTarget(kind="chdb", path=store.path, database="events")  # type: ignore[attr-defined]
    with open_storage(target) as storage:
        storage.ensure_schema()
        load(storage, [samples.skewed_join(), samples.running_failures(), samples.balanced()])
        alerter = Alerter.from_storage(storage, settings(receiver, tmp_path), clock=Clock(T0 + 60_000))

        running = alerter.evaluate_apps({("prod-eu", "app-running")})
        got = receiver.take()
        assert running.findings == 1 and {c: [m["key"] for m in got[c]] for c in ("hook",)} == {
            "hook": ["task_failures|prod-eu|app-running|1|stage=3.0"]
        }
        assert len(got["slack"]) == len(got["teams"]) == 1
        # a pair (cluster, app) is exact: the same application id on another cluster is not evaluated
        assert alerter.evaluate_apps({("staging", "app-skewed-join")}).findings == 0 and receiver.take() == {}

        skewed = alerter.evaluate_apps({("prod-eu", "app-skewed-join"), ("prod-eu", "app-balanced")})
        got = receiver.take()
        assert skewed.findings == 3 and {m["key"] for m in got["hook"]} == FIRING - {
            "task_failures|prod-eu|app-running|1|stage=3.0"
        }
        assert alerter.evaluate().sent == [] and receiver.take() == {}  # the full pass: nothing new

        # the running stage recovers; a pass over another application does not resolve it, its own pass does
        more = sample_app.App("app-running", "long-runner")
        more._seq = iter(range(10_000, 20_000))
        more.tasks(3, T0 + 50_000, [1_000] * 70)
        load(storage, [more])
        assert alerter.evaluate_apps({("prod-eu", "app-skewed-join")}).sent == [] and receiver.take() == {}
        alerter.evaluate_apps({("prod-eu", "app-running")})
        got = receiver.take()
        assert [(m["status"], m["reason"], m["key"]) for m in got["hook"]] == [
            ("resolved", "cleared", "task_failures|prod-eu|app-running|1|stage=3.0")
        ]
        assert alerter.event_cycles == 5


def test_run_loop_evaluates_inserted_applications_at_once(store: Storage, receiver: Receiver, tmp_path: Path) -> None:
    """The loop's first full pass finds nothing; applications named by ``inserted`` are evaluated without waiting
    for the next full pass (an hour away)."""
    target = StorageTarget(kind="chdb", path=store.path, database="loop")  # type: ignore[attr-defined]
    with open_storage(target) as storage:
        storage.ensure_schema()
        alerter = Alerter.from_storage(
            storage, settings(receiver, tmp_path, interval_seconds=3600), clock=Clock(T0 + 60_000)
        )
        alerter.start()
        try:
            wait_until(lambda: alerter.cycles >= 1, 30, "the first full pass")
            load(storage, [samples.skewed_join()])
            alerter.inserted({("prod-eu", "app-skewed-join")})
            wait_until(lambda: len(receiver.messages.get("hook", [])) == 3, 30, "3 webhook messages")
            assert alerter.event_cycles == 1 and alerter.cycles == 2
        finally:
            alerter.stop(30)


def test_insert_follower_names_the_applications_of_new_parts_on_a_server(server_storage: Storage) -> None:
    from sparktap.detection.follow import InsertFollower

    follower = InsertFollower(server_storage.query, server_storage.database)
    server_storage.ensure_schema()
    load(server_storage, [samples.balanced()])
    assert follower.poll() == set()  # the first poll only records where the tables are
    load(server_storage, [samples.skewed_join(), samples.gc_heavy()])
    assert follower.poll() == {("prod-eu", "app-skewed-join"), ("prod-eu", "app-gc")}
    assert follower.poll() == set()
    server_storage.command(f"OPTIMIZE TABLE {server_storage.qualified('stage_completed')} FINAL")
    assert follower.poll() == set()  # a merge makes a part of no new block: nothing new to evaluate
    load(server_storage, [samples.tiny_tasks()])
    assert follower.poll() == {("prod-eu", "app-tiny-tasks")}


def test_insert_follower_reads_again_a_new_part_merged_away_before_it_was_read(server_storage: Storage) -> None:
    """A new part listed by ``system.parts`` and merged before the follower read its applications gives no row: its
    blocks stay unseen, so the merged part is new at the next poll (its applications and those it merged with)."""
    from sparktap.detection.follow import InsertFollower

    merge_after_listing = False

    def query(sql: str) -> list[dict[str, Any]]:
        rows = server_storage.query(sql)
        if merge_after_listing and "system.parts" in sql:
            for table in sorted({str(r["table"]) for r in rows}):
                server_storage.command(f"OPTIMIZE TABLE {server_storage.qualified(table)} FINAL")
        return rows

    follower = InsertFollower(query, server_storage.database)
    server_storage.ensure_schema()
    load(server_storage, [samples.balanced()])
    assert follower.poll() == set()
    load(server_storage, [samples.skewed_join()])
    merge_after_listing = True
    assert follower.poll() == set()  # listed, then merged away before it was read
    merge_after_listing = False
    assert follower.poll() == {("prod-eu", "app-balanced"), ("prod-eu", "app-skewed-join")}
    assert follower.poll() == set()


def test_a_cluster_the_server_does_not_know_is_a_clear_error_for_the_follower(server_storage: Storage) -> None:
    from sparktap.detection.follow import follower_for
    from sparktap.store import ServerStorage, StorageError

    server_storage.ensure_schema()
    storage = ServerStorage(server_storage.target.model_copy(update={"cluster": "no_such_cluster"}))
    try:
        with pytest.raises(StorageError) as raised:
            follower_for(storage)
    finally:
        storage.close()
    assert str(raised.value).startswith('ClickHouse has no cluster cluster="no_such_cluster" url="clickhouse://')
    assert "check remote_servers on the servers" in str(raised.value)
    assert server_storage.target.password.get_secret_value() not in str(raised.value)


def test_a_macro_in_an_application_id_breaks_neither_the_pass_nor_the_loop(
    store: Storage, receiver: Receiver, tmp_path: Path
) -> None:
    """An application id ``$__x`` used to make macro expansion raise MacroError, which ended the alerter's thread
    (and nothing was sent again): now it is data, its pass sends its findings, and the next application's too."""
    target = StorageTarget(kind="chdb", path=store.path, database="macro")  # type: ignore[attr-defined]
    with open_storage(target) as storage:
        storage.ensure_schema()
        alerter = Alerter.from_storage(
            storage,
            settings(receiver, tmp_path, interval_seconds=3600, min_severity="critical"),
            clock=Clock(T0 + 60_000),
        )
        thread = alerter.start()
        try:
            wait_until(lambda: alerter.cycles >= 1, 30, "the first full pass")
            # rows written before the collector refused such ids (or through another writer): the alerter's own
            # defence is under test here, so they go in as rows, past the event model's identifier check
            builder = RowBuilder(storage.version())
            events = ({**e.model_dump(mode="json"), "app_id": "$__x"} for e in samples.skewed_join("app-x").events)
            for table, rows in builder.group(events).items():
                storage.insert(table, rows)
            load(storage, [samples.skewed_join(app_id="app-next")])
            alerter.inserted({("prod-eu", "$__x")})
            wait_until(lambda: alerter.event_cycles >= 1, 30, "the pass over $__x")
            alerter.inserted({("prod-eu", "app-next")})
            wait_until(lambda: len(receiver.messages.get("hook", [])) == 4, 30, "4 webhook messages")
            keys = [m["key"] for m in receiver.messages["hook"]]
            assert sorted(keys[:2]) == ["data_skew|prod-eu|$__x|1|stage=1.0", "task_time_skew|prod-eu|$__x|1|stage=1.0"]
            assert sorted(keys[2:]) == [
                "data_skew|prod-eu|app-next|1|stage=1.0",
                "task_time_skew|prod-eu|app-next|1|stage=1.0",
            ]
            assert alerter.last_report is not None and alerter.last_report.error is None
            assert thread.is_alive() and alerter.liveness() == "" and alerter.healthy()[0]
        finally:
            alerter.stop(30)


def test_a_429_is_sent_again_once_after_its_retry_after(store: Storage, receiver: Receiver, tmp_path: Path) -> None:
    receiver.answers["hook"] = [(429, "2")]
    alerts = AlertSettings(
        webhook_url=SecretStr(receiver.url("hook")),
        min_severity="critical",
        lookback_seconds=6 * 3600,
        state_path=tmp_path / "state.json",
    )
    alerter = Alerter.from_storage(store, alerts, state=MemoryState(), clock=Clock(T0 + 60_000))
    report = alerter.evaluate_apps({("prod-eu", "app-skewed-join")})
    attempts = [(at, code) for channel, at, code in receiver.attempts if channel == "hook"]
    assert [code for _, code in attempts] == [429, 200, 200]
    assert attempts[1][0] - attempts[0][0] >= 2.0
    assert sorted(m["key"] for m in receiver.messages["hook"]) == [
        "data_skew|prod-eu|app-skewed-join|1|stage=1.0",
        "task_time_skew|prod-eu|app-skewed-join|1|stage=1.0",
    ]
    assert len(report.sent) == 2 and report.failed == []


def test_a_stuck_loop_fails_healthz_with_its_reason(store: Storage, receiver: Receiver, tmp_path: Path) -> None:
    """The loop's heartbeat: a delivery that hangs (a webhook that never answers) makes /healthz 503 after
    ``stall_seconds``, saying why; the loop comes round again once the webhook answers."""
    receiver.hold_after["hook"] = 0
    alerts = settings(
        receiver, tmp_path, interval_seconds=3600, min_severity="critical", stall_seconds=1, send_timeout_seconds=60
    )
    alerter = Alerter.from_storage(store, alerts, state=MemoryState(), clock=Clock(T0 + 60_000))
    endpoints = serve_metrics(alerter, 0, host="127.0.0.1")
    try:
        alerter.start()
        wait_until(lambda: receiver.held >= 1 and alerter.liveness() != "", 60, "a stalled alerter loop")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{endpoints.port}/healthz", timeout=30)  # noqa: S310
        assert refused.value.code == 503
        assert "the alerter loop has not come round for" in json.loads(refused.value.read())["reason"]
        receiver.release.set()
        wait_until(lambda: alerter.liveness() == "", 60, "the loop coming round again")
    finally:
        receiver.release.set()
        alerter.stop(60)
        endpoints.close()


def test_abort_stops_mid_cycle_and_keeps_what_was_delivered(store: Storage, receiver: Receiver, tmp_path: Path) -> None:
    """What SIGTERM of `sparktap alert` does: no further message after the one in flight, and the state holds every
    delivered one, so the next run sends exactly the others."""
    alerts = AlertSettings(
        webhook_url=SecretStr(receiver.url("hook")),
        min_severity="warning",
        lookback_seconds=6 * 3600,
        state_path=tmp_path / "state.json",
    )
    receiver.hold_after["hook"] = 1
    target = StorageTarget(kind="chdb", path=store.path, database="abort")  # type: ignore[attr-defined]
    storage = open_storage(target)
    storage.ensure_schema()
    load(storage, [samples.skewed_join(), samples.running_failures()])  # the 4 findings of FIRING
    alerter = Alerter.from_storage(storage, alerts, clock=Clock(T0 + 60_000))
    reports: list[Any] = []
    cycle = threading.Thread(target=lambda: reports.append(alerter.evaluate()), daemon=True)
    cycle.start()
    wait_until(lambda: receiver.held >= 1, 60, "the second message in flight")
    alerter.abort()
    receiver.release.set()
    cycle.join(60)
    (report,) = reports
    (first,) = [m["key"] for m in receiver.take()["hook"]]
    assert [code for channel, _, code in receiver.attempts if channel == "hook"] == [200, 503]
    assert report.findings == 4 and len(report.sent) == 1 and len(report.failed) == 1
    saved = json.loads((tmp_path / "state.json").read_text())["open"]
    assert [key for key, entry in saved.items() if entry["sent"]] == [first]

    receiver.hold_after.clear()
    again = Alerter.from_storage(storage, alerts, clock=Clock(T0 + 60_000)).evaluate()
    storage.close()
    rest = [m["key"] for m in receiver.take()["hook"]]
    assert len(again.sent) == 3 and sorted([first, *rest]) == sorted(FIRING)


def test_a_webhook_that_times_out_holds_the_cycle_only_until_its_deadline(
    store: Storage, receiver: Receiver, tmp_path: Path
) -> None:
    """Serial sends with a 10 s timeout each used to hold the loop for the whole cycle: past
    ``cycle_deadline_seconds`` no further message starts, and those wait for the next evaluation."""
    alerts = AlertSettings(
        webhook_url=SecretStr(receiver.url("hook")),
        min_severity="critical",
        lookback_seconds=6 * 3600,
        state_path=tmp_path / "state.json",
        send_timeout_seconds=1,
        cycle_deadline_seconds=0.5,
    )
    receiver.hold_after["hook"] = 0  # never answers (until released)
    alerter = Alerter.from_storage(store, alerts, state=MemoryState(), clock=Clock(T0 + 60_000))
    report = alerter.evaluate_apps({("prod-eu", "app-skewed-join")})
    receiver.release.set()
    assert report.findings == 2 and report.sent == [] and len(report.failed) == 1  # the second never started
    assert "cannot reach the webhook webhook" in report.failed[0][1]

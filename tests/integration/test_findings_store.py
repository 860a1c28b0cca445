"""The stored findings (schemas/findings_table.py, detection/finding_store.py) on chDB and clickhouse-server 18.16:
after an alerter pass the overview findings panels, which read only the findings table, show exactly what the detection
query gives over the same range; a re-evaluation replaces a finding instead of adding one, a finding no longer
returned is marked resolved, and a failed write never stops the alerts."""

# ruff: noqa: S608 - test SQL from constants

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pydantic import SecretStr

from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import overview, panel_queries
from sparktap.detection.alerter import Alerter, MemoryState
from sparktap.detection.findings import Detector
from sparktap.detection.macros import expand, interpolate
from sparktap.detection.query import rule_query
from sparktap.detection.settings import AlertSettings
from sparktap.detection.sql import SqlContext
from sparktap.detection.thresholds import Thresholds
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.fixtures.receiver import Receiver
from tests.support import detection_samples as samples
from tests.support import sample_app
from tests.support.detection import Clock, load

pytestmark = pytest.mark.integration

NOW = sample_app.BASE_TIME_MS + 60_000
LOOKBACK_S = 6 * 3600
RANGE = (NOW - LOOKBACK_S * 1000, NOW + 60_000)
"""the alerter's window, as a dashboard range"""
DEFAULT = Thresholds()
NO_RUNNING = Thresholds().model_copy(update={"running": Thresholds().running.model_copy(update={"enabled": False})})


def _alerter(storage: Storage, receiver: Receiver, thresholds: Thresholds = DEFAULT) -> Alerter:
    settings = AlertSettings(
        webhook_url=SecretStr(receiver.url("hook")),
        lookback_seconds=LOOKBACK_S,
        min_severity="critical",  # the warnings are stored all the same
        state_path=Path("/nonexistent/unused.json"),
        thresholds=thresholds,
    )
    return Alerter.from_storage(storage, settings, state=MemoryState(), clock=Clock(NOW))


def _panels(storage: Storage) -> dict[str, str]:
    cfg = GrafanaConfig(database=storage.database, clickhouse_version=storage.version())
    wanted = ("Critical findings", "Warning findings", "Info findings", "Findings over time", "Open findings")
    return {title: sql for title, sql in panel_queries(overview(cfg)) if title in wanted}


def _run(storage: Storage, sql: str) -> list[dict[str, object]]:
    return storage.query(expand(interpolate(sql, {"cluster": ["prod-eu", "prod-us"]}), *RANGE, interval_ms=60_000))


def _assert_panels_equal_the_detection_query(storage: Storage, thresholds: Thresholds) -> int:
    """Every findings panel of the overview over RANGE against ``rule_query`` over RANGE; returns the findings."""
    ctx = SqlContext(storage.database, storage.version())
    expected = storage.query(expand(rule_query(None, thresholds, ctx, "info"), *RANGE))
    assert expected, "the scenarios give findings"
    panels = _panels(storage)
    assert len(panels) == 5
    for sql in panels.values():  # the stored findings only: neither the detection query nor any event table
        assert "`findings_dedup`" in sql and "stage_completed" not in sql and "task_end" not in sql, sql
    for severity in ("critical", "warning", "info"):
        count = _run(storage, panels[f"{severity.capitalize()} findings"])[0]["findings"]
        assert count == sum(1 for r in expected if r["severity"] == severity), severity
    over_time: Counter[str] = Counter()
    for row in _run(storage, panels["Findings over time"]):
        over_time[str(row["severity"])] += int(str(row["findings"]))
    assert over_time == Counter(str(r["severity"]) for r in expected if not r["running"])

    def key(r: dict[str, object]) -> tuple[object, ...]:
        return (r["rule"], r["severity"], r["cluster"], r["app_id"], r["explanation"], r["suggested_fix"])

    table = _run(storage, panels["Open findings"])
    assert sorted(map(key, table)) == sorted(map(key, expected))
    assert [key(r) for r in table][:3] == [key(r) for r in expected][:3]  # the most time lost first, as the query
    assert Counter(str(r["stage_state"]) for r in table) == Counter(
        "running" if r["running"] else "finished" for r in expected
    )
    return len(expected)


def test_the_panels_read_what_the_alerter_stored(
    storage: Storage, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    storage.ensure_schema()
    load(storage, [samples.skewed_join(), samples.running_failures(), samples.tiny_tasks(), samples.balanced()])
    alerter = _alerter(storage, receiver)
    report = alerter.evaluate()
    assert report.error is None and report.sent  # the alerts went out (critical)
    found = _assert_panels_equal_the_detection_query(storage, Thresholds())
    assert len(report.sent) < found  # the warnings were stored, not sent
    stored = "SELECT count() AS n FROM findings"
    assert int(storage.query(stored)[0]["n"]) == found

    # the same process again: nothing changed, nothing written; a restarted alerter writes a newer version of each
    alerter.clock = Clock(NOW + 60_000)  # type: ignore[assignment]
    alerter.evaluate()
    assert int(storage.query(stored)[0]["n"]) == found
    _alerter(storage, receiver).evaluate()
    assert int(storage.query(stored)[0]["n"]) == 2 * found  # until merged: the dedup view shows one of each
    storage.command("OPTIMIZE TABLE findings FINAL")
    assert int(storage.query(stored)[0]["n"]) == found

    # the running stages' findings no longer returned (running evaluation off): marked resolved, not shown
    running = int(storage.query("SELECT count() AS n FROM findings_dedup WHERE running = 1")[0]["n"])
    assert running > 0
    _alerter(storage, receiver, NO_RUNNING).evaluate()
    shown = _assert_panels_equal_the_detection_query(storage, NO_RUNNING)
    resolved = "SELECT count() AS n FROM findings_dedup WHERE resolved = 1"
    assert int(storage.query(resolved)[0]["n"]) == found - shown >= running

    if storage.kind != "chdb":
        return  # the failure below is the alerter's, whatever the engine: once is enough (suite time)
    # the table gone: the alerts still go out, one warning whatever the passes, and the next pass writes again
    caplog.set_level(logging.INFO, logger="sparktap.detection.alerter")
    storage.command("DROP TABLE findings")
    receiver.take()
    failing = _alerter(storage, receiver)
    assert failing.evaluate().error is None
    assert failing.evaluate_apps({("prod-eu", "app-skewed-join")}).error is None
    assert len(receiver.take()["hook"]) == len(report.sent)
    warnings = [r.getMessage() for r in caplog.records if "cannot store the findings" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert SecretStr(receiver.url("hook")).get_secret_value() not in caplog.text
    storage.ensure_schema()  # the table back
    failing.evaluate()
    assert "alerter: storing the findings again" in caplog.text
    assert int(storage.query(stored)[0]["n"]) == found


def test_the_backfill_stores_the_findings_of_imported_history(tmp_path: Path) -> None:
    """``sparktap findings --store``: no alerter ran over these events (an import, a fresh install)."""
    directory = tmp_path / "chdb"
    target = StorageTarget(kind="chdb", path=directory, database="sparktap")
    with open_storage(target) as storage:
        storage.ensure_schema()
        load(storage, [samples.skewed_join(), samples.running_failures(), samples.tiny_tasks(), samples.balanced()])
    done = subprocess.run(
        [sys.executable, "-m", "sparktap", "findings", "--store", "--since", "3d"],
        env={**os.environ, "SPARKTAP_CLICKHOUSE__URL": f"chdb://{directory}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with open_storage(target) as storage:
        expected = Detector(storage.query, database="sparktap").findings(*RANGE)
        stored = storage.query("SELECT finding_key, severity, explanation FROM findings_dedup ORDER BY finding_key")
        assert stored == sorted(
            ({"finding_key": f.key, "severity": f.severity, "explanation": f.explanation} for f in expected),
            key=lambda r: r["finding_key"],
        )
    assert f"stored {len(expected)} finding(s) of the last 3d in " in done.stdout, done.stdout

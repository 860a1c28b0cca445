"""A recurring job is an identity, not just a name (issue 39): on a real fleet thousands of unrelated applications share
a shell's or a notebook's default name ("Spark shell", "PySparkShell", "Databricks Shell" …), and comparing them by
name raised false run-over-run regressions. On real ClickHouse (chDB and clickhouse-server 18.16): 200 such
applications on two clusters, whose every last run would regress against strangers, raise nothing; a named nightly
job that slows down beside them still does, in the full pass and in the event-driven pass alike."""

from __future__ import annotations

import pytest

from sparktap.detection import Detector, Scope
from sparktap.detection.history import history_app_ids, shared_name
from sparktap.detection.macros import expand
from sparktap.detection.sql import SqlContext
from sparktap.store import Storage
from tests.support import cost_samples as samples
from tests.support.detection import load

pytestmark = pytest.mark.integration

WINDOW = (samples.T0 - 6 * samples.DAY, samples.T0)
RULES = ("run_regression", "memory_overprovisioned")


def test_shared_default_names_are_no_recurring_job_and_a_named_job_is(storage: Storage) -> None:
    storage.ensure_schema()
    apps = samples.fleet_of_shells()
    everything = samples.App("fleet")  # one batch per table for the whole fleet, not one per application
    everything.events = [event for app in apps for event in app.events]
    load(storage, [everything])
    detector = Detector(storage.query, database=storage.database, version=storage.version(), rules=RULES)
    found = detector.findings(*WINDOW)
    assert [(f.app_id, f.rule) for f in found] == [("app-nightly-slow", "run_regression")]
    assert (found[0].evidence["runs"], found[0].evidence["median_duration_ms"]) == (4, 100_000)
    for app in ("app-nightly-slow", "app-shell-last-0"):
        scoped = Detector(
            storage.query,
            database=storage.database,
            version=storage.version(),
            rules=RULES,
            scope=Scope.of(apps=[app]),
        )
        assert scoped.findings(*WINDOW) == [f for f in found if f.app_id == app], app
    # the event-driven pass reads no stranger's run for a shared name: the history of the shell's last run is itself
    ctx = SqlContext(storage.database, storage.version(), Scope.of(apps=["app-shell-last-0"]), history_runs=10)
    assert storage.query(expand(history_app_ids(ctx, 30, 10), *WINDOW)) == []


@pytest.mark.parametrize(
    ("name", "shared"),
    [
        ("Spark shell", True),
        ("PySparkShell", True),
        ("pyspark-shell", True),
        ("Databricks Shell", True),
        ("Databricks Shell 2", True),
        ("livy-session-4", True),
        ("SparkSQL::10.0.0.7", True),
        ("Untitled", True),
        ("nightly-etl", False),
        ("Spark shell nightly", False),
        ("my PySparkShell job", False),
        ("livy-sessions-report", False),
    ],
)
def test_which_names_are_shared(chdb_storage: Storage, name: str, shared: bool) -> None:
    rows = chdb_storage.query(f"SELECT toUInt8({shared_name(repr(name))}) AS shared")  # noqa: S608 - test literal
    assert rows == [{"shared": int(shared)}]

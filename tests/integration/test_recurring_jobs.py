"""A recurring job is an identity, not just a name (issue 39): on a real fleet thousands of unrelated applications share
a shell's or a notebook's default name ("Spark shell", "PySparkShell", "Databricks Shell" …), and comparing them by
name raised false run-over-run regressions. On real ClickHouse (chDB and clickhouse-server 18.16): 200 such
applications on two clusters, whose every last run would regress against strangers, raise nothing; a named nightly
job that slows down beside them still does, in the full pass and in the event-driven pass alike. A job key
(``spark.sparktap.job``, a scheduler's job id) makes a job of a shared name, tells apart two jobs of one name, and is
never compared across clusters."""

from __future__ import annotations

import pytest

from sparktap.detection import Detector, Scope, Thresholds
from sparktap.detection.history import history_app_ids, job_key, shared_name
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


def test_a_job_key_makes_the_recurring_job(storage: Storage) -> None:
    storage.ensure_schema()
    everything = samples.App("keyed")
    everything.events = [event for app in samples.keyed_jobs() for event in app.events]
    load(storage, [everything])
    detector = Detector(storage.query, database=storage.database, version=storage.version(), rules=RULES)
    found = detector.findings(*WINDOW)
    assert sorted((f.app_id, f.rule) for f in found) == [
        ("app-dbx-slow", "run_regression"),
        ("app-orders-slow", "run_regression"),
    ]
    for f in found:  # its own 4 earlier runs of 100 s: none from prod-us (500 s), none of another job
        assert (f.cluster, f.evidence["runs"], f.evidence["median_duration_ms"]) == ("prod-eu", 4, 100_000), f.app_id
    for app in ("app-orders-slow", "app-etl-big-now"):  # the event-driven pass: the same
        scoped = Detector(
            storage.query,
            database=storage.database,
            version=storage.version(),
            rules=RULES,
            scope=Scope.of(apps=[app]),
        )
        assert scoped.findings(*WINDOW) == [f for f in found if f.app_id == app], app
    # keyed by name alone, the two Airflow tasks named etl are one job: the last run is 3x the name's median
    by_name = Detector(
        storage.query,
        database=storage.database,
        version=storage.version(),
        rules=RULES,
        thresholds=Thresholds(run_regression={"job_key": ["app_name"]}),
    )
    assert "app-etl-big-now" in {f.app_id for f in by_name.findings(*WINDOW) if f.rule == "run_regression"}


@pytest.mark.parametrize(
    ("name", "properties", "tags", "parts", "key"),
    [
        ("Spark shell", {}, {}, ("app_name", "schedule"), ""),
        ("Spark shell", {"spark.sparktap.job": "orders"}, {}, ("app_name", "schedule"), "job=orders"),
        ("Spark shell", {"spark.sparktap.job": "orders"}, {"job": "billing"}, ("app_name",), "job=billing"),
        ("Databricks Shell", {"spark.databricks.job.id": "7"}, {}, ("app_name", "schedule"),
         "app_name=Databricks Shell|schedule=7"),
        ("etl", {"spark.openlineage.parentJobName": "daily.load"}, {}, ("app_name", "user", "schedule"),
         "app_name=etl|user=carol|schedule=daily.load"),
        ("etl", {}, {}, ("app_name", "schedule"), "app_name=etl|schedule="),
    ],
)  # fmt: skip
def test_the_job_key(
    chdb_storage: Storage,
    name: str,
    properties: dict[str, str],
    tags: dict[str, str],
    parts: tuple[str, ...],
    key: str,
) -> None:
    def as_map(values: dict[str, str]) -> str:
        pairs = ", ".join(f"{k!r}, {v!r}" for k, v in values.items())
        return f"CAST(map({pairs}) AS Map(String, String))" if values else "CAST(map() AS Map(String, String))"

    ctx = SqlContext(chdb_storage.database, chdb_storage.version())
    row = f"SELECT {name!r} AS app_name, 'carol' AS user, {as_map(properties)} AS properties, {as_map(tags)} AS tags"
    rows = chdb_storage.query(f"SELECT {job_key(ctx, parts)} AS key FROM ({row})")  # noqa: S608 - test literals
    assert rows == [{"key": key}]

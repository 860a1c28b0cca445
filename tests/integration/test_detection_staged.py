"""The staged event-driven pass (issue 27): the Detector computes the relations of a pass scoped to applications into
temporary tables of the session, then runs the rules over them (``sql.Staging``). On real ClickHouse (chDB and
clickhouse-server 18.16), over a mix of every rule's applications (stage, AQE, plan, streaming, utilisation, memory
and run-over-run history): exactly the findings of the single query, in the same order; every temporary table
dropped; and a query function without a session falls back to the single query with the same findings."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from sparktap.detection import Detector, Scope
from sparktap.store import Storage, open_storage
from tests.support import cost_samples, detection_samples, plan_samples, sample_app
from tests.support.detection import load

pytestmark = pytest.mark.integration

WINDOW = (cost_samples.T0 - 6 * cost_samples.DAY, sample_app.BASE_TIME_MS + 3_600_000)
SCOPES = (  # every application of the mix at once, and passes over a few (as the alerter runs after an insert)
    (),
    ("app-skewed-join", "app-explode", "app-plans", "app-stream-behind", "app-sync-slow", "app-overprov-2"),
    ("app-running", "app-idle", "app-failures", "app-aqe-tiny"),
)
PASSES = {
    "chdb": ((SCOPES[0], True), (SCOPES[0], False)),
    "clickhouse": ((SCOPES[1], True),),  # 18.16 analyses the single query of a scoped pass in ~10-40 s
}
"""(scope, ``final_reads``: one node's tables, else the views as on a cluster, where no IN subquery is staged)"""
STAGED = (  # the temporary tables of a pass with every relation present, in the order they are computed
    "running_stages",
    "written_tables",  # small_files' table per SQL execution (detection/tables.py)
    "app_properties",
    "history_30_10",
    "stage_history",
    "stages",
    "stage_findings",
    "applications",
    "app_executors",
    "app_busy",
    "app_relation",
    "usage",
    "memory_peaks",
    "app_facts",
    "stage_durations",
    "job_stage_runs",
    "grown_stages",
    "aqe_read",
    "aqe_read_findings",
    "plan",
    "plan_findings",
    "streaming",
    "streaming_findings",
    "app",
    "app_findings",
    "found",
)


def recording(storage: Storage, log: list[str]) -> Callable[[str], list[dict[str, Any]]]:
    def query(sql: str) -> list[dict[str, Any]]:
        log.append(sql)
        return storage.query(sql)

    return query


def fallbacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The detector's warnings (the staged pass falling back to the single query). Only these: a module run before
    this one in the same worker may have left sparktap's loggers at INFO, so the schema's own lines are captured too."""
    return [r for r in caplog.records if r.name == "sparktap.detection.findings" and r.levelno >= logging.WARNING]


def test_the_staged_pass_finds_exactly_what_the_single_query_finds(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    storage.ensure_schema()
    load(storage, [*detection_samples.scenario_apps(), *plan_samples.plan_stream_apps(), *cost_samples.rule_apps()])
    every = sorted({str(r["app_id"]) for r in storage.query("SELECT DISTINCT app_id FROM app_start")})
    assert len(every) > 40
    statements: list[str] = []
    base = Detector(recording(storage, statements), database=storage.database, version=storage.version())
    fired: set[str] = set()
    by_reads: dict[bool, list[Any]] = {}
    seen: list[str] = []  # every pass's table names: the same few, pass after pass (18.16 slows with new names)
    for apps, final_reads in PASSES[storage.kind]:
        staged = replace(base, scope=Scope.of(apps=apps or every), final_reads=final_reads)
        statements.clear()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sparktap.detection.findings"):
            findings = staged.findings(*WINDOW)
        assert not fallbacks(caplog), apps  # the staged path ran, no fallback
        creates = [s.split("`")[1] for s in statements if s.startswith("CREATE TEMPORARY TABLE")]
        drops = [s.split("`")[1] for s in statements if s.startswith("DROP TEMPORARY TABLE")]
        names = [c.split("_", 4)[4] for c in creates]  # sparktap_pass_<id>_<n>_<name>
        if not apps:  # every input has rows: every relation staged; on a cluster none is an IN subquery
            assert names == [n for n in STAGED if final_reads or not n.startswith("history")]
        assert names[-1] == "found" and drops == creates[::-1], apps
        seen += creates
        single = replace(staged, staged=False).findings(*WINDOW)
        assert findings == single, (apps, final_reads)
        assert findings, apps
        # each findings table holds the tuples of the rules that fire alone (the probe ran first), or one when none
        for create in (s for s in statements if s.startswith("CREATE") and s.split("`")[1].endswith("_findings")):
            tuples = set(re.findall(r"tuple\('([a-z_]+)'", create))
            assert tuples <= {f.rule for f in findings} or len(tuples) == 1, (create.split("`")[1], tuples)
        by_reads[final_reads] = findings
        fired |= {f.rule for f in findings}
    # a full pass (no scope: the periodic alerter pass, the findings backfill) is staged too, with the same findings
    if storage.kind == "chdb":
        full = replace(base, final_reads=True)
        statements.clear()
        assert full.findings(*WINDOW) == by_reads[True]  # WINDOW is 7 days: over staged_full_ms, the single query
        assert not [s for s in statements if s.startswith("CREATE TEMPORARY TABLE")]
        statements.clear()
        found = replace(full, staged_full_ms=WINDOW[1] - WINDOW[0]).findings(*WINDOW)
        assert [s for s in statements if s.startswith("CREATE TEMPORARY TABLE")]
        assert found == replace(full, staged=False).findings(*WINDOW) == by_reads[True]
    if len(by_reads) == 2:  # one node's tables (FINAL, app_id as PREWHERE) and the views: the same findings
        assert by_reads[True] == by_reads[False]
    # a pass where no rule fires: no findings table filled, no attribution query, nothing found (as the single query)
    quiet = replace(base, scope=Scope.of(apps=["app-no-such-app"]), final_reads=True)
    statements.clear()
    assert quiet.findings(*WINDOW) == [] == replace(quiet, staged=False).findings(*WINDOW)
    assert not [s for s in statements if s.startswith("CREATE") and "_found" in s.split("`")[1]]
    assert {name.split("_", 3)[2] for name in seen} == {"0"}, seen  # sparktap_pass_0_<n>_<name>: slot 0 every time
    assert {"data_skew", "shuffle_blowup", "plan_misestimate", "streaming_saturated", "run_regression"} <= fired
    # the collector's /findings route (chDB: its query function adds a SETTINGS clause) scoped to applications
    if storage.kind == "chdb":
        from sparktap.detection.embedded import findings_route
        from sparktap.settings import Settings

        code, body = findings_route(Settings(), storage)({"app": list(SCOPES[2]), "since": ["7d"]})
        assert code == 200, body
        scope = Scope.of(apps=SCOPES[2])
        expected = replace(base, query=storage.query, scope=scope, final_reads=True, staged=False).findings(*WINDOW)
        assert sorted(f["key"] for f in body["findings"]) == sorted(f.key for f in expected)
        assert not fallbacks(caplog)
    # a query function without a session (a new connection per statement): the same findings, from the single query
    if storage.kind == "clickhouse":

        def sessionless(sql: str) -> list[dict[str, Any]]:
            with open_storage(storage.target) as once:
                return once.query(sql)

        lone = replace(base, query=sessionless, scope=Scope.of(apps=["app-failures"]), rules=("task_failures",))
        findings = lone.findings(*WINDOW)
        assert [f.rule for f in findings] == ["task_failures"] * 3
        assert findings == replace(lone, query=storage.query, staged=False).findings(*WINDOW)

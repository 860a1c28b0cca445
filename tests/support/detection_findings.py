"""What test_detection_sql.py (chDB) and test_detection_sql_server18.py (clickhouse-server 18.16) both check: the
findings expected of the scenarios of ``detection_samples.py``, two more applications (a running stage without its
submission, a skewed join without its AQE events) and the checks on their findings, and who ran each finding."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from sparktap.detection import Detector, Finding
from sparktap.store import Storage
from tests.support import detection_samples as samples
from tests.support import sample_app

T0 = sample_app.BASE_TIME_MS

EXPECTED = {
    ("app-skewed-join", 1, "task_time_skew", "critical"),
    ("app-skewed-join", 1, "data_skew", "critical"),
    ("app-skewed-join", 1, "skew_not_fixed", "warning"),
    ("app-tiny-tasks", 1, "small_partitions", "warning"),
    ("app-explode", 1, "shuffle_blowup", "warning"),
    ("app-tiny-files", 1, "small_files", "warning"),
    ("app-oversized", 1, "oversized_partition", "warning"),
    ("app-remote", 1, "remote_heavy_shuffle", "warning"),
    ("app-failures", 1, "task_failures", "info"),
    ("app-failures", 2, "task_failures", "warning"),
    ("app-failures", 3, "task_failures", "critical"),
    ("app-gc", 1, "gc_pressure", "critical"),
    ("app-aqe-tiny", None, "small_partitions", "warning"),
    ("app-skew-join-off", 1, "data_skew", "critical"),
    ("app-skew-join-off", 1, "skew_not_fixed", "warning"),
    ("app-running", 3, "task_failures", "warning"),
    ("app-row-skew", 1, "data_skew", "critical"),
    ("app-waves", 1, "task_time_skew", "warning"),
    ("app-blocks", 1, "shuffle_block_explosion", "warning"),
    ("app-running-waves", 1, "task_time_skew", "warning"),
    ("app-plans", None, "plan_misestimate", "critical"),
    ("app-plans", None, "codegen_off", "warning"),
    ("app-stream-behind", None, "streaming_saturated", "critical"),
    ("app-stream-state", None, "streaming_state_growth", "warning"),
}
SCENARIO_APPS = set(samples.PROBLEM_APPS) | set(samples.CONTROL_APPS)


def detector(storage: Storage, **kwargs: object) -> Detector:
    return Detector(storage.query, database=storage.database, version=storage.version(), **kwargs)  # type: ignore[arg-type]


def found(findings: Iterable[Finding], apps: set[str] = SCENARIO_APPS) -> set[tuple[str, int | None, str, str]]:
    return {(f.app_id, f.stage_id, f.rule, f.severity) for f in findings if f.app_id in apps}


def by(findings: list[Finding], app: str, rule: str, stage: int | None = 1) -> Finding:
    (match,) = [f for f in findings if (f.app_id, f.rule, f.stage_id) == (app, rule, stage)]
    return match


def running_without_submitted(app_id: str = "app-running-unsubmitted") -> sample_app.App:
    """A running application whose running stage has task rows but no ``stage_submitted`` (lost, or sent before
    the window): 30 finished tasks, 4 failed, as ``running_failures`` but without the submission."""
    app = sample_app.App(app_id, "long-runner").start()
    app.tasks(3, T0, [1_000] * 30, failed=4)
    return app


def assert_running_without_submitted(findings: list[Finding]) -> None:
    """Its task rows alone make it a running stage: found, unnamed and without a job (what the submission gives)."""
    f = by(findings, "app-running-unsubmitted", "task_failures", 3)
    assert (f.running, f.severity, f.job_id, f.stage_attempt, f.stage_name) == (True, "warning", None, 0, "")
    assert f.evidence == {
        "failed_tasks": 4,
        "attempted_tasks": 30,
        "ratio": pytest.approx(4 / 30),
        "time_lost_ms": 4 * 1_000,
    }
    assert [g.rule for g in findings if g.app_id == "app-running-unsubmitted"] == ["task_failures"]


def skew_without_aqe() -> sample_app.App:
    """The skewed join of ``skewed_join`` without its AQE events: the stage rules' ``aqe`` enrichment finds no row."""
    app = samples.skewed_join("app-skew-no-aqe")
    app.events = [e for e in app.events if not e.event_type.startswith("aqe_")]
    return app


def assert_attributed(findings: list[Finding]) -> None:
    """Every finding names who ran it (issue 26): the Connect job's user, session, operation and tags, the team tag
    of the application; the Spark user and no tags where the job is not a Connect one."""
    skewed = [f for f in findings if f.app_id == "app-skewed-join"]
    who = {(f.user, f.team, f.job_tags, f.session_id, f.operation_id) for f in skewed}
    assert who == {("bob", "payments", ("team-x", samples.CONNECT_TAG), "s-bob", "op-bob")}
    tiny = by(findings, "app-tiny-tasks", "small_partitions")
    assert (tiny.user, tiny.team, tiny.job_tags, tiny.session_id, tiny.operation_id) == ("etl", "", (), "", "")
    plan = [f for f in findings if f.app_id == "app-plans"]
    assert plan and {(f.user, f.session_id) for f in plan} == {("etl", "")}

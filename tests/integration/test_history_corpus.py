"""Real event logs of clusters we do not run (tests/corpus/SOURCES.md: Spark 2.2 to 3.5, YARN, standalone,
Databricks with Photon, Dataproc, EMR with four attempts, RAPIDS GPU, rolled, cut off, empty, malformed, not an event
log) imported by ``sparktap import`` and compared with Spark's own History Server on the same directory.

The History Server (the pyspark installation's, on 127.0.0.1) is the oracle: it lists exactly the application
attempts that were stored, and per attempt its jobs, the stage attempts that ran (complete or failed: a skipped stage
never ran, a pending one has not started), the task ends of all its stages (complete, failed and killed) and its SQL
executions equal the stored rows; an attempt is complete there exactly when its application end is stored. A file of
which it lists nothing is refused by the import with one line naming the file and the line that is not an event.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparktap.local.ports import wait_until
from sparktap.store import ServerStorage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.history import ROOT, HistoryServer, sparktap_import

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

CORPUS = ROOT / "tests" / "corpus" / "eventlogs"
NOT_EVENTS = {"driverlog": 1, "malformed_json_eventlog.zstd": 4}
"""the files that are no event log, and the line of each that is not a Spark event"""
PHOTON_APP = "app-20240919162642-0000"
"""nds_q88_photon_db_13_3.zstd: TPC-DS q88 on Databricks 13.3 with Photon"""
REST_TIMEOUT_S = 300
"""The History Server replays a log on the first request for its application: the Photon log (4,896 tasks, 3.4 MB
of zstd) took 40 s on a loaded 2-core machine."""


@dataclass
class Imported:
    storage: ServerStorage
    stdout: str
    stderr: str
    returncode: int

    def counts(self, table: str) -> dict[tuple[str, str], int]:
        rows = self.storage.query(
            f"SELECT app_id, app_attempt, count() AS n FROM {table}_dedup GROUP BY app_id, app_attempt"
        )
        return {(r["app_id"], r["app_attempt"]): int(r["n"]) for r in rows}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy (the History Server and the import read the same files; the checked-in ones stay untouched)."""
    copy = tmp_path_factory.mktemp("corpus") / "eventlogs"
    shutil.copytree(CORPUS, copy)
    return copy


@pytest.fixture(scope="module")
def imported(
    corpus: Path, clickhouse_server: ClickHouseServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Imported]:
    database = random_database("sparktap_corpus")
    checkpoint = tmp_path_factory.mktemp("corpus-import") / "checkpoint.json"
    # logs of 2021-2025: a retention that keeps them (the default 30 days refuses every row, and says so)
    url = clickhouse_server.url(database)
    run = sparktap_import(str(corpus), "--storage-url", url, "--checkpoint", str(checkpoint), "--cluster", "corpus",
                          "--retention-days", "20000")  # fmt: skip
    storage = ServerStorage(clickhouse_server.target(database), connect_timeout=5, send_receive_timeout=120)
    try:
        yield Imported(storage, run.stdout, run.stderr, run.returncode)
    finally:
        storage.close()
        drop_database(clickhouse_server, database)


@pytest.fixture(scope="module")
def history(corpus: Path, imported: Imported, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The History Server's view: (app id, attempt id or "") -> its listing, jobs, stages and SQL executions."""
    server = HistoryServer(corpus, tmp_path_factory.mktemp("corpus-hs"))

    def get(path: str) -> Any:
        url = f"http://127.0.0.1:{server.port}/api/v1/{path}"
        with urllib.request.urlopen(url, timeout=REST_TIMEOUT_S) as resp:  # noqa: S310 - our own server on 127.0.0.1
            return json.loads(resp.read())

    stored = set(imported.counts("app_start"))

    def listed() -> set[tuple[str, str]]:
        try:
            return {(a["id"], str(a_.get("attemptId") or "")) for a in get("applications") for a_ in a["attempts"]}
        except OSError:
            return set()

    try:
        # every attempt the import stored, or the deadline: the comparison below then names what is missing
        wait_until(lambda: stored <= listed(), 300, "the History Server to list the imported applications")
        view: dict[str, Any] = {}
        for app in get("applications"):
            for attempt in app["attempts"]:
                key = (app["id"], str(attempt.get("attemptId") or ""))
                base = f"applications/{app['id']}" + (f"/{key[1]}" if key[1] else "")
                view[key] = {
                    "completed": attempt["completed"],
                    "jobs": get(f"{base}/jobs"),
                    "stages": get(f"{base}/stages"),
                    "sql": get(f"{base}/sql?length=100000"),
                }
        yield view
    finally:
        server.close()


def test_the_import_stores_exactly_the_attempts_the_history_server_lists(
    imported: Imported, history: dict[str, Any]
) -> None:
    assert imported.returncode == 1, imported.stderr[-3000:]  # docs/import.md: 1 when a log stopped early
    assert sorted(imported.counts("app_start")) == sorted(history)
    assert len(history) == 19  # 16 applications, one of them with four attempts (SOURCES.md)


def test_each_attempt_has_the_history_servers_jobs_stages_tasks_and_sql(
    imported: Imported, history: dict[str, Any]
) -> None:
    tables = ("job_start", "stage_completed", "task_end", "sql_start", "app_end")
    stored = {t: imported.counts(t) for t in tables}
    mismatches = []
    for key, view in sorted(history.items()):
        ran = [s for s in view["stages"] if s["status"] in ("COMPLETE", "FAILED")]
        expected = {
            "job_start": len(view["jobs"]),
            "stage_completed": len(ran),
            "task_end": sum(s["numCompleteTasks"] + s["numFailedTasks"] + s["numKilledTasks"] for s in view["stages"]),
            "sql_start": len(view["sql"]),
            "app_end": int(view["completed"]),
        }
        got = {t: stored[t].get(key, 0) for t in tables}
        if got != expected:
            mismatches.append((key, {t: (got[t], expected[t]) for t in tables if got[t] != expected[t]}))
    assert mismatches == []  # (stored, History Server) per table that differs
    # and the corpus holds what SOURCES.md says: stages that failed, were skipped, still ran or had not started
    statuses = {s["status"] for view in history.values() for s in view["stages"]}
    assert {"COMPLETE", "FAILED", "SKIPPED", "ACTIVE", "PENDING"} <= statuses


def test_each_stage_attempt_has_the_history_servers_task_count(imported: Imported, history: dict[str, Any]) -> None:
    rows = imported.storage.query(
        "SELECT app_id, app_attempt, stage_id, stage_attempt, count() AS n FROM task_end_dedup "
        "GROUP BY app_id, app_attempt, stage_id, stage_attempt"
    )
    stored = {(r["app_id"], r["app_attempt"], int(r["stage_id"]), int(r["stage_attempt"])): int(r["n"]) for r in rows}
    expected = {
        (*key, s["stageId"], s["attemptId"]): s["numCompleteTasks"] + s["numFailedTasks"] + s["numKilledTasks"]
        for key, view in history.items()
        for s in view["stages"]
        if s["numCompleteTasks"] + s["numFailedTasks"] + s["numKilledTasks"] > 0
    }
    assert stored == expected


def test_a_file_that_is_no_event_log_is_refused_in_one_line_naming_it(
    imported: Imported, history: dict[str, Any]
) -> None:
    for name, line in NOT_EVENTS.items():
        said = [s for s in imported.stdout.splitlines() + imported.stderr.splitlines() if f'file="{name}"' in s]
        assert len(said) == 1, (name, imported.stdout[-2000:], imported.stderr[-2000:])
        assert re.search(rf"line {line} of file=\"{re.escape(name)}\" is not a Spark event", said[0]), said[0]


def _counted(value: str) -> int:
    """A sum metric as the History Server shows it: ``1,234`` (US grouping)."""
    return int(value.replace(",", ""))


def _operator(name: str) -> str:
    """An operator name as stored: trimmed, a URL's user part redacted (``abfss://container@account…``)."""
    return re.sub(r"://[^/@\s]+@", "://***@", name.strip())


def _job_starts_lost(imported: Imported, history: dict[str, Any]) -> set[tuple[str, str, int]]:
    """Executions whose log lost a job's start (a job end with no start, after the execution's first job):
    the History Server cannot tie that job's stages to the execution, while a metric's accumulator (what the listener
    reads, live and replayed) counted their rows too."""
    ends = imported.storage.query("SELECT app_id, app_attempt, job_id FROM job_end_dedup")
    starts = imported.storage.query("SELECT app_id, app_attempt, job_id FROM job_start_dedup")
    started = {(r["app_id"], r["app_attempt"], int(r["job_id"])) for r in starts}
    lost = [(r["app_id"], r["app_attempt"], int(r["job_id"])) for r in ends]
    lost = [k for k in lost if k not in started]
    out = set()
    for key, view in history.items():
        first_job = {
            min(jobs): int(e["id"])
            for e in view["sql"]
            if (jobs := e.get("successJobIds", []) + e.get("failedJobIds", []) + e.get("runningJobIds", []))
        }
        for app, attempt, job in lost:
            before = [first for first in first_job if first < job]
            if (app, attempt) == key and before:
                out.add((*key, first_job[max(before)]))  # the execution that ran the jobs before it
    return out


def test_plan_nodes_count_the_rows_the_history_server_shows(imported: Imported, history: dict[str, Any]) -> None:
    """The replay's sql_plan_stats (the recorded plan and its SQL metrics' values): per finished SQL execution whose
    stages ran once, the plan nodes that counted rows, as (operator, rows), are the ones the History Server shows, on
    every log, Photon's and RAPIDS' plans included (a metric that counted nothing: 0 here, not shown there)."""
    rows = imported.storage.query(
        "SELECT app_id, app_attempt, execution_id, nodes_operator AS ops, nodes_actual_rows AS actual "
        "FROM sql_plan_stats_dedup"
    )
    ours = {
        (r["app_id"], r["app_attempt"], int(r["execution_id"])): sorted(
            {(op.strip(), int(n)) for op, n in zip(r["ops"], r["actual"], strict=True) if int(n) > 0}
        )
        for r in rows
    }
    finished = {
        (*key, int(e["id"])): e
        for key, view in history.items()
        for e in view["sql"]
        if e["status"] in ("COMPLETED", "FAILED")
    }
    assert sorted(ours) == sorted(finished)  # one sql_plan_stats per finished execution
    lost = _job_starts_lost(imported, history)
    assert lost == {("application_1603128018386_7846", "", n) for n in (7, 15, 17, 23)}  # SOURCES.md: rolled
    theirs = {
        key: sorted(
            {
                (_operator(n["nodeName"]), _counted(m["value"]))
                for n in e["nodes"]
                for m in n["metrics"]
                if m["name"] in ("number of output rows", "output rows") and _counted(m["value"]) > 0  # RAPIDS
            }
        )
        for key, e in finished.items()
        if key not in lost
    }
    assert {k: ours[k] for k in theirs if ours[k] != theirs[k]} == {}
    photon = [k for k, nodes in ours.items() if any(op.startswith("Photon") for op, _ in nodes)]
    assert photon == [(PHOTON_APP, "", 26)]  # q88; the log's 26 other executions are the runtime's own commands
    (times,) = imported.storage.query(
        f"SELECT nodes_operator AS ops, nodes_time_ms AS ms FROM sql_plan_stats_dedup "
        f"WHERE app_id = '{PHOTON_APP}' AND execution_id = 26"
    )
    photon_ms = [int(ms) for op, ms in zip(times["ops"], times["ms"], strict=True) if op.startswith("Photon")]
    assert len(photon_ms) >= 40 and sum(photon_ms) > 0  # their own times: what the native-vs-JVM split adds up
    # the RAPIDS query that ran out of GPU memory: its Gpu* operators are there, their rows never counted (its tasks
    # failed: a failed task's metrics are not added up, neither here nor in the History Server)
    gpu = [ops for r in rows for ops in [r["ops"]] if any(op.startswith("Gpu") for op in ops)]
    assert len(gpu) == 1 and {"GpuScan", "GpuFilter"} <= {op.split(" ")[0] for op in gpu[0]}


def test_each_stages_sql_shuffle_metrics_equal_the_history_servers_shuffle(
    imported: Imported, history: dict[str, Any]
) -> None:
    """The shuffle a stage's operators report in their own SQL metrics (``sql_shuffle_*``, what the stage rules read
    where the tasks report none) equals the shuffle the History Server shows for the stage from its tasks, on every
    engine of the corpus (Spark 3, Photon, RAPIDS): there, no engine keeps its shuffle out of the task metrics. Stages
    with a failed or killed task are left out: their task metrics count the failed attempts, SQL metrics do not."""
    rows = imported.storage.query(
        "SELECT app_id, app_attempt, stage_id, stage_attempt, sql_shuffle_write_bytes AS w, "
        "sql_shuffle_read_bytes AS r FROM stage_completed_dedup "
        "WHERE isNotNull(sql_shuffle_write_bytes) OR isNotNull(sql_shuffle_read_bytes)"
    )
    stored = {
        (r["app_id"], r["app_attempt"], int(r["stage_id"]), int(r["stage_attempt"])): (
            int(r["w"] or 0),
            int(r["r"] or 0),
        )
        for r in rows
    }
    shown = {
        (*key, s["stageId"], s["attemptId"]): (s["shuffleWriteBytes"], s["shuffleReadBytes"])
        for key, view in history.items()
        for s in view["stages"]
        if s["status"] == "COMPLETE" and s["numFailedTasks"] + s["numKilledTasks"] == 0
    }
    compared = {k: v for k, v in stored.items() if k in shown}
    assert compared == {k: shown[k] for k in compared}
    photon = [v for (app, _, _, _), v in compared.items() if app == PHOTON_APP]
    assert (sum(w for w, _ in photon), sum(r for _, r in photon)) == (218_614, 402_796)
    apps = {k[0] for k in compared}
    assert PHOTON_APP in apps and len(apps) >= 5, apps


LATE_STAGES = {
    ("application_1603128018386_7846", "", 238, 0): 8,  # seven successes and a FetchFailed after the completion
    ("app-20250305192829-0000", "", 34, 0): 1,  # RAPIDS: a task killed once its stage had failed
}
"""The stage attempts of the corpus with task ends after their completion, and how many (read off the logs)."""


def test_task_ends_after_their_stage_completed_count_in_its_totals_as_in_the_history_server(
    imported: Imported, history: dict[str, Any]
) -> None:
    """A task end after its stage's completion is stored as late, and the stage rows the rules read add it to the
    stage's attempts, failures, run time and duration, which then equal the History Server's (its Resubmitted markers,
    which it counts as failed attempts, aside); the stage_completed figures alone fall short of it."""
    from sparktap.detection.macros import expand
    from sparktap.detection.sql import SqlContext
    from sparktap.detection.stage_rows import completed_stages

    rows = imported.storage.query(
        "SELECT app_id, app_attempt, stage_id, stage_attempt, count() AS n FROM task_end_dedup WHERE late "
        "GROUP BY app_id, app_attempt, stage_id, stage_attempt"
    )
    late = {(r["app_id"], r["app_attempt"], int(r["stage_id"]), int(r["stage_attempt"])): int(r["n"]) for r in rows}
    assert late == LATE_STAGES
    # and each stage counts its Resubmitted markers itself, as its task rows show them (none late)
    key = "app_id, app_attempt, stage_id, stage_attempt"
    counted = imported.storage.query(
        f"SELECT {key}, tasks_resubmitted AS n FROM stage_completed_dedup WHERE tasks_resubmitted > 0"  # noqa: S608
    )
    markers = imported.storage.query(
        f"SELECT {key}, count() AS n FROM task_end_dedup WHERE failure_class = 'Resubmitted' AND NOT late "  # noqa: S608
        f"GROUP BY {key}"
    )
    assert sorted(map(str, counted)) == sorted(map(str, markers)) and sum(int(r["n"]) for r in counted) >= 50
    ctx = SqlContext(imported.storage.database, imported.storage.version())
    relation = expand(completed_stages(ctx), 0, 4_102_444_800_000)
    for app_id, attempt, stage_id, stage_attempt in LATE_STAGES:
        where = f"app_id = '{app_id}' AND stage_id = {stage_id} AND stage_attempt = {stage_attempt}"
        (row,) = imported.storage.query(f"SELECT attempted, run_sum FROM ({relation}) WHERE {where}")  # noqa: S608
        (stage,) = imported.storage.query(f"SELECT run_time_ms_sum FROM stage_completed_dedup WHERE {where}")  # noqa: S608
        (markers,) = imported.storage.query(
            f"SELECT countIf(failure_class = 'Resubmitted') AS n FROM task_end_dedup WHERE {where}"  # noqa: S608
        )
        (shown,) = [
            s
            for s in history[(app_id, attempt)]["stages"]
            if (s["stageId"], s["attemptId"]) == (stage_id, stage_attempt)
        ]
        ran = shown["numCompleteTasks"] + shown["numFailedTasks"] + shown["numKilledTasks"]
        assert (row["attempted"], row["run_sum"]) == (ran - int(markers["n"]), shown["executorRunTime"])
        assert stage["run_time_ms_sum"] < shown["executorRunTime"]

"""Live equals imported: one application runs with the listener and with event logging; its imported events match
the live ones family by family and field by field (except the fields docs/import.md lists), and detection finds the
same on both."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparktap.local.ports import wait_until
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.history import eventlog_conf, sparktap_import
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import listener_settings, new_topic, read_all, read_app_events, start_session, stop_session
from tests.fixtures.spark import SparkSessions

pytestmark = pytest.mark.timeout(1200)  # one application with the listener and event logging, two imports

# ----------------------------------------------------------------------------------- live equals imported

NOT_FROM_A_LOG = {"listener_health"}
"""Families the log cannot give: the listener's own delivery health."""
PLAN_FROM_A_LOG = ("operator", "actual_rows", "time_ms", "shuffle_write_bytes", "shuffle_read_bytes", "spill_bytes",
                   "codegen_stage", "codegen_duration_ms")  # fmt: skip
"""What a sql_plan_stats node replayed from a log has (docs/import.md): the recorded plan and its SQL metrics, without
the optimizer's estimates and generated code; node ids are positions in the recorded plan, not SparkPlan ids."""
NOT_IN_LOG = {"seq", "emitted_at_ms"}
"""Fields that differ by nature: seq (live numbering also counts listener_health), the wall-clock send time."""
WALL_CLOCK_TIMED = {"aqe_plan_update", "aqe_shuffle_read", "streaming_query_end"}
"""Families whose event carries no time of its own: live stamps the wall clock, the import the last event time."""


HEARTBEAT_FED = {"executor_metrics"}
"""Families whose figures also come from executor heartbeats, which Spark does not log (docs/import.md): compared
without their peaks and update counts."""


def comparable(event: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in event.items() if k not in NOT_IN_LOG}
    if event["event_type"] == "sql_plan_stats":
        operators = {n["node_id"]: n["operator"] for n in event.get("nodes", [])}
        out = {k: out.get(k) for k in ("event_type", "app_id", "app_attempt", "event_time_ms", "execution_id")}
        out["nodes"] = [
            {"parent": operators.get(n.get("parent_id", -1), ""), **{k: n.get(k, -1) for k in PLAN_FROM_A_LOG}}
            for n in event.get("nodes", [])
        ]
    if event["event_type"] in WALL_CLOCK_TIMED:
        out.pop("event_time_ms")
    if event["event_type"] in HEARTBEAT_FED:
        keep = {"event_type", "cluster", "app_id", "app_attempt", "app_name", "schema_version", "event_time_ms",
                "executor_id", "stage_id", "stage_attempt"}  # fmt: skip
        out = {k: v for k, v in out.items() if k in keep}
    return out


def by_family(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e["seq"]):
        out[e["event_type"]].append(json.dumps(comparable(e), sort_keys=True))
    return dict(out)


def findings_of(server: ClickHouseServer, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store the events through the collector's decoder into a database of their own; the detection findings."""
    from sparktap.detection.findings import Detector
    from sparktap.detection.thresholds import Thresholds
    from sparktap.history.sinks import StorageSink

    # byte floors at one byte and no time-lost floors: on data this small the rules fire (ratios as documented)
    no_time_floors = {
        group: {"min_time_lost_ms": 0, "critical_min_time_lost_ms": 0}
        for group, values in Thresholds().model_dump().items()
        if isinstance(values, dict) and "min_time_lost_ms" in values
    }
    byte_floors = {
        "data_skew": {"min_max_bytes": 1},
        "skew_not_fixed": {"min_partition_bytes": 1},
        "shuffle_blowup": {"min_write_bytes": 1, "min_spill_bytes": 1, "history_min_bytes": 1},
    }
    floors = Thresholds(
        **{g: {**no_time_floors.get(g, {}), **byte_floors.get(g, {})} for g in no_time_floors | byte_floors}
    )

    database = random_database("sparktap_import_findings")
    sink = StorageSink(server.url(database), 30)
    try:
        for event in events:
            sink.send(event["app_id"], orjson.dumps(event))
        sink.flush()
        assert sink.rejected() == {}
        detector = Detector(sink.storage.query, floors, database=database, version=server.version)
        found = detector.findings(0, int(time.time() * 1000) + 3_600_000)
    finally:
        sink.close()
        drop_database(server, database)
    rows = [{k: v for k, v in vars(f).items() if k != "detected_at_ms"} for f in found]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def running_at_stop(spark: Any) -> None:
    """A job whose two tasks still run when the session stops (SparkContext.stop() cancels it after the app end)."""
    sc = spark.sparkContext

    def job() -> None:
        sc.setJobGroup("cancelled", "running when the session stops")
        try:
            sc.parallelize(range(2), 2).map(lambda x: time.sleep(300) or x).collect()
        except Exception:  # noqa: BLE001, S110 - cancelled by the stop, as intended
            pass

    threading.Thread(target=job, daemon=True).start()

    def both_running() -> bool:
        tracker = sc.statusTracker()
        infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        return any(i is not None and i.numActiveTasks == 2 for i in infos)

    wait_until(both_running, 60, "the job's two tasks running")


def killed_after_its_stage_failed(spark: Any) -> None:
    """A stage whose first task fails while its second still runs: one failure aborts it (local mode's
    spark.task.maxFailures is 1), Spark completes the stage as failed and then kills the second task, whose end comes
    after the stage's completion (a late task end)."""

    def work(x: int) -> int:
        if x == 0:
            raise ValueError("the planned failure")
        time.sleep(30)  # a workload: still running when the stage fails; the kill ends it at once
        return x

    try:
        spark.sparkContext.parallelize(range(2), 2).map(work).collect()
    except Exception:  # noqa: BLE001, S110 - the job fails, as intended
        pass


def test_live_and_imported_events_are_equal_family_by_family_and_field_by_field(
    spark_sessions: SparkSessions, kafka_broker: KafkaService, clickhouse_server: ClickHouseServer, tmp_path: Path
) -> None:
    from tests.apps.history_logs import aqe, small

    bootstrap = kafka_broker.bootstrap_servers
    live_topic = new_topic(bootstrap)
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    conf = {**listener_settings(bootstrap, live_topic, tmp_path / "spool"), **eventlog_conf(log_dir)}
    spark = start_session(spark_sessions, conf)
    try:
        small(spark)
        aqe(spark)
        killed_after_its_stage_failed(spark)
        app = spark.sparkContext.applicationId
        running_at_stop(spark)
    finally:
        stop_session(spark_sessions)  # cancels the running job: its stage and job end come after the app end
    live_all = [orjson.loads(r.value) for r in read_app_events(bootstrap, live_topic).records]
    live = live_all
    (end,) = [e for e in live if e["event_type"] == "app_end"]
    late = [e for e in live if e["seq"] > end["seq"] and e["event_type"] != "listener_health"]
    cancelled = "because SparkContext was shut down"
    assert {e["event_type"] for e in late} >= {"stage_completed", "job_end"}, late
    assert all(cancelled in (e["failure_reason"] or "") for e in late if e["event_type"] == "stage_completed")
    assert [e["result"] for e in late if e["event_type"] == "job_end"] == ["failed"]
    # the task killed after its stage failed: sent as late, after its stage's completion, live and imported alike
    (killed,) = [e for e in live if e["event_type"] == "task_end" and e.get("late")]
    (failed_stage,) = [e for e in live if e["event_type"] == "stage_completed" and e["stage_id"] == killed["stage_id"]]
    assert (killed["status"], killed["failure_class"]) == ("KILLED", "TaskKilled")
    assert failed_stage["status"] == "failed" and failed_stage["seq"] < killed["seq"]
    assert failed_stage.get("tasks_killed", 0) == 0 and failed_stage.get("tasks_failed", 0) == 1
    assert {e["event_type"] for e in live} >= NOT_FROM_A_LOG
    live = [e for e in live if e["event_type"] not in NOT_FROM_A_LOG]
    import_topic = new_topic(bootstrap)
    proc = sparktap_import(
        str(log_dir / app), "--bootstrap-servers", bootstrap, "--topic", import_topic,
        "--checkpoint", str(tmp_path / "ck.json"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    imported = [
        orjson.loads(r.value)
        for r in read_all(bootstrap, import_topic, 60, until=lambda rs: len(rs) >= len(live), settle=0.5)
    ]
    assert Counter(e["event_type"] for e in imported) == Counter(e["event_type"] for e in live)
    ours, theirs = by_family(imported), by_family(live)
    for family in sorted(theirs):
        assert ours[family] == theirs[family], family
    # detection: the same findings on the live application (all it sent) and on the imported one
    live_findings = findings_of(clickhouse_server, live_all)
    assert findings_of(clickhouse_server, imported) == live_findings
    assert live_findings != []

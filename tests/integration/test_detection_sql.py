"""Detection SQL on embedded chDB over events that mimic the jobs of the issue: a skewed join, > 5,000 tiny tasks, an
explode, hundreds of tiny files, one application per other rule, a running application, and balanced controls
(``tests/support/detection_samples.py``; the findings expected of them: ``tests/support/detection_findings.py``). The
same scenarios on the Debian clickhouse-server 18.16: test_detection_sql_server18.py."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sparktap.detection import Scope, Thresholds
from sparktap.store import Storage, open_storage
from sparktap.store.target import StorageTarget
from tests.support import detection_samples as samples
from tests.support import plan_samples, sample_app
from tests.support.detection import WINDOW, load
from tests.support.detection_findings import (
    EXPECTED,
    assert_attributed,
    assert_running_without_submitted,
    by,
    detector,
    found,
    running_without_submitted,
    skew_without_aqe,
)

pytestmark = pytest.mark.integration

T0 = sample_app.BASE_TIME_MS
GiB, MiB, KiB = 2**30, 2**20, 2**10


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    """One chDB store for the module, loaded with the scenarios (chDB: one directory per process at a time)."""
    target = StorageTarget(kind="chdb", path=Path(tmp_path_factory.mktemp("detection")) / "chdb", database="det")
    storage = open_storage(target)
    try:
        storage.ensure_schema()
        load(storage, samples.scenario_apps())
        yield storage
    finally:
        storage.close()


def test_each_rule_fires_on_its_job_and_nothing_on_the_controls(store: Storage) -> None:
    findings = detector(store).findings(*WINDOW)
    assert found(findings) == EXPECTED
    assert not {f.app_id for f in findings} & set(samples.CONTROL_APPS)
    for f in findings:
        assert f.explanation and f.suggested_fix and f.evidence and f.cluster == "prod-eu"
    # one node: <t> FINAL instead of the _dedup views (what the Detector reads there), the same findings in order
    assert detector(store, final_reads=True).findings(*WINDOW) == findings


def test_evidence_explanations_and_fixes(store: Storage) -> None:
    findings = detector(store).findings(*WINDOW)
    skew = by(findings, "app-skewed-join", "data_skew")
    assert skew.evidence == {
        "max_task_bytes": 2 * GiB,
        "median_task_bytes": 20 * MiB,
        "ratio": 102.4,
        "from_shuffle": 1.0,
        "max_task_rows": 0,
        "median_task_rows": 0,
        "by_rows": 0,
        "input_from_scan_files": 0,
        "median_is_zero": 0,
        "max_task_share": pytest.approx(2 * GiB / (199 * 20 * MiB + 2 * GiB)),
        "time_lost_ms": 57_000,  # the straggler's 60 s beyond the median task's 3 s
    }
    assert (skew.job_id, skew.sql_execution_id, skew.stage_attempt, skew.threshold) == (1, 1, 0, 10.0)
    assert skew.explanation == "Largest task reads 2.00 GiB of shuffle data, 102.4× the median task (20.00 MiB)"
    assert "spark.sql.adaptive.skewJoin.enabled=true" in skew.suggested_fix and "BROADCAST" in skew.suggested_fix

    straggler = by(findings, "app-skewed-join", "task_time_skew")
    assert straggler.evidence["ratio"] == 20.0 and straggler.evidence["max_task_ms"] == 60_000
    assert math.isclose(straggler.evidence["share_of_stage"], 60 / 70)
    assert straggler.explanation == (
        "Slowest task ran 60 s, 20× the median task (3 s), and was 86 % of the stage's 70 s wall time"
    )

    rows = by(findings, "app-row-skew", "data_skew")
    assert rows.evidence == {
        "max_task_bytes": 23 * MiB,
        "median_task_bytes": 10 * MiB,
        "ratio": 19.0,
        "from_shuffle": 1.0,
        "max_task_rows": 1_520_000,
        "median_task_rows": 80_000,
        "by_rows": 1,
        "input_from_scan_files": 0,
        "median_is_zero": 0,
        "max_task_share": pytest.approx(1_520_000 / (199 * 80_000 + 1_520_000)),
        "time_lost_ms": 35_000,
    }
    assert (rows.value, rows.threshold) == (19.0, 10.0)
    assert rows.explanation == (
        "Largest task reads 1520000 rows of shuffle data, 19× the median task (80000 rows, 23.00 MiB vs 10.00 MiB)"
    )

    wave = by(findings, "app-waves", "task_time_skew")
    assert {k: wave.evidence[k] for k in ("max_task_ms", "median_task_ms", "ratio", "slots", "waves")} == {
        "max_task_ms": 8_000,
        "median_task_ms": 1_000,
        "ratio": 8.0,
        "slots": 2,
        "waves": 8,
    }
    assert math.isclose(wave.evidence["share_of_stage"], 8 / 15)
    assert math.isclose(wave.evidence["share_of_balanced"], 8_000 / (23_000 / 2))
    assert wave.explanation == (
        "Slowest task ran 8 s, 8× the median task (1 s), and was 70 % of its balanced wall "
        "time (16 tasks in 8 waves on 2 slots: 11.5 s)"
    )

    running = by(findings, "app-running-waves", "task_time_skew")
    assert running.running and running.stage_name == "map at running_waves.py:5"
    assert {
        k: running.evidence[k]
        for k in ("max_task_ms", "median_task_ms", "ratio", "stage_duration_ms", "slots", "waves")
    } == {
        "max_task_ms": 9_000,
        "median_task_ms": 1_000,
        "ratio": 9.0,
        "stage_duration_ms": 14_000,
        "slots": 2,
        "waves": 16,
    }
    assert math.isclose(running.evidence["share_of_stage"], 9 / 14)
    assert math.isclose(running.evidence["share_of_balanced"], 9_000 / (28_000 / 2))
    assert running.explanation == (
        "Slowest task ran 9 s, 9× the median task (1 s), and was 64 % of its balanced "
        "wall time (32 tasks in 16 waves on 2 slots: 14 s)"
    )

    blocks = by(findings, "app-blocks", "shuffle_block_explosion")
    assert blocks.evidence == {
        "blocks": 1_000_000,
        "avg_block_bytes": 8 * KiB,
        "shuffle_read_bytes": 8 * KiB * 10**6,
        "reduce_tasks": 1_000,
        "blocks_per_task": 1_000,
        "suggested_partitions": 123,
        "time_lost_ms": pytest.approx(60_000 * (1 - 123 / 1_000)),  # the stage's share of surplus reduce tasks
    }
    assert blocks.explanation == (
        "Fetched 1000000 shuffle blocks averaging 8.00 KiB (1000 reduce tasks × about "
        "1000 map outputs each, 7.63 GiB in all)"
    )
    assert blocks.suggested_fix.startswith(
        "Fewer, larger blocks: about 123 reduce partitions (spark.sql.shuffle.partitions, 64.00 MiB each)"
    )

    not_fixed = by(findings, "app-skewed-join", "skew_not_fixed")
    assert "AQE did not treat it as a skewed join" in not_fixed.explanation
    assert not_fixed.evidence["aqe_plan_updates"] == 1 and not_fixed.evidence["aqe_skew_splits"] == 0
    disabled = by(findings, "app-skew-join-off", "skew_not_fixed")
    assert "skew join is disabled (spark.sql.adaptive.skewJoin.enabled=false)" in disabled.explanation
    assert disabled.suggested_fix == "Set spark.sql.adaptive.skewJoin.enabled=true"

    tiny = by(findings, "app-tiny-tasks", "small_partitions")
    assert tiny.evidence["tasks"] == 6000 and tiny.evidence["median_task_ms"] == 120
    assert tiny.evidence["suggested_partitions"] == math.ceil(6000 * 50 * KiB / (64 * MiB))
    assert "spark.sql.shuffle.partitions=5" in tiny.suggested_fix

    aqe = by(findings, "app-aqe-tiny", "small_partitions", None)
    assert (aqe.sql_execution_id, aqe.node_id, aqe.stage_attempt) == (7, 3, None)
    assert aqe.evidence == {
        "partitions": 500,
        "avg_partition_bytes": MiB,
        "advisory_bytes": 64 * MiB,
        "suggested_partitions": 8,
        "time_lost_ms": (500 - 8) * 10,  # surplus partitions × the 10 ms task overhead
    }
    assert "parallelismFirst=false" in aqe.suggested_fix

    files = by(findings, "app-tiny-files", "small_files")
    assert files.evidence == {
        "files": 400,
        "bytes_written": 200 * MiB,
        "avg_file_bytes": 512 * KiB,
        "suggested_files": 2,
        "files_estimated": 0,
        "table_files_per_day_30d": 0,  # its SQL execution wrote no named table (test_table_rules has one)
        "table_days_written_30d": 0,
        "time_lost_ms": pytest.approx((400 - 2) * 20 / 1),
    }
    assert files.suggested_fix.startswith("coalesce(2) or repartition(2) before the write")

    blowup = by(findings, "app-explode", "shuffle_blowup")
    assert blowup.evidence["write_ratio"] == 16 and blowup.evidence["history_ratio"] == 8
    assert blowup.evidence["history_runs"] == 3 and blowup.evidence["history_median_bytes"] == GiB
    assert blowup.explanation == (
        "Shuffle write 8.00 GiB is 16× the stage input (512.00 MiB); shuffle 8.00 GiB is "
        "8× the median of its last 3 runs (1.00 GiB)"
    )

    remote = by(findings, "app-remote", "remote_heavy_shuffle")
    assert math.isclose(remote.evidence["remote_share"], 0.95) and math.isclose(
        remote.evidence["fetch_wait_share"], 0.3
    )
    assert by(findings, "app-oversized", "oversized_partition").evidence["max_task_bytes"] == 6 * GiB
    assert by(findings, "app-gc", "gc_pressure").evidence == {
        "gc_ms": 225_000,
        "run_ms": 900_000,
        "ratio": 0.25,
        "time_lost_ms": 225_000,  # GC time over the stage's slots (none recorded: 1)
    }
    assert by(findings, "app-failures", "task_failures", 3).explanation == "25 of 125 task attempts failed (20 %)"


def test_plan_and_streaming_evidence(store: Storage) -> None:
    findings = detector(store).findings(*WINDOW)
    (scan,) = [f for f in findings if (f.app_id, f.rule) == ("app-plans", "plan_misestimate")]
    assert (scan.sql_execution_id, scan.node_id, scan.stage_id, scan.stage_name) == (
        3,
        4,
        None,
        "Scan parquet spark_catalog.default.orders",
    )
    assert scan.evidence == {
        "estimated_rows": 10,
        "actual_rows": 2_000_000,
        "ratio": 200_000,
        "from_catalog": 1,
        "time_lost_ms": 14_400,
    }  # the execution's task time
    assert (scan.value, scan.threshold) == (200_000, 1000)
    assert scan.explanation == (
        "Scan parquet spark_catalog.default.orders: the statistics of spark_catalog.default.orders count 10 rows, the "
        "scan read 2000000 (200000× more): rows were added after its last ANALYZE, the plan was sized on stale "
        "statistics"
    )
    assert scan.suggested_fix.startswith(
        "Refresh the statistics after every load that changes the table: ANALYZE TABLE "
        "spark_catalog.default.orders COMPUTE STATISTICS FOR ALL COLUMNS (a REFRESH TABLE does not update them). "
    )
    assert "spark.sql.cbo.enabled=true also sizes the filters and joins above this scan" in scan.suggested_fix
    assert scan.where == 'SQL execution 3, plan node 4 "Scan parquet spark_catalog.default.orders"'
    (codegen,) = [f for f in findings if (f.app_id, f.rule) == ("app-plans", "codegen_off")]
    assert (codegen.sql_execution_id, codegen.node_id, codegen.stage_name) == (3, 0, "HashAggregate")
    assert codegen.evidence == {
        "operators_outside_codegen": 2,
        "plan_nodes": 6,
        "codegen_max_fields": 100,
        "execution_cpu_ms": 120_000,
        "whole_stage_codegen": 1,
        "time_lost_ms": 60_000,  # half the execution's CPU
    }
    assert codegen.explanation == (
        "HashAggregate runs without whole-stage codegen (too many fields: 301 > spark.sql.codegen.maxFields=100) "
        "with 1 other operator(s), in a SQL execution that used 120 s of executor CPU: interpreted row by row, "
        "several times slower"
    )
    assert "raise spark.sql.codegen.maxFields (now 100) with care" in codegen.suggested_fix

    (behind,) = [f for f in findings if f.rule == "streaming_saturated"]
    query = f"orders ({plan_samples.QUERY_IDS['app-stream-behind']})"
    assert (behind.app_id, behind.severity, behind.running, behind.stage_name) == (
        "app-stream-behind",
        "critical",
        True,
        query,
    )
    assert (behind.stage_id, behind.sql_execution_id, behind.node_id, behind.where) == (
        None,
        None,
        None,
        f'streaming query "{query}"',
    )
    assert behind.evidence == {
        "busy_share": 1.0,
        "batches": 10,
        "avg_batch_ms": 2_000,
        "wall_ms": 20_000,
        "input_rows_per_s": 1_000,
        "processed_rows_per_s": 500,
        "backlog_first": 3_000,
        "backlog_last": 12_000,
        "first_batch_id": 2,
        "last_batch_id": 11,
        "backlog_growth_rows_per_s": 500,  # 9,000 rows over the 18 s from the first batch's start to the last's
        "throughput_rows_per_s": 50,
        "arrival_rows_per_s": 550,
        "catch_up_ms": 240_000,  # 12,000 rows at 50 rows/s
        "time_lost_ms": 240_000,
    }
    assert behind.explanation == (
        "Over batches 2–11 the query was busy 100 % of the wall time (batches take 2 s on "
        "average); it processes 50 rows/s while the backlog grew from 3000 to 12000 rows (500 rows/s): it is "
        "falling behind; the backlog alone takes 240 s to process at that rate"
    )
    (state,) = [f for f in findings if f.rule == "streaming_state_growth"]
    assert (state.app_id, state.severity, state.running, state.value) == ("app-stream-state", "warning", False, 90_000)
    assert state.evidence == {
        "state_rows_first": 25_000,
        "state_rows_last": 115_000,
        "state_bytes_first": MiB + 2 * 640_000,
        "state_bytes_last": MiB + 11 * 640_000,
        "rows_evicted": 0,
        "watermark_ms": 0,
        "batches": 10,
        "first_batch_id": 2,
        "last_batch_id": 11,
        "time_lost_ms": 0,  # state growth is a memory risk, not time lost
    }
    assert state.explanation.startswith("Over batches 2–11 the state grew from 25000 to 115000 rows (")
    assert state.explanation.endswith(
        ") and there is no watermark to evict any: it grows until the executors run out of memory"
    )
    assert "withWatermark" in state.suggested_fix


def test_findings_appear_while_the_application_runs(store: Storage) -> None:
    running = by(detector(store).findings(*WINDOW), "app-running", "task_failures", 3)
    assert running.running and running.evidence == {
        "failed_tasks": 4,
        "attempted_tasks": 30,
        "ratio": pytest.approx(4 / 30),
        "time_lost_ms": 4 * 1_000,  # the failed attempts at the typical task time, over one slot
    }
    assert running.job_id == 2 and running.stage_name == "map at long.py:7"
    # the stage completes (still too many failures): same finding key, now from stage_completed
    app = sample_app.App("app-running-2", "long-runner").start()
    app.emit(
        "stage_submitted",
        T0 - 60_000,
        stage_id=3,
        name="map at long.py:7",
        num_tasks=100,
        job_id=2,
        submission_time_ms=T0 - 60_000,
        parent_stage_ids=[],
    )
    app.tasks(3, T0, [10_000] * 25, failed=5)  # 5 failed 10 s attempts: 50 s lost, enough for critical
    load(store, [app])
    mid = by(detector(store).findings(*WINDOW), "app-running-2", "task_failures", 3)
    assert mid.running and mid.severity == "critical"
    done = sample_app.App("app-running-2", "long-runner")
    done._seq = iter(range(1000, 2000))
    done.stage(3, T0 + 30_000, tasks=100, tasks_succeeded=100, tasks_failed=12, name="map at long.py:7", job_id=2)
    load(store, [done])
    final = by(detector(store).findings(*WINDOW), "app-running-2", "task_failures", 3)
    assert not final.running and final.severity == "warning" and final.key == mid.key


def test_a_running_stage_without_its_submission_is_still_found(store: Storage) -> None:
    load(store, [running_without_submitted()])
    findings = detector(store).findings(*WINDOW)
    assert_running_without_submitted(findings)
    assert detector(store, final_reads=True).findings(*WINDOW) == findings


PROBED = {  # scope -> (the optional inputs without a row, the rules that fire)
    (): ({"table"}, None),  # the scenarios hold no table_access event (test_table_rules has them)
    ("app-skew-no-aqe",): (
        {"aqe", "aqe_read", "plan", "streaming", "table"},
        {"data_skew", "skew_not_fixed", "task_time_skew"},
    ),
    ("app-plans", "app-aqe-tiny"): ({"streaming", "table"}, {"codegen_off", "plan_misestimate", "small_partitions"}),
    ("app-stream-behind", "app-failures"): (
        {"aqe", "aqe_read", "plan", "table"},
        {"streaming_saturated", "task_failures"},
    ),
}


def assert_probed_same(storage: Storage, scopes: Iterable[tuple[str, ...]] = PROBED) -> None:
    """The Detector leaves out the inputs without a row in the range (``input_probe``): the same findings, in the
    same order, as the whole query, whether those inputs have rows (the whole store) or not (one application)."""
    for apps in scopes:
        absent, rules = PROBED[apps]
        scope = Scope.of(apps=apps)
        probed = detector(storage, scope=scope)
        assert probed.absent_inputs(*WINDOW) == absent, apps
        findings = probed.findings(*WINDOW)
        assert findings == detector(storage, scope=scope, probe_inputs=False).findings(*WINDOW), apps
        assert findings and (rules is None or {f.rule for f in findings} == rules), apps
    # only rules whose input is absent: no query at all, and no finding either way
    only_plan = detector(storage, scope=Scope.of(apps=["app-failures"]), rules=("codegen_off",))
    assert only_plan.findings(*WINDOW) == [] == replace(only_plan, probe_inputs=False).findings(*WINDOW)


def test_inputs_without_rows_are_left_out_with_the_same_findings(store: Storage) -> None:
    load(store, [skew_without_aqe()])
    assert_probed_same(store)


def test_redelivered_events_never_double_count(store: Storage) -> None:
    before = [f for f in detector(store).findings(*WINDOW) if f.app_id == "app-failures"]
    load(store, [samples.failing_tasks()])  # the very same events (same app, attempt and seq) again
    after = [f for f in detector(store).findings(*WINDOW) if f.app_id == "app-failures"]
    assert after == before


def test_thresholds_time_range_and_scope(store: Storage) -> None:
    strict = detector(store, thresholds=Thresholds(data_skew={"min_max_bytes": 3 * GiB, "min_max_rows": 10**8}))
    assert not [f for f in strict.findings(*WINDOW) if f.rule == "data_skew"]
    more_history = detector(store, thresholds=Thresholds(shuffle_blowup={"history_min_runs": 4}))
    blowup = by(more_history.findings(*WINDOW), "app-explode", "shuffle_blowup")
    assert "median of its last" not in blowup.explanation and blowup.severity == "warning"
    # an event-driven pass reads the job's last 2 runs from the index of runs (detection/history.py): same finding
    two = Thresholds(shuffle_blowup={"history_min_runs": 2, "history_runs": 2})
    full = [f for f in detector(store, thresholds=two).findings(*WINDOW) if f.app_id == "app-explode"]
    assert by(full, "app-explode", "shuffle_blowup").evidence["history_runs"] == 2
    assert detector(store, thresholds=two, scope=Scope.of(apps=["app-explode"])).findings(*WINDOW) == full
    assert detector(store).findings(T0 + 86_400_000, T0 + 2 * 86_400_000) == []
    assert detector(store, scope=Scope.of(clusters=["elsewhere"])).findings(*WINDOW) == []
    only_warning = detector(store, min_severity="warning").findings(*WINDOW)
    assert {f.severity for f in only_warning} == {"warning", "critical"}


def test_a_filter_or_join_misestimated_on_fresh_statistics_is_no_finding(store: Storage) -> None:
    """A filter misestimated under a join sized from it (CBO on or off, fresh statistics: the scans are right), and
    the same filter under an exchange two joins read (a reused exchange: its subtree appears twice in the plan, with
    the same node ids): the selectivity model's error, nothing ANALYZE can fix, so no finding."""
    apps = [
        plan_samples.plan_chain(),
        plan_samples.plan_chain("app-plan-chain-nocbo", cbo=False),
        plan_samples.plan_reused(),
    ]
    load(store, apps)
    ids = {a.app_id for a in apps}
    assert [f for f in detector(store).findings(*WINDOW) if f.app_id in ids] == []


def test_implausible_input_bytes_are_replaced_by_rows(store: Storage) -> None:
    """Spark 4 with Parquet vectored IO reports ~2,400× too few input bytes (14,657 B for 6,001,215 rows): a plain
    repartition of that scan is no blow-up (its rows written equal its rows read); an explode of it, 100× the rows,
    is — measured in rows, as its evidence says. Believable bytes are still compared as bytes."""
    apps = []
    for app_id, written, bytes_in, scan_bytes, written_per_task in (
        ("app-vectored-repartition", 6_001_215, 14_657, None, 27 * MiB),
        ("app-vectored-explode", 600_121_500, 14_657, None, 27 * MiB),
        ("app-plain-repartition", 6_001_215, 2_088_417_750, None, 27 * MiB),
        # the listener's scan_bytes_read (the scans' own 'size of files read'): bytes again, not rows
        ("app-scan-repartition", 6_001_215, 14_657, 2_088_417_750, 27 * MiB),
        ("app-scan-explode", 600_121_500, 14_657, 2_088_417_750, GiB),
    ):
        app = sample_app.App(app_id, "tpch-sf10").start()
        app.stage(
            1,
            sample_app.BASE_TIME_MS,
            tasks=200,
            duration_ms=120_000,
            task_ms=8_000,
            shuffle_read=False,
            bytes_per_task=bytes_in // 200,
            input_records=6_001_215,
            shuffle_records_written=written,
            shuffle_records_read=0,
            shuffle_write_bytes=sample_app.uniform(written_per_task, 200),
            input_records_per_task=sample_app.uniform(6_001_215 // 200, 200),
            scan_bytes_read=scan_bytes,
            scan_files_read=None if scan_bytes is None else 40,
            name="parquet at tpch.py:10",
        )
        apps.append(app)
    load(store, apps)
    findings = [f for f in detector(store).findings(*WINDOW) if f.app_id in {a.app_id for a in apps}]
    assert sorted((f.app_id, f.rule) for f in findings) == [
        ("app-scan-explode", "shuffle_blowup"),
        ("app-vectored-explode", "shuffle_blowup"),
    ]
    (scan,) = [f for f in findings if f.app_id == "app-scan-explode"]
    assert scan.severity == "critical" and scan.evidence["input_from_scan_files"] == 1
    assert scan.evidence["input_measured_in_bytes"] == 1 and scan.evidence["stage_input_bytes"] == 2_088_417_750
    assert scan.explanation == "Shuffle write 200.00 GiB is 102.8× the stage input (1.94 GiB, the files its scans read)"
    (explode,) = [f for f in findings if f.app_id == "app-vectored-explode"]
    assert explode.evidence["input_from_scan_files"] == 0
    assert explode.evidence["input_measured_in_bytes"] == 0 and explode.evidence["write_ratio"] == pytest.approx(
        100, rel=1e-3
    )
    assert explode.explanation.startswith(
        "Shuffle write 5.27 GiB is 100× the stage input (600121500 rows written of 6001215 read: its input bytes are "
        "implausible, under a byte a row)"
    )


def test_shuffle_only_the_sql_metrics_report_is_read_there_and_said(store: Storage) -> None:
    """An engine that keeps its shuffle out of Spark's task metrics: a stage whose tasks report none, over 2 GiB of
    input, whose operators' SQL metrics report 40 GiB written. The shuffle blow-up is found from those, and its message
    and evidence say where the figure came from; without the SQL figures (an older listener) the same stage is silent,
    and where the tasks report shuffle, theirs stands even beside a larger SQL figure."""
    apps = []
    for app_id, task_write, sql_write in (
        ("app-sql-shuffle", 0, 40 * GiB),
        ("app-no-sql-figures", 0, None),
        ("app-tasks-shuffle", 10 * MiB, 40 * GiB),
    ):
        app = sample_app.App(app_id, "photon-etl").start()
        app.stage(
            1,
            sample_app.BASE_TIME_MS,
            tasks=200,
            duration_ms=120_000,
            task_ms=8_000,
            shuffle_read=False,
            bytes_per_task=2 * GiB // 200,
            input_records=20_000_000,
            shuffle_write_bytes=sample_app.uniform(task_write // 200, 200),
            sql_shuffle_write_bytes=sql_write,
            name="parquet at etl.py:10",
        )
        apps.append(app)
    load(store, apps)
    findings = [f for f in detector(store).findings(*WINDOW) if f.app_id in {a.app_id for a in apps}]
    assert [(f.app_id, f.rule, f.severity) for f in findings] == [("app-sql-shuffle", "shuffle_blowup", "warning")]
    (found_,) = findings
    assert found_.evidence["shuffle_from_sql_metrics"] == 1
    assert found_.evidence["shuffle_write_bytes"] == 40 * GiB
    assert found_.evidence["write_ratio"] == pytest.approx(20, rel=1e-6)
    assert found_.explanation == (
        "Shuffle write 40.00 GiB is 20× the stage input (2.00 GiB); read from the SQL metrics of its operators: its "
        "tasks report no shuffle or spill"
    )


def test_a_range_from_the_epoch_keeps_every_finding(store: Storage) -> None:
    """from_ms=0 (what the demo runner asks): the plan rules' one-day look-back must not wrap before the epoch."""
    to = WINDOW[1]
    week = detector(store).findings(to - 7 * 86_400_000, to)
    assert ("app-plans", None, "codegen_off", "warning") in found(week)
    assert detector(store).findings(0, to) == week
    lost = [f.time_lost_ms for f in week]
    assert lost == sorted(lost, reverse=True) and lost[0] > lost[-1]  # the most time lost first


def test_findings_carry_who_ran_them(store: Storage) -> None:
    assert_attributed(detector(store).findings(*WINDOW))

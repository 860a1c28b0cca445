"""native_fallback end to end on a real native engine: Apache DataFusion Comet 0.12.0 (from Maven Central, through
the project's jar cache) in a Spark 3.5 driver with the listener → real broker → the real collector → ClickHouse
(chDB, and the same topic collected again into clickhouse-server 18.16) → the detection query.

One application runs the same aggregate twice over a Parquet table: once through a Python UDF (``BatchEvalPython``,
which Comet's compatibility guide lists as not supported: it runs in the JVM between a ``CometColumnarToRow`` and
Comet's columnar shuffle), once with the UDF replaced by the built-in ``id + 1`` (Comet runs the whole plan). The first
is a ``native_fallback`` finding naming ``BatchEvalPython``; the second is none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sparktap.detection import Detector, Finding, Thresholds
from sparktap.detection.macros import expand
from sparktap.detection.native import PlanNode, classify, per_query_sql, summary
from sparktap.detection.sql import SqlContext
from sparktap.local.ports import wait_until
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import AppEvents, assert_valid, new_topic, read_app_events
from tests.fixtures.spark_lines import listener_settings, run_app, spark_line
from tests.support.plan_streaming import collecting, stored
from tests.support.services.maven import jars

pytestmark = pytest.mark.integration

COMET_VERSION = "0.12.0"
COMET = f"org.apache.datafusion:comet-spark-spark3.5_2.12:{COMET_VERSION}"
ROWS = 200_000
UDF_SQL = "SELECT k, sum(plus1(id)) AS s FROM t WHERE id > 10 GROUP BY k"
NATIVE_SQL = "SELECT k, sum(id + 1) AS s FROM t WHERE id > 10 GROUP BY k"
EXPECTED = sorted((k, sum(i + 1 for i in range(ROWS) if i > 10 and i % 100 == k)) for k in range(100))
HOUR_MS = 3_600_000


def comet_conf(jar: Path) -> dict[str, str]:
    """Comet on (its documented minimal set): the plugin, native execution and shuffle, off-heap memory."""
    return {
        "spark.driver.extraClassPath": str(jar),
        "spark.executor.extraClassPath": str(jar),
        "spark.plugins": "org.apache.spark.CometPlugin",
        "spark.shuffle.manager": "org.apache.spark.sql.comet.execution.shuffle.CometShuffleManager",
        "spark.comet.enabled": "true",
        "spark.comet.exec.enabled": "true",
        "spark.comet.exec.shuffle.enabled": "true",
        "spark.memory.offHeap.enabled": "true",
        "spark.memory.offHeap.size": "1g",
        "spark.sql.adaptive.enabled": "true",
    }


@pytest.fixture(scope="module")
def comet_app(kafka_broker: KafkaService, tmp_path_factory: pytest.TempPathFactory) -> tuple[AppEvents, dict[str, Any]]:
    """The application, run once for the module: its events and what the driver saw."""
    # Comet 0.12.0's classes are Java 17 bytecode: the machine's JDK 17, not the line's bundled Java 11 runtime
    line = replace(spark_line("3.5"), java_home=None)
    (jar,) = [p for p in jars(f"comet-{COMET_VERSION}-spark3.5", [COMET]) if p.name.startswith("comet-spark")]
    scratch = tmp_path_factory.mktemp("comet")
    topic = new_topic(kafka_broker.bootstrap_servers)
    spec = {
        "conf": comet_conf(jar),
        "enable": listener_settings(kafka_broker.bootstrap_servers, topic, scratch / "spool"),
        "rows": ROWS,
        "data": str(scratch / "t"),
        "queries": {"udf": UDF_SQL, "native": NATIVE_SQL},
    }
    app = run_app(line, scratch / "app", spec, timeout=300, module="tests.apps.native_workloads")
    assert app.returncode == 0, app.log[-3000:]
    events = read_app_events(kafka_broker.bootstrap_servers, topic, timeout=60.0)
    assert_valid(events.events)
    return events, {"topic": topic, **app.out}


def plan_of(events: AppEvents, job_ids: list[int]) -> dict[str, Any]:
    """The sql_plan_stats of the one SQL execution that ran these jobs."""
    executions = {e["sql_execution_id"] for e in events.of("job_start") if e["job_id"] in job_ids}
    (plan,) = [p for p in events.of("sql_plan_stats") if p["execution_id"] in executions]
    return plan


def fed_by_transition(plan: dict[str, Any]) -> set[int]:
    """Independently of the rule's SQL: the Spark operators whose child (through plan structure) is a transition to
    rows."""
    nodes = {n["node_id"]: n for n in plan["nodes"]}
    out = set()
    for n in plan["nodes"]:
        if classify(n["operator"])[1] != "to_row":
            continue
        parent = n.get("parent_id", -1)
        while parent >= 0 and classify(nodes[parent]["operator"])[1] == "neutral":
            parent = nodes[parent].get("parent_id", -1)
        if parent >= 0 and classify(nodes[parent]["operator"])[1] == "jvm":
            out.add(parent)
    return out


def findings_at(
    kafka: KafkaService, topic: str, events: AppEvents, url: str
) -> tuple[list[Finding], list[dict[str, Any]]]:
    """Collect the application into the store at ``url``; its native_fallback findings with no time floor (the
    test's queries take well under the default 1 s around a fallback), and the per-query native vs JVM split."""
    with collecting(kafka, topic, url) as collector:
        storage = collector.storage
        assert storage is not None
        wait_until(lambda: stored(storage, events), 120.0, f"all {len(events.events)} events stored")
        detector = Detector(
            storage.query,
            database=storage.database,
            version=storage.version(),
            rules=("native_fallback",),
            thresholds=Thresholds(native_fallback={"min_time_lost_ms": 0}),
        )
        now = int(time.time() * 1000)
        ctx = SqlContext(storage.database, storage.version())
        per_query = storage.query(expand(per_query_sql(ctx), now - HOUR_MS, now + HOUR_MS))
        return detector.findings(now - HOUR_MS, now + HOUR_MS), [dict(r) for r in per_query]


@pytest.fixture
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    server: ClickHouseServer = request.getfixturevalue("clickhouse_server")
    database = random_database()
    yield server.url(database)
    drop_database(server, database)


def test_comet_runs_the_queries_and_the_listener_sees_its_operators(
    comet_app: tuple[AppEvents, dict[str, Any]],
) -> None:
    events, out = comet_app
    udf, native = out["groups"]["udf"], out["groups"]["native"]
    assert [tuple(r) for r in udf["rows"]] == EXPECTED and [tuple(r) for r in native["rows"]] == EXPECTED
    udf_plan, native_plan = plan_of(events, udf["job_ids"]), plan_of(events, native["job_ids"])
    udf_ops = [n["operator"] for n in udf_plan["nodes"]]
    # the Python UDF runs in the JVM, right above Comet's transition to rows
    assert "BatchEvalPython" in udf_ops and "CometColumnarToRow" in udf_ops
    assert any(op.startswith("CometScan") for op in udf_ops)
    # without it, every operator is Comet's: only plan structure and the final transition to the driver's rows
    roles = {classify(n["operator"])[1] for n in native_plan["nodes"]}
    assert roles == {"native", "to_row", "neutral"}, [n["operator"] for n in native_plan["nodes"]]
    # Comet's shuffle writer fills Spark's task metrics (unlike Photon's): its stages report their shuffle, so
    # detection is not blind to it (docs/native.md)
    stages = [s for s in events.of("stage_completed") if s.get("sql_execution_id") == native_plan["execution_id"]]
    written = sum(s["shuffle_write_bytes"]["sum"] for s in stages)
    # and its exchanges' SQL metrics carry the same bytes (sql_plan_stats shuffle_write_bytes; a reused exchange's
    # subtree repeats under each reuse: count each node once)
    exchanges = {n["node_id"]: n["shuffle_write_bytes"] for n in native_plan["nodes"] if "shuffle_write_bytes" in n}
    assert written > 0 and sum(exchanges.values()) == written, (exchanges, written)
    # Comet's native operators report their time in nanosecond timing metrics: each has a time_ms
    assert all(n.get("time_ms", -1) >= 0 for n in native_plan["nodes"] if n["operator"].startswith("CometHash"))


def test_a_python_udf_in_a_comet_plan_is_a_native_fallback_and_the_builtin_is_not(
    comet_app: tuple[AppEvents, dict[str, Any]],
    kafka_broker: KafkaService,
    tmp_path: Path,
    server_url: str,
) -> None:
    events, out = comet_app
    udf_plan = plan_of(events, out["groups"]["udf"]["job_ids"])
    native_plan = plan_of(events, out["groups"]["native"]["job_ids"])
    nodes = {n["node_id"]: n for n in udf_plan["nodes"]}
    expected = fed_by_transition(udf_plan)
    (udf_node,) = [i for i in expected if nodes[i]["operator"] == "BatchEvalPython"]

    embedded, split = findings_at(kafka_broker, out["topic"], events, f"chdb://{tmp_path / 'chdb'}")
    served, served_split = findings_at(kafka_broker, out["topic"], events, server_url)
    # per query, native vs JVM operators, time and rows: ClickHouse (both) as detection.native.summary counts them
    expected_split = []
    for plan in sorted(events.of("sql_plan_stats"), key=lambda p: p["execution_id"]):
        s = summary(PlanNode(n["operator"], n.get("actual_rows", -1), n.get("time_ms", -1)) for n in plan["nodes"])
        expected_split.append({"execution_id": plan["execution_id"], "engine": s.engine,
                               "native_operators": s.native_operators, "jvm_operators": s.jvm_operators,
                               "transitions": s.transitions, "native_ms": s.native_ms, "jvm_ms": s.jvm_ms,
                               "native_rows": s.native_rows, "jvm_rows": s.jvm_rows})  # fmt: skip
    keys = list(expected_split[0])
    for got in (split, served_split):
        assert [{k: (r[k] if k == "engine" else int(r[k])) for k in keys} for r in got] == expected_split
    assert {r["execution_id"]: r["engine"] for r in expected_split}[udf_plan["execution_id"]] == "comet"
    assert {f.key: (f.severity, f.evidence, f.explanation) for f in served} == {
        f.key: (f.severity, f.evidence, f.explanation) for f in embedded
    }
    # one finding per JVM operator fed by a transition to rows, in the UDF's execution only: none for the native one
    assert {(f.sql_execution_id, f.node_id) for f in embedded} == {(udf_plan["execution_id"], i) for i in expected}
    assert native_plan["execution_id"] not in {f.sql_execution_id for f in embedded}
    (finding,) = [f for f in embedded if f.node_id == udf_node]
    assert (finding.rule, finding.stage_name) == ("native_fallback", "BatchEvalPython")
    operators = [n for n in udf_plan["nodes"] if classify(n["operator"])[1] in ("native", "jvm")]
    native_ops = [n for n in operators if classify(n["operator"])[1] == "native"]
    assert finding.evidence["native_operators"] == len(native_ops)
    assert finding.evidence["jvm_operators"] == len(operators) - len(native_ops)
    assert finding.evidence["native_ms"] == sum(max(n.get("time_ms", -1), 0) for n in native_ops)
    own = max(nodes[udf_node].get("time_ms", -1), 0)
    assert finding.evidence["operator_ms"] == own
    assert finding.evidence["time_around_ms"] == own + finding.evidence["transition_ms"]
    assert finding.explanation.startswith("BatchEvalPython fell back to the JVM in a plan run by comet (")

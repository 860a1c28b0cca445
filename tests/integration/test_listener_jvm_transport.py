"""spark.sparktap.transport=kafka, the jar's default: the listener produces to Kafka from the driver JVM
(kafka-clients relocated inside its jar), so a Spark host needs no Python. A Java Spark application, compiled here
against the line's pyspark jars, runs through SparkSubmit on a PATH with no python at all and with only the listener
jar and spark.sparktap.* confs (no transport among them):

- Spark 3.5 (Java 11) over SASL_SSL (SCRAM, a private CA) given librdkafka-style settings: what Kafka holds equals
  Spark's own counts of jobs, stage attempts and task attempts exactly; the password is in no log line;
- Spark 4 with the broker stopped between two phases of the application: the events of the second phase are
  spooled (the relay's spool format), resent oldest first once the broker is back, exact counts, each seq once,
  and the collector (into chDB) stores exactly Spark's counts with no seq gap;
- the contract: the JVM producer sends byte-identical values and the same key as the relay for the same events;
- tansu, the demo's broker: the JVM producer's events all arrive there too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest

import sparktap.listener
from sparktap.local.broker import TansuBroker, create_topic
from sparktap.local.ports import wait_until
from tests.fixtures.kafka import RELAY_USER, SECURE_GROUP_PREFIX, KafkaService, SecureKafka
from tests.fixtures.listener import assert_valid, new_topic, read_all, read_app_events
from tests.fixtures.spark_lines import SparkLine, run_app, spark_line
from tests.support.collector import in_process, settings_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "tests" / "apps" / "java"
APP_CLASS = "SparktapCountingApp"
APP_NAME = "sparktap-jvm-transport"  # its spark.app.name


def pyspark_jars(line: SparkLine) -> Path:
    code = "import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / 'jars')"
    out = subprocess.run([line.python, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return Path(out.stdout.strip())


def java_home(line: SparkLine) -> Path:
    if line.java_home:
        return Path(line.java_home)
    javac = shutil.which("javac")
    assert javac is not None, "javac is needed to compile the test application"
    return Path(javac).resolve().parents[1]


def compile_app(line: SparkLine, out: Path, sources: list[Path], main: bool = True) -> Path:
    """Compile ``sources`` for the line's Java against its pyspark jars into a jar; return the jar."""
    javac = shutil.which("javac")
    assert javac is not None
    classes = out / "classes"
    classes.mkdir(parents=True)
    release = "8" if line.spark_version.startswith("3.") else "17"
    classpath = f"{pyspark_jars(line)}/*:{sparktap.listener.jar_path(line.spark_version)}"
    subprocess.run(
        [javac, "--release", release, "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", str(classes),
         *map(str, sources)],
        check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    jar = out / "app.jar"
    with zipfile.ZipFile(jar, "w") as zf:
        for path in sorted(classes.rglob("*.class")):
            zf.write(path, path.relative_to(classes).as_posix())
    return jar


def no_python_env(scratch: Path, line: SparkLine) -> dict[str, str]:
    """An environment whose PATH holds only `java`: no python, python3 or anything else resolves."""
    bin_dir = scratch / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(java_home(line) / "bin" / "java")
    path = str(bin_dir)
    assert shutil.which("python3", path=path) is None and shutil.which("python", path=path) is None
    return {"PATH": path, "HOME": str(scratch), "JAVA_HOME": str(java_home(line)), "SPARK_LOCAL_IP": "127.0.0.1",
            "TMPDIR": str(scratch), "LANG": "C.UTF-8"}  # fmt: skip


def spark_submit(
    line: SparkLine, scratch: Path, app_jar: Path, conf: dict[str, str], args: list[str]
) -> subprocess.Popen[bytes]:
    """SparkSubmit on its own class path (what bin/spark-submit runs, without the bash and python around it)."""
    env = no_python_env(scratch, line)
    confs = [x for key, value in conf.items() for x in ("--conf", f"{key}={value}")]
    listener_jar = str(sparktap.listener.jar_path(line.spark_version))
    cmd = ["java", "-Xmx1g", "-cp", f"{pyspark_jars(line)}/*", "org.apache.spark.deploy.SparkSubmit",
           "--master", "local[2]", "--class", APP_CLASS, "--jars", listener_jar, "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.local.dir={scratch}", *confs, str(app_jar), *args]  # fmt: skip
    log = (scratch / "driver.log").open("wb")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)  # "java" from env's PATH


def listener_conf(bootstrap: str, topic: str, spool: Path, **kafka: str) -> dict[str, str]:
    conf = {
        "spark.extraListeners": sparktap.listener.LISTENER_CLASS,  # no spark.sparktap.transport: kafka is the jar's
        "spark.sparktap.cluster": "test",
        "spark.sparktap.kafka.bootstrap.servers": bootstrap,
        "spark.sparktap.kafka.topic": topic,
        "spark.sparktap.relay.spoolDir": str(spool),
        "spark.sparktap.relay.flushTimeoutMs": "20000",
    }
    conf.update({f"spark.sparktap.kafka.{k}": v for k, v in kafka.items() if k != "bootstrap.servers"})
    return conf


def wait_for(proc: subprocess.Popen[bytes], path: Path, timeout: float) -> None:
    wait_until(lambda: path.exists() or proc.poll() is not None, timeout, path.name)
    assert path.exists(), f"the application exited ({proc.returncode}) before {path.name}"


def finish(proc: subprocess.Popen[bytes], scratch: Path, timeout: float = 240) -> dict[str, Any]:
    code = proc.wait(timeout=timeout)
    log = (scratch / "driver.log").read_text(errors="replace")
    assert code == 0, log[-4000:]
    counts = json.loads((scratch / "counts.json").read_text())
    assert counts["python"] is False  # no python could be started: the listener ran without one
    return dict(counts, log=log)


def events_of(values: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(v) for v in values]


def assert_exact(events: list[dict[str, Any]], counts: dict[str, Any]) -> dict[str, Any]:
    """Kafka holds Spark's own counts exactly, each seq once and none missing; returns the final listener_health."""
    seqs = [e["seq"] for e in events]
    assert len(seqs) == len(set(seqs)), "an event was sent twice"
    assert sorted(seqs) == list(range(1, max(seqs) + 1)), "an event is missing"
    types = [e["event_type"] for e in events]
    assert (types.count("job_end"), types.count("stage_completed"), types.count("task_end")) == (
        counts["jobs"], counts["stages"], counts["tasks"],
    )  # fmt: skip
    assert types.count("app_start") == 1 and types.count("app_end") == 1
    health = [e for e in events if e["event_type"] == "listener_health"]
    final = max(health, key=lambda e: e["seq"])
    assert final["seq"] == max(seqs) and final["events_dropped"] == 0 and final.get("kafka_events_lost", 0) == 0
    return final


def wait_records(bootstrap: str, topic: str, app_name: str = APP_NAME, **config: str) -> list[bytes]:
    """Every record of the finished application named ``app_name``: read until its final listener_health (its last
    seq) and all before it are in, then a second more (a surplus would show). The topic may hold other applications'
    events (the secured broker's one topic is shared): those are read and returned too."""

    def complete(records: list[Any]) -> bool:
        events = [e for e in (orjson.loads(r.value) for r in records) if e["app_name"] == app_name]
        if not events:
            return False
        last = max(x["seq"] for x in events)
        finals = [e for e in events if e["event_type"] == "listener_health" and e["seq"] == last]
        return (
            bool(finals)
            and any(e["event_type"] == "app_end" for e in events)
            and len({e["seq"] for e in events}) >= finals[0]["seq"]
        )

    if config:  # a secured broker: a group id its ACLs allow its users (sparktap-secure-*)
        config = {**config, "group.id": f"{SECURE_GROUP_PREFIX}{uuid.uuid4().hex[:8]}"}
    records = read_all(bootstrap, topic, 90.0, settle=1.0, until=complete, **config)
    return [r.value for r in records if r.value is not None]


def test_spark35_over_sasl_ssl_without_python_stores_sparks_exact_counts(
    secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    line = spark_line("3.5")
    app = compile_app(line, tmp_path / "build", [APPS / f"{APP_CLASS}.java"])
    scratch = tmp_path / "run"
    scratch.mkdir()
    settings = secure_kafka.config(RELAY_USER)  # librdkafka names: sasl.username/password, ssl.ca.location
    conf = listener_conf(secure_kafka.bootstrap_servers, secure_kafka.topic, tmp_path / "spool", **settings)
    proc = spark_submit(line, scratch, app, conf, [str(scratch / "counts.json")])
    counts = finish(proc, scratch)
    assert secure_kafka.password(RELAY_USER) not in counts["log"]
    assert "transport=kafka" in counts["log"]

    collector = secure_kafka.config("collector")
    values = [v for v in wait_records(secure_kafka.bootstrap_servers, secure_kafka.topic, **collector)]
    mine = [e for e in events_of(values) if e["app_name"] == APP_NAME and e["cluster"] == "test"]
    app_ids = {e["app_id"] for e in mine if e["event_type"] == "app_start"}
    assert len(app_ids) == 1
    events = [e for e in mine if e["app_id"] in app_ids]
    final = assert_exact(events, counts)
    assert final.get("relay_spooled", 0) == 0
    assert not list((tmp_path / "spool").glob("seg-*"))


def test_spark4_spools_while_the_broker_is_down_and_resends_in_order(
    kafka_broker: KafkaService, tmp_path: Path
) -> None:
    broker = kafka_broker.require_pausable()
    line = spark_line("4")
    app = compile_app(line, tmp_path / "build", [APPS / f"{APP_CLASS}.java"])
    scratch = tmp_path / "run"
    control = tmp_path / "control"
    control.mkdir()
    scratch.mkdir()
    topic = new_topic(kafka_broker.bootstrap_servers)
    spool = tmp_path / "spool"
    conf = listener_conf(kafka_broker.bootstrap_servers, topic, spool)
    conf["spark.sparktap.transport.stallMs"] = "3000"
    conf["spark.sparktap.relay.maxBackoffMs"] = "1000"
    conf["spark.sparktap.kafka.reconnect.backoff.max.ms"] = "500"  # a Java client name, taken as it is
    conf["spark.sparktap.kafka.queue.buffering.max.kbytes"] = "1024"  # librdkafka only: one log line, ignored
    proc = spark_submit(line, scratch, app, conf, [str(scratch / "counts.json"), str(control)])
    try:
        wait_for(proc, control / "phase-1", 180)
        broker.stop_keeping_data()
        try:
            (control / "go-1").touch()
            # phase 2 runs against a stopped broker: its events land in the spool
            segments = wait_until(
                lambda: [p for p in spool.glob("seg-*") if b"\n" in p.read_bytes()] or proc.poll() is not None,
                120,
                "a spooled event",
            )
            assert isinstance(segments, list), f"the application exited ({proc.returncode}) with nothing spooled"
            assert segments[0].stat().st_mode & 0o777 == 0o600 and spool.stat().st_mode & 0o777 == 0o700
            assert segments[0].read_bytes().split(b"\n", 1)[0] == b"#sparktap-spool 1 " + topic.encode()
            wait_for(proc, control / "phase-2", 180)
        finally:
            broker.start()
        (control / "go-2").touch()
        counts = finish(proc, scratch)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = counts["log"]
    assert "spark.sparktap.kafka.queue.buffering.max.kbytes is a librdkafka setting" in log
    assert "1024" not in re.findall(r"queue\.buffering\.max\.kbytes.*", log)[0]
    values = wait_records(kafka_broker.bootstrap_servers, topic)
    events = events_of(values)
    final = assert_exact(events, counts)
    assert final.get("relay_spooled", 0) > 0  # the outage was real: events went through the spool
    assert not [p.name for p in spool.glob("seg-*")]  # and all of it was resent
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs), "the spool was not resent oldest first, behind what the producer held"
    # and the collector stores Spark's counts exactly, with no seq gap
    assert stored_counts(kafka_broker.bootstrap_servers, topic, events[0]["app_id"], tmp_path / "chdb") == (
        counts["jobs"], counts["stages"], counts["tasks"], 0,
    )  # fmt: skip


def stored_counts(bootstrap: str, topic: str, app_id: str, store: Path) -> tuple[int, ...]:
    """The collector (in process, into chDB) on the topic: the application's stored jobs, stage attempts and task
    attempts, and its missing seqs, once its end is stored and every event before it (or the deadline)."""
    tables = ("job_end_dedup", "stage_completed_dedup", "task_end_dedup")
    with in_process(settings_for(bootstrap, topic, f"chdb://{store}", batch_interval_seconds=0.25)) as collector:

        def counted() -> tuple[int, ...]:
            storage = collector.storage
            assert storage is not None
            where = f"WHERE app_id = '{app_id}'"
            found = [storage.query(f"SELECT count() AS n FROM {storage.qualified(t)} {where}")[0]["n"] for t in tables]
            gaps = storage.query(f"SELECT missing FROM {storage.qualified('seq_gaps')} {where}")
            ends = storage.query(f"SELECT count() AS n FROM {storage.qualified('app_end')} {where}")[0]["n"]
            return (*map(int, found), int(gaps[0]["missing"]) if gaps and ends else -1)

        wait_until(lambda: counted()[-1] == 0, 120, "the application's end and every event before it in chDB")
        return counted()


PARTITIONS = 6


def test_the_jvm_producer_and_its_spool_send_the_relays_bytes(kafka_broker: KafkaService, tmp_path: Path) -> None:
    """The same 500 fixed events through the relay, the JVM producer, and the JVM's spool (an unreachable broker)
    drained by `sparktap relay-drain`: the same key, the same values byte for byte (but the serialisation clock)."""
    line = spark_line("4")
    harness = compile_app(line, tmp_path / "build", [APPS / "io" / "sparktap" / "listener" / "TransportContract.java"])
    classpath = f"{pyspark_jars(line)}/*:{sparktap.listener.jar_path(line.spark_version)}:{harness}"
    bootstrap = kafka_broker.bootstrap_servers
    values: dict[str, list[bytes]] = {}
    keys: dict[str, set[bytes | None]] = {}
    partitions: dict[str, set[int]] = {}
    for run, transport, target, seconds, start_ms in (
        ("relay", "relay", bootstrap, 30, 30_000),
        ("kafka", "kafka", bootstrap, 30, 30_000),
        ("spool", "kafka", "127.0.0.1:9", 4, 1000),  # nothing listens on port 9: everything is spooled
    ):
        topic = f"sparktap-contract-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, partitions=PARTITIONS)  # the same partition for the key on every path
        spool = tmp_path / f"spool-{run}"
        done = subprocess.run(
            ["java", "-cp", classpath, "io.sparktap.listener.TransportContract", transport, target, topic,
             str(spool), sys.executable, str(seconds), str(start_ms)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        spooled = 501 if run == "spool" else 0
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"written": 501, "spooled": spooled, "lost": 0}
        if run == "spool":
            assert len(list(spool.glob("seg-*.seg"))) == 1  # sealed at the end: any relay or relay-drain takes it
            drained = subprocess.run(
                [sys.executable, "-m", "sparktap", "relay-drain", "--spool-dir", str(spool), "--bootstrap-servers",
                 bootstrap, "--timeout", "60"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert drained.returncode == 0, drained.stderr
            assert drained.stdout.strip() == "drained segments=1 records=501 delivered=501 left_in_spool=0"
        records = read_all(bootstrap, topic, 60.0, settle=0.5, until=lambda r: len(r) >= 501)
        assert len(records) == 501
        keys[run] = {r.key for r in records}
        partitions[run] = {r.partition for r in records}
        # the one value that differs between two runs is the wall clock at serialisation
        values[run] = [re.sub(rb'"emitted_at_ms":\d+', b'"emitted_at_ms":0', r.value or b"") for r in records]
    assert keys["relay"] == keys["kafka"] == keys["spool"] == {b"app-20260101000000-0042"}
    # librdkafka's murmur2 partitioner is the Java client's: an application's events, live or resent from a spool by
    # relay-drain, share one partition (its order) on a topic of many
    assert partitions["relay"] == partitions["kafka"] == partitions["spool"] and len(partitions["relay"]) == 1
    assert values["kafka"][:500] == values["relay"][:500]  # the 500 events, byte for byte
    assert values["spool"][:500] == values["relay"][:500]
    healths = [orjson.loads(values[run][500]) for run in ("relay", "kafka", "spool")]
    assert {h["event_type"] for h in healths} == {"listener_health"}
    # the final listener_health accounts for each path: all delivered, or the 500 events before it spooled
    assert [h.get("relay_spooled", 0) for h in healths] == [0, 0, 500]


def test_the_demos_tansu_broker_takes_every_event_of_the_jvm_producer(tmp_path: Path) -> None:
    """tansu (the demo's embedded broker: Kafka's protocol, not its code) and the JVM producer (idempotent,
    ``acks=all``, zstd): a PySpark application on Spark 4 with ``transport=kafka`` delivers every event, valid, each
    seq once, nothing spooled, lost or refused."""
    topic = "sparktap.events"
    with TansuBroker(log_dir=tmp_path / "tansu") as broker:
        create_topic(broker.bootstrap_servers, topic)
        conf = sparktap.listener.spark_conf(
            spark_version=spark_line("4").spark_version,
            bootstrap_servers=broker.bootstrap_servers,
            topic=topic,
            transport="kafka",
            spool_dir=str(tmp_path / "spool"),
            cluster="demo",
            flush_timeout_ms=10_000,
        )
        app = run_app(spark_line("4"), tmp_path / "app", {"conf": conf, "light": True})
        assert app.returncode == 0, app.log[-3000:]
        assert app.out["results"] == {"w1": 1000}
        events = read_app_events(broker.bootstrap_servers, topic)
    assert_valid(events.events)
    types = events.types()
    # w1: one job of one stage, range(0, 1000) in 4 partitions collected
    assert [types[t] for t in ("app_start", "job_end", "stage_completed", "task_end", "app_end")] == [1, 1, 1, 4, 1]
    final = events.final_health
    assert events.seqs == list(range(1, final["seq"] + 1))
    assert [final.get(k, 0) for k in ("relay_spooled", "kafka_events_lost", "kafka_delivery_errors")] == [0, 0, 0]
    assert (final["events_accepted"], final["events_dropped"]) == (final["seq"] - 1, 0)  # every event before it

"""Run the demo end to end: broker → listener in sample Spark jobs → collector on chDB → findings, report, Grafana.

Everything the demo starts (broker, collector process, Spark) is stopped on the way out, also on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess  # noqa: S404 - the collector runs as its own process, as in production
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sparktap import DEFAULT_TOPIC
from sparktap.demo.jobs import DEMO_THRESHOLDS, JOBS, DemoJob
from sparktap.detection import Finding, Thresholds
from sparktap.errors import ServiceError, SparktapError
from sparktap.local.broker import TansuBroker
from sparktap.local.ports import free_port, wait_until

TOPIC = DEFAULT_TOPIC
CLUSTER = "demo"
LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
"""

Echo = Callable[[str], None]


class DemoError(SparktapError):
    """The demo could not complete."""


@dataclass
class DemoResult:
    output: Path
    store: Path
    apps: dict[str, str] = field(default_factory=dict)  # job name -> Spark application id
    findings: list[Finding] = field(default_factory=list)
    reports: dict[str, Path] = field(default_factory=dict)
    grafana: Path | None = None
    events: int = 0
    seconds: float = 0.0

    def findings_for(self, job: str) -> list[Finding]:
        app_id = self.apps.get(job)
        return [f for f in self.findings if f.app_id == app_id]


class DemoBroker(TansuBroker):
    """The demo's tansu broker, whose readiness-probe client goes before the broker does: a librdkafka client that
    outlives its broker logs "Connection refused" to stderr every second until the process exits, after the demo's
    findings table."""

    def stop(self) -> None:
        self._admin = None  # frees the AdminClient while the broker still answers: a clean close, no log line
        super().stop()


class Progress:
    """Step lines with elapsed time; while a job runs, a live line of Spark's stage progress."""

    def __init__(self, echo: Echo, stream: IO[str] | None = None) -> None:
        self.echo = echo
        self.start = time.monotonic()
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty()

    def step(self, message: str) -> None:
        self.echo(f"[{time.monotonic() - self.start:6.1f}s] {message}")

    @contextlib.contextmanager
    def spark_job(self, label: str, spark: Any) -> Iterator[None]:
        """Show ``label: stage N tasks done/total`` while the block runs (a line that rewrites itself on a TTY)."""
        done = threading.Event()
        tracker = spark.sparkContext.statusTracker()

        def render() -> str:
            parts = []
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    parts.append(f"stage {stage_id} {info.numCompletedTasks}/{info.numTasks} tasks")
            return f"  {label}: " + (", ".join(parts) if parts else "planning…")

        def loop() -> None:
            last = 0.0
            while not done.wait(0.25):
                line = render()
                if self.live:
                    self.stream.write("\r\033[K" + line)
                    self.stream.flush()
                elif time.monotonic() - last >= 5:
                    self.echo(line)
                    last = time.monotonic()

        thread = threading.Thread(target=loop, name="sparktap-demo-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            if self.live:
                self.stream.write("\r\033[K")
                self.stream.flush()


def _metrics(port: int) -> dict[str, float]:
    """The collector's Prometheus metrics summed over labels."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:  # noqa: S310
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def _count_events(bootstrap: str, app_ids: Iterable[str], timeout: float = 60.0) -> int:
    """Messages on the topic once every demo application's ``app_end`` is there and the topic is quiet.

    Read from the start without a consumer group: the broker's high watermark cannot be trusted to be the end.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    waiting = set(app_ids)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sparktap-demo-counter",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        partitions = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in partitions])
        count, quiet_since, deadline = 0, time.monotonic(), time.monotonic() + timeout
        while time.monotonic() < deadline:
            batch = consumer.consume(10_000, timeout=0.2)
            for message in batch:
                if message.error() is None:
                    count += 1
                    value = message.value() or b""
                    if b'"event_type":"app_end"' in value:
                        waiting.discard((message.key() or b"").decode())
            if batch:
                quiet_since = time.monotonic()
            elif not waiting and time.monotonic() - quiet_since >= 2.0:
                return count
        raise DemoError(
            f"the events of {len(waiting)} demo application(s) did not all reach Kafka within "
            f"{timeout:.0f}s; see the driver log in the demo's logs/ folder"
        )
    finally:
        consumer.close()


def _start_collector(bootstrap: str, store: Path, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTAP_")}
    command = [
        sys.executable,
        "-m",
        "sparktap",
        "collect",
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        TOPIC,
        "--storage-url",
        f"chdb://{store}",
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        str(port),
        "--log-format",
        "text",
        "--batch-interval",
        "0.5",
    ]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)  # noqa: S603


def _stop_process(process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _run_job(job: DemoJob, bootstrap: str, output: Path, progress: Progress) -> str:
    import warnings

    from pyspark.sql import SparkSession

    import sparktap.listener

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\..*)?")

    logs = output / "logs"
    log4j = logs / "log4j2.properties"
    log4j.write_text(LOG4J2.format(path=logs / "spark-driver.log"))
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(f"sparktap-demo-{job.name}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.warehouse.dir", str(output / "work" / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j.as_uri()}")
    )
    for key, value in job.conf.items():
        builder = builder.config(key, value)
    builder = sparktap.listener.enable(
        builder, bootstrap_servers=bootstrap, topic=TOPIC, cluster=CLUSTER, spool_dir=str(output / "spool")
    )
    spark = builder.getOrCreate()
    try:
        spark.sparkContext.setLogLevel("ERROR")
        app_id: str = spark.sparkContext.applicationId
        spark.sparkContext.setJobDescription(job.description)  # names its stages in the findings and the report
        with progress.spark_job(job.name, spark):
            job.run(spark, output / "work")
    finally:
        spark.stop()
    return app_id


def run_demo(
    output: Path, echo: Echo = print, jobs: Iterable[DemoJob] = JOBS, thresholds: Thresholds = DEMO_THRESHOLDS
) -> DemoResult:
    """Run the whole demo into ``output`` (its chDB store is made fresh each run)."""
    progress = Progress(echo)
    output = output.resolve()
    store = output / "chdb"
    shutil.rmtree(store, ignore_errors=True)
    for sub in ("logs", "work", "spool"):
        (output / sub).mkdir(parents=True, exist_ok=True)
    result = DemoResult(output=output, store=store)
    jobs = tuple(jobs)

    with contextlib.ExitStack() as stack:
        progress.step("starting the embedded Kafka broker (tansu)")
        broker = DemoBroker(log_dir=output / "logs")
        broker.start()
        stack.callback(broker.stop)
        broker.create_topic(TOPIC, partitions=1)

        progress.step(f"starting the collector: Kafka → chDB at {store}")
        port = free_port()
        log = stack.enter_context((output / "logs" / "collector.log").open("wb"))
        collector = _start_collector(broker.bootstrap_servers, store, port, log)
        stack.callback(_stop_process, collector)
        _wait_healthy(collector, port, output)

        for number, job in enumerate(jobs, 1):
            progress.step(f"job {number}/{len(jobs)} {job.name}: {job.description}")
            result.apps[job.name] = _run_job(job, broker.bootstrap_servers, output, progress)

        progress.step("waiting for the collector to land every event")
        result.events = _count_events(broker.bootstrap_servers, result.apps.values())
        wait_until(
            lambda: _landed(collector, port, result.events),
            timeout=120,
            what=f"collector landing {result.events} events",
        )
        _stop_process(collector)
        if collector.returncode != 0:
            log_file = output / "logs" / "collector.log"
            raise DemoError(f"the collector exited with {collector.returncode}; see {log_file}")

    progress.step(f"{result.events} events stored; running detection, writing reports and the Grafana bundle")
    _analyse(result, thresholds)
    result.seconds = time.monotonic() - progress.start
    return result


def _wait_healthy(collector: subprocess.Popen[bytes], port: int, output: Path) -> None:
    def healthy() -> bool:
        if collector.poll() is not None:
            raise ServiceError(
                f"the collector exited with {collector.returncode} at start; see {output / 'logs' / 'collector.log'}"
            )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:  # noqa: S310
            return bool(response.status == 200)

    wait_until(healthy, timeout=60, what="collector /healthz")


def _landed(collector: subprocess.Popen[bytes], port: int, expected: int) -> bool:
    if collector.poll() is not None:
        raise ServiceError(f"the collector exited with {collector.returncode} while landing events")
    metrics = _metrics(port)
    consumed = metrics.get("sparktap_collector_consumed_messages_total", 0.0)
    pending = metrics.get("sparktap_collector_pending_messages", 0.0)
    uncommitted = metrics.get("sparktap_collector_uncommitted_messages", 0.0)
    return consumed >= expected and pending == 0 and uncommitted == 0


def _analyse(result: DemoResult, thresholds: Thresholds) -> None:
    from sparktap.dashboards.export import export
    from sparktap.detection import Detector
    from sparktap.report.cli import write_report
    from sparktap.report.collect import collect
    from sparktap.store import open_storage
    from sparktap.store.target import parse_storage_url

    storage = open_storage(parse_storage_url(f"chdb://{result.store}"))
    try:
        version = storage.version()
        now_ms = int(time.time() * 1000)
        detector = Detector(
            storage.query, thresholds, storage.database, version, min_severity="warning", final_reads=True
        )
        result.findings = detector.findings(0, now_ms + 60_000)
        for job, app_id in result.apps.items():
            report = collect(
                storage.query,
                app_id,
                database=storage.database,
                version=version,
                source=f"chdb://{result.store}",
                thresholds=thresholds,
            )
            path = result.output / f"report-{job}.html"
            write_report(report, path)
            result.reports[job] = path
    finally:
        storage.close()
    result.grafana = result.output / "grafana"
    export(result.grafana)

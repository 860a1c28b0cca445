"""Benchmark (issue 15): alert latency, from a stage's completion in the Spark driver to the chat message at a local
receiver, with 10,000 other events/s flowing, embedded (chDB) and server (clickhouse-server 18.16) side by side.

    python -m bench.alert_latency [--stages 20] [--rate 10000] [--modes embedded,server] [--before] [--quick]

One local Apache Kafka broker (``tests/support/services/kafka.py``; ``SPARKTAP_BENCH_KAFKA=host:port`` for another)
and one HTTP receiver standing in for the generic webhook (``SPARKTAP_ALERTS__WEBHOOK_URL``) serve every run. Each
run gets a fresh topic (4 partitions) and store, and:

- ``sparktap collect`` as a process, default settings (a batch at 20,000 rows or 1 s); embedded: on a chDB
  directory with the alert settings, so the collector runs the alerter after each insert; server: into a database
  of one clickhouse-server 18.16 started here, with ``sparktap alert`` as a second process following its inserts
  (new parts looked for every ``SPARKTAP_ALERTS__FOLLOW_INTERVAL_SECONDS``, default 1 s);
- a producer process sending ``--rate`` realistic ``task_end`` events/s of other applications
  (``bench/_collector_data.py``, their times moved to the last minutes so the detection SQL reads them: eight
  applications at a time, new ones every 10 s, none ended, so their stages go through the running-stage path);
- a real Spark application (pyspark from this venv, local[2], the listener on) running ``--stages`` skewed stages one
  after another: 8 tasks, one sleeping 2 s and seven 0.25 s (task-time skew 8x; the rule's 5 s floor is lowered
  to 1 s through ``SPARKTAP_ALERTS__THRESHOLDS__TASK_TIME_SKEW__MIN_MAX_TASK_MS``), so each fires one finding.

Latency of a stage = the receiver's arrival time of its task-time-skew message - the stage's completion time in
the driver (the finding's ``detected_at_ms``: ``completion_time_ms`` of the stored ``stage_completed``; all on this
host's clock). The split: driver -> listener emitted (the stored ``emitted_at_ms``), emitted -> message.
``--before`` adds runs with event-driven alerting off (``SPARKTAP_ALERTS__EVENT_DRIVEN=false``, the periodic pass
every 60 s): each waits for the next pass, so it costs a minute or two per mode, and is off by default.

Prints one line per figure; never fails the suite (``make bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
STRAGGLER_S = 2.0
TASK_S = 0.25
TASKS = 8
MIN_MAX_TASK_MS = 1_000
POOL_EVENTS = 100_000
"""background events generated once, then replayed under new application ids (a new set every pool / rate s)"""


# ----------------------------------------------------------------------------------------------- background load


def _background_pool(count: int) -> list[bytes]:
    """``count`` realistic task_end messages of 8 applications, each application moved to have started 10 minutes
    ago (inside the alerter's lookback, not in the future), as JSON with an application id to rename per replay."""
    import orjson

    from bench._collector_data import task_events

    start = int(time.time() * 1000) - 600_000
    first: dict[str, int] = {}
    pool = []
    for event in task_events(count):
        event = dict(event)  # the generator reads its last event's finish time back for the next stage
        shift = start - first.setdefault(event["app_id"], event["launch_time_ms"])
        for name in ("launch_time_ms", "finish_time_ms", "event_time_ms", "emitted_at_ms"):
            event[name] += shift
        pool.append(orjson.dumps(event))
    return pool


def produce_background(bootstrap: str, topic: str, rate: int) -> None:
    """A paced producer process: ``rate`` events/s until SIGTERM; prints how many were delivered."""
    from confluent_kafka import Producer

    pool = _background_pool(POOL_EVENTS)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    delivered = [0]

    def done(err: object, _msg: object) -> None:
        if err is None:
            delivered[0] += 1

    print("producing", flush=True)
    started = time.monotonic()
    sent = 0
    replay = 0
    while not stop.is_set():
        old, new = b'"app_id":"app-20261122120000-', b'"app_id":"app-bg%05d-' % replay
        for value in pool:
            value = value.replace(old, new, 1)
            key = value[value.index(b'"app_id":"') + 10 :].split(b'"', 1)[0]
            while True:
                try:
                    producer.produce(topic, key=key, value=value, on_delivery=done)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
            if sent % 100 == 0:
                producer.poll(0)
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)  # pacing the producer
                if stop.is_set():
                    break
        replay += 1
    producer.flush(30)
    print(f"delivered {delivered[0]} in {time.monotonic() - started:.1f}s", flush=True)


# ----------------------------------------------------------------------------------------------- the receiver


@dataclass
class Receiver:
    """The generic webhook: the first firing task-time-skew message per (app_id, stage_id), with its arrival time."""

    arrivals: dict[tuple[str, int], tuple[float, dict[str, Any]]] = field(default_factory=dict)
    messages: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                arrived = time.time()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                finding = body.get("finding", {})
                with receiver.lock:
                    receiver.messages += 1
                    if body.get("status") == "firing" and finding.get("rule") == "task_time_skew":
                        receiver.arrivals.setdefault((finding["app_id"], int(finding["stage_id"])), (arrived, finding))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="receiver", daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def of(self, app_id: str) -> dict[int, tuple[float, dict[str, Any]]]:
        with self.lock:
            return {stage: got for (app, stage), got in self.arrivals.items() if app == app_id}

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


# ----------------------------------------------------------------------------------------------- processes


class Process:
    """A ``python -m …`` child with its own log file; stopped with SIGTERM (then SIGKILL) by its pid."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=ROOT,
            env=env,  # noqa: S603
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def check(self) -> None:
        from sparktap.errors import ServiceError

        if self.proc.poll() is not None:
            raise ServiceError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - 127.0.0.1
        text: str = response.read().decode()
        return text


def _metric(port: int, name: str) -> float:
    for line in _get(f"http://127.0.0.1:{port}/metrics").splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SPARKTAP_")}


# ----------------------------------------------------------------------------------------------- one run


@dataclass
class Run:
    mode: str
    event_driven: bool
    latencies: list[float] = field(default_factory=list)
    to_emitted: list[float] = field(default_factory=list)
    driver_gap: list[float] = field(default_factory=list)
    missing: int = 0
    stages: int = 0
    produced: str = ""
    evaluation: tuple[float, int] = (0.0, 0)
    """one event-driven evaluation's query on the final data (seconds, rows of task_end in the store)"""
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def label(self) -> str:
        return f"{self.mode}, {'event-driven' if self.event_driven else 'periodic only (before)'}"


def _skewed(i: int) -> int:
    time.sleep(STRAGGLER_S if i == 0 else TASK_S)  # the workload: one straggler task
    return i


def run_spark(bootstrap: str, topic: str, spool: Path, stages: int) -> tuple[str, list[tuple[int, float]]]:
    """A Spark application with the listener: ``stages`` skewed stages; (app_id, [(stage_id, job end s)])."""
    from bench._listener_common import listener_conf, session

    spark = session({**listener_conf(bootstrap, topic, spool), "spark.app.name": "sparktap-bench-alert-latency"})
    try:
        sc = spark.sparkContext
        app_id = sc.applicationId
        sc.parallelize(range(2), 2).count()  # warm-up: Python workers
        done = []
        for i in range(stages):
            group = f"skewed-{i}"
            sc.setJobGroup(group, f"skewed stage {i}")
            sc.parallelize(range(TASKS), TASKS).map(_skewed).count()
            ended = time.time()
            tracker = sc.statusTracker()
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                done.extend((int(stage), ended) for stage in (info.stageIds if info else []))
        return app_id, done
    finally:
        spark.stop()


def _time_evaluation(storage: Any, app_id: str) -> tuple[float, int]:
    """Time the detection query of one event-driven pass on the run's final data: this application and the latest
    eight background ones (best of 3); and the task_end rows the store holds by then."""
    from sparktap.detection.findings import Detector
    from sparktap.detection.settings import AlertSettings
    from sparktap.detection.sql import Scope

    table = f"{storage.database}.task_end"
    background = [
        str(r["app_id"])
        for r in storage.query(
            f"SELECT DISTINCT app_id FROM {table} WHERE app_id LIKE 'app-bg%' ORDER BY app_id DESC LIMIT 8"
        )
    ]  # noqa: S608
    total = int(storage.query(f"SELECT count() AS n FROM {table}")[0]["n"])  # noqa: S608
    alerts = AlertSettings(thresholds={"task_time_skew": {"min_max_task_ms": MIN_MAX_TASK_MS}})
    detector = Detector(
        storage.query,
        alerts.thresholds,
        storage.database,
        storage.version(),
        Scope.of(["bench", "prod-eu"], [app_id, *background]),
        None,
        alerts.min_severity,
    )
    now = int(time.time() * 1000)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        detector.findings(now - int(alerts.lookback_seconds * 1000), now + 60_000)
        best = min(best, time.perf_counter() - started)
    return best, total


def one_run(
    mode: str, event_driven: bool, args: argparse.Namespace, bootstrap: str, receiver: Receiver, server: Any, work: Path
) -> Run:
    from sparktap.local.broker import create_topic
    from sparktap.local.ports import free_port, wait_until
    from sparktap.store import open_storage
    from sparktap.store.target import StorageTarget

    run = Run(mode, event_driven)
    tag = uuid.uuid4().hex[:6]
    topic = f"bench-alerts-{tag}"
    create_topic(bootstrap, topic, partitions=4)
    directory = work / f"{mode}-{tag}"
    directory.mkdir()
    database = f"bench_alerts_{tag}"
    url = server.url(database) if mode == "server" else f"chdb://{directory / 'chdb'}"
    collector_port = free_port()
    alerts = {
        "SPARKTAP_ALERTS__WEBHOOK_URL": receiver.url,
        "SPARKTAP_ALERTS__STATE_PATH": str(directory / "alerter-state.json"),
        "SPARKTAP_ALERTS__EVENT_DRIVEN": "true" if event_driven else "false",
        "SPARKTAP_ALERTS__THRESHOLDS__TASK_TIME_SKEW__MIN_MAX_TASK_MS": str(MIN_MAX_TASK_MS),
    }
    base = {**_clean_env(), "SPARKTAP_CLICKHOUSE__URL": url, "SPARKTAP_LOG_LEVEL": "INFO"}
    collector_env = {
        **base,
        "SPARKTAP_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "SPARKTAP_KAFKA__TOPIC": topic,
        "SPARKTAP_KAFKA__GROUP_ID": f"bench-{tag}",
        "SPARKTAP_COLLECTOR__METRICS_HOST": "127.0.0.1",
        "SPARKTAP_COLLECTOR__METRICS_PORT": str(collector_port),
        "SPARKTAP_COLLECTOR__LOG_FORMAT": "text",
        **(alerts if mode == "embedded" else {}),
    }
    processes: list[Process] = []
    try:
        collector = Process("collector", ["sparktap", "collect"], collector_env, directory)
        processes.append(collector)

        def assigned() -> bool:
            collector.check()
            return _metric(collector_port, "sparktap_collector_assigned_partitions") >= 4

        wait_until(assigned, 120, "the collector's partitions")
        if mode == "server":
            alert_port = free_port()
            alerter = Process(
                "alerter",
                ["sparktap", "alert"],
                {**base, **alerts, "SPARKTAP_ALERTS__METRICS_PORT": str(alert_port)},
                directory,
            )
            processes.append(alerter)

            def evaluated() -> bool:
                alerter.check()
                return bool(json.loads(_get(f"http://127.0.0.1:{alert_port}/healthz"))["cycles"] >= 1)

            wait_until(evaluated, 120, "the alerter's first evaluation")
        producer = Process(
            "producer", ["bench.alert_latency", "--produce", bootstrap, topic, str(args.rate)], _clean_env(), directory
        )
        processes.append(producer)

        def flowing() -> bool:
            producer.check()
            collector.check()
            return _metric(collector_port, "sparktap_collector_consumed_messages_total") >= args.rate

        wait_until(flowing, 180, "the background events reaching the collector")
        load_start = os.getloadavg()[0]
        app_id, done = run_spark(bootstrap, topic, directory / "spool", args.stages)
        run.stages = len(done)
        wait_for = 90.0 + (0.0 if event_driven else 60.0)

        def all_alerts() -> bool:
            for p in processes:
                p.check()
            return len(receiver.of(app_id)) >= len(done)

        try:
            wait_until(all_alerts, wait_for, f"alerts for {len(done)} stages", interval=0.2)
        except Exception as exc:  # report what arrived
            print(f"  {mode}: {exc}", flush=True)
        run.load = (load_start, os.getloadavg()[0])
        got = receiver.of(app_id)
        ended = dict(done)
        producer.stop()
        run.produced = producer.tail(1)
        for p in reversed(processes[:-1]):
            p.stop()
        processes.clear()
        if mode == "server":
            storage = open_storage(server.target(database))
        else:
            storage = open_storage(StorageTarget(kind="chdb", path=directory / "chdb", database="sparktap"))
        with storage:
            rows = storage.query(
                "SELECT stage_id, completion_time_ms, emitted_at_ms "  # noqa: S608 - our identifiers
                f"FROM {storage.database}.stage_completed WHERE app_id = '{app_id}'"
            )
            run.evaluation = _time_evaluation(storage, app_id)
        emitted = {int(r["stage_id"]): (int(r["completion_time_ms"]), int(r["emitted_at_ms"])) for r in rows}
        for stage, job_end in ended.items():
            if stage not in got:
                run.missing += 1
                continue
            arrived, finding = got[stage]
            completed_ms = int(finding["detected_at_ms"])
            run.latencies.append(arrived - completed_ms / 1000)
            run.driver_gap.append(job_end - completed_ms / 1000)
            if stage in emitted:
                run.to_emitted.append((emitted[stage][1] - emitted[stage][0]) / 1000)
        return run
    finally:
        for p in reversed(processes):
            p.stop()


# ----------------------------------------------------------------------------------------------- report


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def report(runs: list[Run]) -> None:
    print("")
    print(f"{'run':<44} {'alerts':>7} {'p50':>7} {'p95':>7} {'max':>7}   driver -> emitted p50 / max")
    for run in runs:
        if not run.latencies:
            print(f"{run.label:<44} {0:>3}/{run.stages:<3} no alert arrived")
            continue
        lat = run.latencies
        print(
            f"{run.label:<44} {len(lat):>3}/{run.stages:<3} {_q(lat, 0.5):>6.2f}s {_q(lat, 0.95):>6.2f}s "
            f"{max(lat):>6.2f}s   {statistics.median(run.to_emitted or [0]):.2f}s / "
            f"{max(run.to_emitted or [0]):.2f}s   evaluation {run.evaluation[0]:.2f}s over "
            f"{run.evaluation[1]:,} task_end rows   (load {run.load[0]:.1f}-{run.load[1]:.1f}; {run.produced})"
        )
    gaps = [g for run in runs for g in run.driver_gap]
    if gaps:
        print(
            f"driver's action returned {min(gaps) * 1000:.0f}-{max(gaps) * 1000:.0f} ms after the stored stage "
            "completion time the latency is measured from"
        )
    after = [r for r in runs if r.event_driven and r.latencies]
    if after:
        worst = max(_q(r.latencies, 0.95) for r in after)
        print(f"target p95 < 10 s: {'met' if worst < 10 else 'MISSED'} (worst event-driven p95 {worst:.2f}s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=20)
    parser.add_argument("--rate", type=int, default=10_000, help="other events per second")
    parser.add_argument("--modes", default="embedded,server", help="embedded, server or both (comma-separated)")
    parser.add_argument(
        "--before", action="store_true", help="also run with event-driven alerting off (the periodic 60 s pass only)"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 5 stages")
    parser.add_argument("--produce", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "RATE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.produce:
        produce_background(args.produce[0], args.produce[1], int(args.produce[2]))
        return 0
    if args.quick:
        args.stages = min(args.stages, 5)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    from tests.support.services.clickhouse import ClickHouseServerProcess
    from tests.support.services.kafka import ApacheKafkaBroker

    external = os.environ.get("SPARKTAP_BENCH_KAFKA", "").strip()
    broker = None if external else ApacheKafkaBroker().start()
    server = ClickHouseServerProcess().start() if "server" in modes else None
    receiver = Receiver().start()
    runs: list[Run] = []
    try:
        with tempfile.TemporaryDirectory(prefix="sparktap-bench-alerts-") as tmp:
            bootstrap = external or (broker.bootstrap_servers if broker else "")
            print(
                f"{args.stages} skewed stages ({TASKS} tasks: one {STRAGGLER_S:g} s, the others {TASK_S:g} s) "
                f"with {args.rate:,} other events/s; Kafka {'external' if external else 'Apache Kafka (local)'}; "
                f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
                flush=True,
            )
            for event_driven in (True, False) if args.before else (True,):
                for mode in modes:
                    run = one_run(mode, event_driven, args, bootstrap, receiver, server, Path(tmp))
                    runs.append(run)
                    print(
                        f"  {run.label}: {len(run.latencies)}/{run.stages} alerts"
                        + (
                            f", p50 {_q(run.latencies, 0.5):.2f}s p95 {_q(run.latencies, 0.95):.2f}s"
                            if run.latencies
                            else ""
                        ),
                        flush=True,
                    )
    finally:
        receiver.close()
        if server is not None:
            server.close()
        if broker is not None:
            broker.stop()
    report(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

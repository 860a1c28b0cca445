"""Helpers for the collector's integration tests (this module holds no tests).

- ``produce``: events to a topic, returning the exact end offset of every partition from the delivery reports
  (tansu's high watermark cannot be trusted);
- ``committed``: a group's committed offsets, read without joining the group;
- ``InProcessCollector``: a Collector in a thread (chDB or server), stopped and joined on exit;
- ``CollectorProcess``: ``python -m sparktap collect`` as a child process, with its /metrics, RSS and log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from sparktap.collector.consumer import Collector, CollectorHooks
from sparktap.collector.integrity import IntegrityReport
from sparktap.local.ports import free_port, wait_until
from sparktap.schemas.examples import example_event
from sparktap.settings import Settings, load_settings

SESSION_TIMEOUT_MS = 6000  # the broker's minimum: a group join takes about this long on tansu
_TASK_END = {k: v for k, v in example_event("task_end").model_dump().items() if v not in (None, 0, False)}
# dated now, not at the examples' fixed date: the collector dead-letters events older than the retention (30 days)
_NOW_MS = int(time.time() * 1000)
_TASK_END.update(
    event_time_ms=_NOW_MS, emitted_at_ms=_NOW_MS + 500, launch_time_ms=_NOW_MS - 50, finish_time_ms=_NOW_MS
)


def task_end(app: int, seq: int, **changes: Any) -> bytes:
    """A small, valid task_end of application ``app-<app>`` (no zero or null fields, as the listener writes)."""
    return orjson.dumps({**_TASK_END, "app_id": f"app-{app:04d}", "seq": seq, "task_id": seq, **changes})


def events(n: int, apps: int = 4) -> Iterator[tuple[bytes, bytes]]:
    """``n`` (key, value) task_end events spread over ``apps`` applications, each with seq 1, 2, 3 …"""
    for i in range(n):
        app = i % apps
        yield f"app-{app:04d}".encode(), task_end(app, i // apps + 1)


def produce(
    bootstrap: str, topic: str, items: Iterable[tuple[bytes | None, bytes | None]], rate: float | None = None
) -> dict[int, int]:
    """Produce (key, value) pairs (idempotent, acks=all); returns {partition: end offset} from the delivery
    reports. ``rate`` (messages/s) spreads them out in time."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 10,
            "message.timeout.ms": 300_000,
        }
    )
    ends: dict[int, int] = {}
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    started = time.monotonic()
    for i, (key, value) in enumerate(items):
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        if rate is not None and i % 100 == 99:
            producer.poll(0)
            due = started + (i + 1) / rate  # pacing: serve delivery reports until this batch is due
            while (ahead := due - time.monotonic()) > 0:
                producer.poll(ahead)
        elif i % 1000 == 999:
            producer.poll(0)
    remaining = producer.flush(300)
    assert remaining == 0 and not errors, f"{remaining} undelivered, errors: {errors[:3]}"
    return ends


def committed(bootstrap: str, group: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The group's committed offsets (-1001 when none), read without joining the group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: tp.offset for tp in parts}
    finally:
        consumer.close()


def wait_committed(bootstrap: str, group: str, topic: str, ends: Mapping[int, int], timeout: float) -> None:
    """Wait until the group committed exactly the end offset of every partition: lag 0, counted exactly."""

    def done() -> bool:
        try:
            return committed(bootstrap, group, topic, ends) == dict(ends)
        except KafkaException:
            return False

    wait_until(done, timeout, f"group {group} committing {dict(ends)}", interval=0.5)


LIVE_COLLECTOR: dict[str, Any] = {"metrics_host": "127.0.0.1", "findings_port": 0, "batch_interval_seconds": 0.25}
"""``settings_for`` collector settings of a test that stores a live application's events: no fixed port, short
batches."""


def settings_for(bootstrap: str, topic: str, url: str, **collector: Any) -> Settings:
    return load_settings(
        kafka={"bootstrap_servers": bootstrap, "topic": topic, "group_id": f"collector-{uuid.uuid4().hex[:8]}"},
        clickhouse={"url": url},
        collector={"metrics_port": 0, "session_timeout_ms": SESSION_TIMEOUT_MS, "log_format": "text", **collector},
    )


def sample(collector: Collector, name: str, **labels: str) -> float:
    """Sum of a metric's samples (with these labels) on an in-process collector."""
    total = 0.0
    for family in collector.metrics.registry.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


@contextmanager
def in_process(settings: Settings, hooks: CollectorHooks | None = None) -> Iterator[Collector]:
    """A Collector running in a thread (``hooks`` attached, as ``sparktap collect`` does); stopped (flush, commit)
    and joined on exit. Errors in it fail the test."""
    collector = Collector(settings, hooks=hooks, install_signal_handlers=False)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            collector.run()
        except BaseException as exc:  # reported to the test below
            failure.append(exc)

    thread = threading.Thread(target=run, name="collector", daemon=True)
    thread.start()
    try:
        yield collector
    finally:
        collector.stop()
        thread.join(60)
        assert not thread.is_alive(), "the collector did not stop within 60 s"
    if failure:
        raise failure[0]


def wait_inserted(collector: Collector, rows: int, timeout: float) -> None:
    wait_until(
        lambda: sample(collector, "sparktap_collector_inserted_rows_total") >= rows,
        timeout,
        f"{rows} rows inserted",
        interval=0.1,
    )


def assert_integrity(report: IntegrityReport, expected: int) -> None:
    assert report.problems(expected) == [], report


# ----------------------------------------------------------------------------------------------- child process


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value} (and bare names summed over labels)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
        bare = key.split("{", 1)[0]
        if bare != key:
            out[bare] = out.get(bare, 0.0) + float(value)
    return out


class CollectorProcess:
    """``python -m sparktap collect`` as a child process (settings through SPARKTAP_* variables)."""

    def __init__(self, settings: Settings, log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.log_path = log_path
        self.port = free_port()
        self.extra_env = dict(env or {})
        self.argv = [sys.executable, "-m", "sparktap", "collect"]  # a test may add options
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        s = self.settings
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTAP_")}
        env.update(
            {
                "SPARKTAP_KAFKA__BOOTSTRAP_SERVERS": s.kafka.bootstrap_servers,
                "SPARKTAP_KAFKA__TOPIC": s.kafka.topic,
                "SPARKTAP_KAFKA__GROUP_ID": s.kafka.group_id,
                "SPARKTAP_CLICKHOUSE__URL": s.clickhouse.url.get_secret_value(),
                "SPARKTAP_COLLECTOR__METRICS_HOST": "127.0.0.1",
                "SPARKTAP_COLLECTOR__METRICS_PORT": str(self.port),
                "SPARKTAP_COLLECTOR__SESSION_TIMEOUT_MS": str(s.collector.session_timeout_ms),
                "SPARKTAP_COLLECTOR__BATCH_ROWS": str(s.collector.batch_rows),
                "SPARKTAP_COLLECTOR__BATCH_BYTES": str(s.collector.batch_bytes),
                "SPARKTAP_COLLECTOR__BATCH_INTERVAL_SECONDS": str(s.collector.batch_interval_seconds),
                "SPARKTAP_COLLECTOR__COMMIT_INTERVAL_SECONDS": str(s.collector.commit_interval_seconds),
                "SPARKTAP_COLLECTOR__MAX_MESSAGE_BYTES": str(s.collector.max_message_bytes),
                "SPARKTAP_COLLECTOR__PLAIN_COPY": "true" if s.collector.plain_copy else "false",
                "SPARKTAP_COLLECTOR__RETRY_BACKOFF_MAX_SECONDS": str(s.collector.retry_backoff_max_seconds),
                "SPARKTAP_COLLECTOR__LOG_FORMAT": "json",
            }
        )
        if s.collector.instance_id:
            env["SPARKTAP_COLLECTOR__INSTANCE_ID"] = s.collector.instance_id
        env.update(self.extra_env)
        return env

    def start(self) -> CollectorProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env(),
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:  # noqa: S310
            return parse_metrics(response.read().decode())

    def healthz(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as response:  # noqa: S310
                return response.status, orjson.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, orjson.loads(exc.read())

    def metric(self, name: str) -> float:
        return self.metrics().get(name, 0.0)

    def wait_metric(self, name: str, predicate: Callable[[float], bool], timeout: float) -> float:
        def check() -> tuple[float] | None:  # a tuple: a value of 0 must count as "arrived"
            if not self.alive():
                raise AssertionError(
                    f"the collector exited with {self.proc.returncode if self.proc else None}; log:\n{self.log_tail()}"
                )
            value = self.metric(name)
            return (value,) if predicate(value) else None

        (result,) = wait_until(check, timeout, f"{name} in the collector's /metrics", interval=0.05)
        return result

    def wait_metrics(self, predicate: Callable[[dict[str, float]], bool], timeout: float) -> dict[str, float]:
        """Poll /metrics until ``predicate(metrics)``; returns those metrics."""

        def check() -> dict[str, float] | None:
            if not self.alive():
                raise AssertionError(f"the collector exited; log:\n{self.log_tail()}")
            metrics = self.metrics()
            return metrics if predicate(metrics) else None

        result: dict[str, float] = wait_until(check, timeout, "a condition on the collector's /metrics", interval=0.02)
        return result

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def peak_rss_bytes(self) -> int:
        """The process's peak resident set so far (VmHWM)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no VmHWM in /proc/{self.pid}/status")

    def terminate(self, timeout: float = 60) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)

    def close(self) -> None:
        if self.alive():
            self.kill()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_entries(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    continue
        return out

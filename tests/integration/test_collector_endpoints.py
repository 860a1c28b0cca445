"""The collector's endpoints on a shared network (issue 21), on chDB with a real broker: ``/findings`` only with its
bearer token, ``since`` clamped to the retention, 50 concurrent requests while events are inserted (the inserts
keep flowing, every request answers within its limit), and the cluster labels of ``/metrics`` capped with the
overflow counted."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sparktap.collector.consumer import Collector, CollectorHooks
from sparktap.detection import Detector
from sparktap.detection.embedded import attach
from sparktap.local.broker import create_topic
from sparktap.local.ports import wait_until
from sparktap.schemas.examples import example_event
from tests.fixtures.kafka import KafkaService
from tests.support import detection_samples as samples
from tests.support.collector import events, in_process, parse_metrics, produce, sample, settings_for
from tests.support.detection import load

pytestmark = pytest.mark.integration

TOKEN = "findings-t0ken-canary"  # noqa: S105 - a test value, not a credential
LIMIT = 12.0  # findings_timeout_seconds: the wait for the one query at a time, and its max_execution_time
NOW_MS = int(time.time() * 1000)


class Running:
    def __init__(self, collector: Collector, topic: str, bootstrap: str) -> None:
        self.collector = collector
        self.topic = topic
        self.bootstrap = bootstrap
        assert collector.http is not None and collector.http.findings_port is not None
        self.findings = f"http://127.0.0.1:{collector.http.findings_port}/findings"
        self.metrics = f"http://127.0.0.1:{collector.http.port}/metrics"


def get(url: str, token: str | None = None, timeout: float = 60) -> tuple[int, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - 127.0.0.1
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - 127.0.0.1
            return response.status, json.loads(response.read()) if "json" in response.headers["Content-Type"] else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except TimeoutError:
        return 0, "client timeout"


@pytest.fixture(scope="module")
def running(kafka_broker: KafkaService, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    bootstrap = kafka_broker.bootstrap_servers
    topic = f"sparktap-endpoints-{NOW_MS}"
    create_topic(bootstrap, topic, partitions=1)
    store = Path(tmp_path_factory.mktemp("endpoints")) / "chdb"
    settings = settings_for(
        bootstrap,
        topic,
        f"chdb://{store}",
        metrics_host="127.0.0.1",
        findings_port=0,
        findings_token=TOKEN,
        findings_timeout_seconds=LIMIT,
        batch_interval_seconds=0.2,
    )
    hooks = CollectorHooks()
    attach(hooks, settings)
    with in_process(settings, hooks) as collector:
        wait_until(lambda: collector.storage is not None, 120, "the collector's store")
        yield Running(collector, topic, bootstrap)


def test_findings_need_the_token_and_since_is_clamped_to_the_retention(running: Running) -> None:
    storage = running.collector.storage
    assert storage is not None
    now_ms = int(time.time() * 1000)  # at the test, not the import: `since=2h` counts back from the request
    load(storage, [samples.skewed_join(app_id="app-endpoints", at_ms=now_ms - 3_600_000)])
    detector = Detector(storage.query, database=storage.database, version=storage.version())
    expected = sorted(f.key for f in detector.findings(now_ms - 2 * 3_600_000, now_ms + 60_000))
    assert expected  # the skewed join's findings

    assert get(running.findings + "?since=2h")[0] == 401
    assert get(running.findings + "?since=2h", "wrong-token")[0] == 401
    code, body = get(running.findings + "?since=2h", TOKEN)
    assert code == 200 and (body["clamped"], body["since"], body["notice"]) == (False, "2h", "")
    assert sorted(f["key"] for f in body["findings"]) == expected

    code, body = get(running.findings + "?since=100000w", TOKEN)
    assert code == 200 and (body["clamped"], body["since"]) == (True, "30d")
    assert body["notice"] == (
        "since=100000w is longer than the retention (30 days): clamped to 30d (SPARKTAP_CLICKHOUSE__RETENTION_DAYS)"
    )
    assert sorted(f["key"] for f in body["findings"]) == expected


def test_50_concurrent_requests_while_events_are_inserted(running: Running) -> None:
    cap = 90_000  # 60 s at 1,500/s: the producer runs until the burst is over, well within that
    collector = running.collector
    before = sample(collector, "sparktap_collector_inserted_rows_total", table="task_end")
    stop = threading.Event()
    produced = [0]

    def until_stopped() -> Iterator[tuple[bytes, bytes]]:
        # a fixed count could all be stored before the burst began on a loaded host (then no insert can happen
        # during it): the producer goes on until the burst has ended
        for item in events(cap):
            if stop.is_set():
                return
            produced[0] += 1
            yield item

    producer = threading.Thread(
        target=produce, args=(running.bootstrap, running.topic, until_stopped(), 1_500.0), daemon=True
    )
    producer.start()
    wait_until(
        lambda: sample(collector, "sparktap_collector_inserted_rows_total", table="task_end") > before,
        60,
        "the first inserted rows",
        interval=0.05,
    )
    answers: list[tuple[int, float, Any]] = []

    def ask() -> None:
        started = time.monotonic()
        code, body = get(running.findings + "?since=1d", TOKEN, timeout=4 * LIMIT)
        answers.append((code, time.monotonic() - started, body))

    during = sample(collector, "sparktap_collector_inserted_rows_total", table="task_end")
    askers = [threading.Thread(target=ask, daemon=True) for _ in range(50)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(4 * LIMIT)
    after_burst = sample(collector, "sparktap_collector_inserted_rows_total", table="task_end")
    stop.set()
    producer.join(120)
    total = produced[0]
    assert 0 < total < cap  # still producing when the burst ended

    assert len(answers) == 50
    seen = sorted((code, round(elapsed, 1)) for code, elapsed, _ in answers)
    codes = {code for code, _ in seen}
    # 200: answered; 503: no turn within LIMIT; 504: the query hit max_execution_time. At least one query ran.
    assert codes <= {200, 503, 504} and codes & {200, 504}, seen
    # each answers within its limit: the wait for its turn, then the query's max_execution_time, plus slack
    assert max(elapsed for _, elapsed in seen) < 2 * LIMIT + 10, seen
    for code, _, body in answers:
        if code == 503:
            assert body == {
                "error": f"another /findings query is running; none finished within {LIMIT:g} s, retry later"
            }
    assert after_burst > during  # inserts went on during the burst

    storage = collector.storage
    assert storage is not None
    apps = ", ".join(f"'app-{i:04d}'" for i in range(4))

    def stored() -> int:
        rows = storage.query(
            f"SELECT uniqExact(app_id, seq) AS n FROM {storage.qualified('task_end')} WHERE app_id IN ({apps})"  # noqa: S608
        )
        return int(rows[0]["n"])

    wait_until(lambda: stored() == total, 60, f"{total} task_end rows stored", interval=0.2)


def test_cluster_labels_in_metrics_are_capped_and_the_overflow_counted(running: Running) -> None:
    clusters = 2_000
    now = int(time.time() * 1000)

    def health(i: int) -> tuple[bytes, bytes]:
        event = example_event(
            "listener_health",
            cluster=f"cluster-{i:05d}",
            app_id=f"app-20261122120000-{i:04d}",
            events_dropped=1,
            event_time_ms=now,
            emitted_at_ms=now,
        )
        return event.app_id.encode(), orjson.dumps(event.model_dump(mode="json"))

    produce(running.bootstrap, running.topic, (health(i) for i in range(clusters)))
    wait_until(
        lambda: sample(running.collector, "sparktap_listener_events_dropped_total") == clusters,
        60,
        "2,000 drops counted",
        interval=0.1,
    )
    with urllib.request.urlopen(running.metrics, timeout=30) as response:  # noqa: S310 - 127.0.0.1
        text = response.read().decode()
    named = {
        line.split('cluster="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("sparktap_listener_events_dropped_total{")
    }
    metrics = parse_metrics(text)
    assert len(named - {"_other"}) == 1_000
    assert metrics['sparktap_listener_events_dropped_total{cluster="_other"}'] == 1_000
    assert metrics["sparktap_collector_metrics_clusters_overflow"] == 1_000

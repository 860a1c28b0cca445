"""What the plan and streaming rules' end-to-end modules (``test_detection_plans.py``, ``test_detection_streaming.py``)
share: a listener's topic collected by the real collector (in this process) into chDB or clickhouse-server, a wait
until every event is stored (``collecting`` and ``stored`` serve ``test_native_fallback.py`` too), the rules run over
the window around now, and the new panels' queries (the streaming dashboard, the plan panels) run over the same
store; ``on_both`` checks that chDB and clickhouse-server 18.16 give the very same findings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sparktap.collector.consumer import Collector
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.dashboards import all_dashboards, panels_of
from sparktap.detection import Detector, Finding, Thresholds
from sparktap.detection.macros import expand, interpolate
from sparktap.local.ports import wait_until
from sparktap.store import Storage
from tests.fixtures.clickhouse import ClickHouseServer, drop_database, random_database
from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import AppEvents
from tests.support.collector import in_process, settings_for
from tests.support.dashboard_columns import PANEL_COLUMNS

HOUR_MS = 3_600_000


def window() -> tuple[int, int]:
    now = int(time.time() * 1000)
    return now - HOUR_MS, now + HOUR_MS


def stored(storage: Storage, events: AppEvents) -> bool:
    """Every event of the application is in ClickHouse (one row per event type and seq)."""
    for event_type, count in events.types().items():
        rows = storage.query(f"SELECT count() AS n FROM {storage.database}.{event_type}_dedup")
        if int(rows[0]["n"]) < count:
            return False
    return True


@contextmanager
def collecting(kafka: KafkaService, topic: str, url: str) -> Iterator[Collector]:
    """The collector (in this process) reading the application's topic into the store at ``url``."""
    with in_process(settings_for(kafka.bootstrap_servers, topic, url)) as collector:
        wait_until(lambda: collector.storage is not None, 60.0, "the collector's store to open")
        yield collector


def detect(storage: Storage, rules: tuple[str, ...], **thresholds: Any) -> list[Finding]:
    """The findings of ``rules`` over the store, in the hour either side of now."""
    detector = Detector(
        storage.query,
        database=storage.database,
        version=storage.version(),
        rules=rules,
        thresholds=Thresholds(**thresholds),
    )
    return detector.findings(*window())


NEW_PANELS = [
    key
    for key in PANEL_COLUMNS
    if key[0] == "sparktap-streaming"
    or key in (("sparktap-application", "Plan: estimated vs actual rows"), ("sparktap-application", "Codegen coverage"))
]


def panel_rows(storage: Storage, app_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every new panel's query (streaming dashboard, plan panels) run over this store for this application, the
    macros expanded and the variables set as Grafana would; each returns at least the columns its panel reads,
    on chDB and on clickhouse-server 18.16 (time series bucket with ``$__interval_s``, ``dashboards/panels.py``)."""
    cfg = GrafanaConfig(database=storage.database, clickhouse_version=storage.version())
    sql = {
        (b["uid"], p["title"]): p["targets"][0]["rawSql"]
        for b in all_dashboards(cfg)
        for p in panels_of(b)
        if p.get("targets")
    }
    out = {}
    for key in NEW_PANELS:
        final = expand(interpolate(sql[key], {"cluster": ["test"], "app": app_id}), *window(), interval_ms=1000)
        rows = storage.query(final)
        columns = list(rows[0]) if rows else [str(r["name"]) for r in storage.query(f"DESCRIBE TABLE ({final})")]
        assert set(PANEL_COLUMNS[key]) <= set(columns), (key, columns)
        out[key[1]] = rows
    return out


PanelCheck = Callable[[dict[str, list[dict[str, Any]]]], None]


def collected_findings(
    kafka: KafkaService,
    topic: str,
    events: AppEvents,
    url: str,
    rules: tuple[str, ...],
    check: PanelCheck | None = None,
    **thresholds: Any,
) -> list[Finding]:
    """Collect a finished application's topic into the store at ``url`` and return its findings; ``check`` gets
    the rows of the new panels over the same store."""
    with collecting(kafka, topic, url) as collector:
        storage = collector.storage
        assert storage is not None
        wait_until(lambda: stored(storage, events), 120.0, f"all {len(events.events)} events stored")
        if check is not None:
            check(panel_rows(storage, events.events[0]["app_id"]))
        return detect(storage, rules, **thresholds)


@contextmanager
def server_database(server: ClickHouseServer) -> Iterator[str]:
    """A fresh database on ``server``: its URL, the database dropped afterwards."""
    database = random_database()
    try:
        yield server.url(database)
    finally:
        drop_database(server, database)


def on_both(
    kafka: KafkaService,
    topic: str,
    events: AppEvents,
    tmp_path: Path,
    server_url: str,
    rules: tuple[str, ...],
    check: PanelCheck,
    **thresholds: Any,
) -> list[Finding]:
    """The findings from chDB; the same topic collected into clickhouse-server gives the very same findings. The new
    panels' queries pass ``check`` on both."""
    embedded = collected_findings(kafka, topic, events, f"chdb://{tmp_path / 'chdb'}", rules, check, **thresholds)
    served = collected_findings(kafka, topic, events, server_url, rules, check, **thresholds)
    assert sorted(f.key for f in served) == sorted(f.key for f in embedded)
    assert {f.key: (f.severity, f.evidence, f.explanation, f.suggested_fix) for f in served} == {
        f.key: (f.severity, f.evidence, f.explanation, f.suggested_fix) for f in embedded
    }
    return embedded

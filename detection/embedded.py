"""The alerter inside the collector: embedded (chDB) mode, where only the collector's process may open the store.

``attach(hooks, settings)`` adds the alerter to a collector's hooks (``collector.consumer.CollectorHooks``) when
the store is chDB and a chat channel is configured: it starts once the schema is in place, evaluates the
applications of every batch right after ClickHouse accepted it (event-driven: seconds after the evidence lands),
keeps its periodic pass for re-notifies and aged-out resolves, and stops with the collector. The composition root
(``sparktap.cli``) wires it into ``sparktap collect``; the collector itself knows nothing of detection.

With a ClickHouse server the collector does not alert (several collectors share a group, and each would send the
same message): ``sparktap alert`` does, following the server's new parts.

The same process answers ``sparktap findings`` for its store: ``/findings`` (``findings_route``), since no other
process can open the chDB directory meanwhile. It is served on its own listener (``findings_host``, 127.0.0.1 by
default) only when ``SPARKTAP_COLLECTOR__FINDINGS_TOKEN`` is set, and only to requests bearing that token. The
collector's ``/healthz`` reports the alerter's loop heartbeat (``liveness``): a dead or stuck alerter makes it 503.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from typing import TYPE_CHECKING, Any

from sparktap.detection.notify import channels_from_settings
from sparktap.errors import SparktapError

if TYPE_CHECKING:
    from sparktap.collector.consumer import CollectorHooks
    from sparktap.detection.alerter import Alerter
    from sparktap.detection.settings import DetectionSettings
    from sparktap.endpoints import Route
    from sparktap.store import Storage

log = logging.getLogger(__name__)


class EmbeddedDetection:
    """Detection inside a collector on chDB: ``/findings``, and the alerter when a channel is configured
    (``alerter`` is set once the store is open, and None again after the collector stopped)."""

    def __init__(self, settings: DetectionSettings, alerting: bool) -> None:
        self.settings = settings
        self.alerting = alerting
        self.storage: Storage | None = None
        self.alerter: Alerter | None = None
        self._one_query = threading.Lock()
        self._route: Route | None = None
        self._route_storage: Storage | None = None

    def ready(self, storage: Storage) -> None:
        self.storage = storage
        if not self.alerting:
            return
        from sparktap.detection.alerter import Alerter

        alerter = Alerter.from_storage(storage, self.settings.alerts)
        alerter.start()
        self.alerter = alerter
        log.info(
            "alerter running in the collector: event-driven after each insert, and every %g s; %d channel(s)",
            self.settings.alerts.interval_seconds,
            len(alerter.channels),
        )

    def inserted(self, apps: set[tuple[str, str]]) -> None:
        if self.alerter is not None:
            self.alerter.inserted(apps)

    def stopped(self) -> None:
        alerter, self.alerter = self.alerter, None
        if alerter is not None:
            alerter.stop(timeout=60)
        self.storage = None  # /findings answers 503 from now on; a query under way ends before the store closes
        if self._one_query.acquire(timeout=self.settings.collector.findings_timeout_seconds + 5):
            self._one_query.release()

    def liveness(self) -> str:
        """For the collector's ``/healthz``: '' while the alerter's loop comes round (or no alerter runs)."""
        alerter = self.alerter
        return "" if alerter is None else alerter.liveness()

    def findings(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        storage, route = self.storage, self._route
        if storage is None:
            return 503, {"error": "the collector's store is not open (starting or stopping); retry in a few seconds"}
        if route is None or self._route_storage is not storage:
            route = self._route = findings_route(self.settings, storage, self._one_query)
            self._route_storage = storage
        return route(query)


def attach(hooks: CollectorHooks, settings: DetectionSettings) -> EmbeddedDetection | None:
    """In a collector on chDB: serve ``/findings``, and run the alerter when a channel is configured. None for a
    ClickHouse server (``sparktap alert`` serves it)."""
    target = settings.clickhouse.target()
    alerts = settings.alerts
    alerting = bool(channels_from_settings(alerts.slack_webhook_url, alerts.teams_webhook_url, alerts.webhook_url))
    alerting = alerting or alerts.routing_path is not None
    if not target.capabilities.embedded:
        if alerting:
            log.info(
                "alert channels are configured but the store is a ClickHouse server: run `sparktap alert` "
                "beside the collectors (it follows their inserts); the collector itself does not alert"
            )
        return None
    if alerts.routing_path is not None:
        from sparktap.detection.routing import Router, load_routing

        # a bad file, or a channel whose URL is missing, stops the collector at start, one line per problem
        Router.build(load_routing(alerts.routing_path), [], alerts.renotify_seconds, alerts.send_timeout_seconds)
    detection = EmbeddedDetection(settings, alerting)
    hooks.ready.append(detection.ready)
    hooks.inserted.append(detection.inserted)
    hooks.stopped.append(detection.stopped)
    hooks.routes["/findings"] = detection.findings
    hooks.checks["alerter"] = detection.liveness
    return detection


def findings_route(settings: DetectionSettings, storage: Storage, one_at_a_time: threading.Lock | None = None) -> Route:
    """``GET /findings?since=2h&app=…&cluster=…&min_severity=…`` on the collector: its store's findings,
    ``{"findings": [Finding.to_dict(), …], "since": …, "clamped": bool, "notice": …}``.

    ``since`` is capped at the store's retention (``clamped`` and ``notice`` say so); one query runs at a time,
    with ClickHouse ``max_execution_time`` = ``findings_timeout_seconds``; a request that waits longer than that for
    its turn gets 503 (retry later), so inserts keep the store most of the time."""
    from sparktap.detection.findings import FindingsRequest, find, parse_since

    limit = settings.collector.findings_timeout_seconds
    retention_days = settings.clickhouse.retention_days
    one_at_a_time = one_at_a_time or threading.Lock()

    def bounded(sql: str) -> list[dict[str, Any]]:
        if sql.startswith("DROP "):  # a staged pass's clean-up (findings.Detector): no SETTINGS clause on 18.16
            return storage.query(sql)
        return storage.query(f"{sql}\nSETTINGS max_execution_time = {max(1, math.ceil(limit))}")

    def route(query: dict[str, list[str]]) -> tuple[int, Any]:
        try:
            request = FindingsRequest.from_query(query)
        except ValueError as exc:
            return 400, {"error": str(exc)}
        notice = ""
        if parse_since(request.since) > retention_days * 86400:
            notice = (
                f"since={request.since} is longer than the retention ({retention_days} days): clamped to "
                f"{retention_days}d (SPARKTAP_CLICKHOUSE__RETENTION_DAYS)"
            )
            request = dataclasses.replace(request, since=f"{retention_days}d")
        if not one_at_a_time.acquire(timeout=limit):
            return 503, {"error": f"another /findings query is running; none finished within {limit:g} s, retry later"}
        try:
            found = find(
                bounded,
                request,
                database=storage.database,
                version=storage.version(),
                thresholds=settings.alerts.thresholds,
                final_reads=storage.target.cluster is None,
            )
        except SparktapError as exc:
            if "TIMEOUT_EXCEEDED" not in str(exc):
                raise  # a generic 500; the cause is logged
            return 504, {
                "error": f"the findings query ran longer than findings_timeout_seconds={limit:g}; ask for less "
                "(a shorter since, an app or a cluster)"
            }
        finally:
            one_at_a_time.release()
        return 200, {
            "findings": [f.to_dict() for f in found],
            "since": request.since,
            "clamped": bool(notice),
            "notice": notice,
        }

    return route

"""The built-in alerter: for teams without Grafana alerting.

It runs the detection SQL (the very text of the Grafana alert rules, macros expanded for the last ``lookback``) in
two ways:

- **event-driven**, seconds after the evidence lands: ``inserted(apps)`` tells it which applications just got rows
  (the collector calls it after each insert in embedded mode; ``follow(storage)`` watches the new parts of a
  ClickHouse server or of every shard of a cluster for ``sparktap alert``, ``detection/follow.py``), and it
  evaluates those applications at once — new findings are sent while the stage after the skewed one is still
  running;
- **periodically**, every ``interval``, over everything: re-notifies, and resolves of findings that aged out.

Per channel, both passes:

- sends one message per *new* finding at or above ``min_severity``;
- repeats a finding still open only after ``renotify`` (or at once when its severity went up);
- sends a resolve when a finding it announced is no longer returned (``cleared``, or ``aged_out`` when it fell
  out of the lookback window).

Stored findings: after each pass, every finding it evaluated (all severities, info included) is written to the
``findings`` table (``finding_store.py``; ``AlertSettings.store_findings``), which the overview and cluster findings
panels read. A failed write is logged once per kind of failure and never stops alerting; the next pass writes again.

State — the open findings and, per channel, when and at which severity each was last sent — lives in a JSON file
(``AlertSettings.state_path``, written atomically after every delivery: ``alerter_state.py``), so a restart, even a
kill in the middle of a cycle, neither repeats nor forgets. A finding's key is rule + cluster + application attempt
+ stage attempt (or SQL execution + AQE node): it does not change while a running stage's numbers move or when the
stage completes. A message that fails is retried next cycle for that channel only; a 429 is sent once more after
its Retry-After (up to ``max_retry_after_seconds``). At most ``send_budget`` messages go per evaluation, none
started after ``cycle_deadline_seconds``; ``abort()`` (SIGTERM) sends nothing more. Webhook URLs are never logged.

A pass cannot end the loop: scope values (cluster, application ids) go into the SQL after the macros are expanded,
and whatever a pass raises is logged in one line. ``liveness()`` reads the loop's heartbeat (the collector's
``/healthz`` reports it in embedded mode).

Embedding (chDB is opened by one process only, so in embedded mode the collector runs the alerter: see
``detection/embedded.py``)::

    alerter = Alerter.from_storage(storage, settings.alerts)
    alerter.start()          # a daemon thread: event-driven passes, and a full pass every interval
    alerter.inserted({("prod", "app-1")})   # after an insert: evaluate app-1 now
    ...
    alerter.stop()           # returns once the current cycle is over
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from sparktap.detection.alerter_delivery import CycleReport, Delivery
from sparktap.detection.alerter_silences import Muting
from sparktap.detection.alerter_state import (
    STATE_VERSION,
    AlerterError,
    FileState,
    MemoryState,
    Send,
    StateStore,
    forget_resolved,
    open_sends,
    resolve_sends,
)
from sparktap.detection.finding_store import FindingsStore
from sparktap.detection.findings import Detector, Finding, QueryFn
from sparktap.detection.notify import (
    Channel,
    channels_from_settings,
)
from sparktap.detection.routing import Router, load_routing
from sparktap.detection.settings import AlertSettings
from sparktap.detection.silences import SilenceStore, silenced
from sparktap.detection.sql import DEFAULT_DATABASE, Scope
from sparktap.detection.thresholds import SEVERITIES, Severity
from sparktap.endpoints import HttpEndpoints, serve
from sparktap.errors import SparktapError
from sparktap.schemas.ddl import LATEST_VERSION

__all__ = ["STATE_VERSION", "Alerter", "AlerterError", "CycleReport", "FileState", "MemoryState", "serve_metrics"]
if TYPE_CHECKING:
    from sparktap.store.protocol import Storage

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------- alerter


class Alerter:
    """Evaluates the detection SQL on an interval and notifies the channels (see the module docstring)."""

    def __init__(
        self,
        query: QueryFn,
        settings: AlertSettings,
        *,
        channels: Sequence[Channel] | None = None,
        state: StateStore | None = None,
        router: Router | None = None,
        silences: SilenceStore | None = None,
        database: str = DEFAULT_DATABASE,
        version: tuple[int, ...] = LATEST_VERSION,
        clock: Callable[[], float] = time.time,
        final_reads: bool = False,
        findings_store: FindingsStore | None = None,
    ) -> None:
        self.settings = settings
        self.findings_store = findings_store
        self._store_failures: set[str] = set()
        """the kinds of write failure logged since the findings were last stored"""
        legacy: list[Channel] = (
            list(channels)
            if channels is not None
            else list(
                channels_from_settings(
                    settings.slack_webhook_url,
                    settings.teams_webhook_url,
                    settings.webhook_url,
                    settings.send_timeout_seconds,
                )
            )
        )
        if router is None:
            routing = load_routing(settings.routing_path) if settings.routing_path is not None else None
            router = Router.build(routing, legacy, settings.renotify_seconds, settings.send_timeout_seconds)
        self.router = router
        self.channels: list[Channel] = router.channels
        if not self.channels:
            raise AlerterError(
                "no alert channel configured: set SPARKTAP_ALERTS__SLACK_WEBHOOK_URL, "
                "SPARKTAP_ALERTS__TEAMS_WEBHOOK_URL or SPARKTAP_ALERTS__WEBHOOK_URL, or a routing file "
                "(SPARKTAP_ALERTS__ROUTING_PATH)"
            )
        if router.default is None:
            raise AlerterError(
                f'routing file path="{settings.routing_path}" has no default: route and no '
                "SPARKTAP_ALERTS__*_URL channel is set, so a finding no route takes would go nowhere; add "
                "default: {channels: [...]} to the file"
            )
        self.silences = silences
        self.muting = Muting(silences)
        self.state = state if state is not None else FileState(settings.state_path)
        self.detector = Detector(
            query,
            settings.thresholds,
            database,
            version,
            Scope.of(settings.clusters),
            None,
            self._evaluated_severity,
            final_reads,
        )
        self.clock = clock
        self.database = database
        self.version = version
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._pending: set[tuple[str, str]] = set()
        self._pending_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.cycles = 0
        """Evaluations whose query has run so far (full and event-driven; counted before their messages go)."""
        self.event_cycles = 0
        """Event-driven evaluations whose query has run so far."""
        self.last_report: CycleReport | None = None
        self.heartbeat_at = time.monotonic()
        """when the loop (or a delivery) last came round: ``liveness`` and the collector's /healthz read it"""
        self._running = False
        self._abort = threading.Event()
        self.delivery = Delivery(settings, lambda st: self.state.save(st), self._abort, self._beat)
        self.registry = CollectorRegistry()
        self._m_cycles = Counter("sparktap_alerter_cycles", "Evaluations of the detection SQL", registry=self.registry)
        self._m_errors = Counter(
            "sparktap_alerter_cycle_errors", "Evaluations whose query failed", registry=self.registry
        )
        self._m_findings = Gauge(
            "sparktap_alerter_findings", "Findings returned by the last evaluation", registry=self.registry
        )
        self._m_sent = Counter(
            "sparktap_alerter_notifications", "Messages delivered", ["channel", "status"], registry=self.registry
        )
        self._m_failed = Counter(
            "sparktap_alerter_notification_failures",
            "Messages a channel did not accept",
            ["channel"],
            registry=self.registry,
        )
        self._m_last = Gauge(
            "sparktap_alerter_last_cycle_timestamp_seconds", "When the last evaluation ended", registry=self.registry
        )
        self._m_store_errors = Counter(
            "sparktap_alerter_findings_store_failures",
            "Passes whose findings could not be written to the findings table",
            registry=self.registry,
        )
        self._m_event_cycles = Counter(
            "sparktap_alerter_event_cycles",
            "Event-driven evaluations (applications that just got rows)",
            registry=self.registry,
        )

    @classmethod
    def from_storage(cls, storage: Storage, settings: AlertSettings, **kwargs: Any) -> Alerter:
        """An alerter reading through an open ``collector.storage.Storage`` (its database and server version)."""
        if "silences" not in kwargs:
            kwargs["silences"] = SilenceStore.of(storage, kwargs.get("clock", time.time))
        kwargs.setdefault("final_reads", storage.target.cluster is None)
        if settings.store_findings and "findings_store" not in kwargs:
            kwargs["findings_store"] = FindingsStore(storage)
        return cls(storage.query, settings, database=storage.database, version=storage.version(), **kwargs)

    @property
    def sql(self) -> str:
        """The detection query, with Grafana macros."""
        return self.detector.sql

    # ------------------------------------------------------------------------------------------- one cycle

    def evaluate(self, now_ms: int | None = None) -> CycleReport:
        """One evaluation: query, notify, persist the state. Never raises for a failed query or channel."""
        return self._record(self._evaluate(now_ms))

    def evaluate_apps(self, apps: Iterable[tuple[str, str]], now_ms: int | None = None) -> CycleReport:
        """An event-driven evaluation of these (cluster, app_id) applications only: sends their new (or
        escalated) findings and resolves theirs that cleared. Never raises for a failed query or channel."""
        wanted = {(c, a) for c, a in apps if not self.settings.clusters or c in self.settings.clusters}
        if not wanted:
            return CycleReport(at_ms=int(self.clock() * 1000) if now_ms is None else now_ms)
        scope = Scope.of(sorted({c for c, _ in wanted}), sorted({a for _, a in wanted}))
        detector = Detector(
            self.detector.query,
            self.settings.thresholds,
            self.database,
            self.version,
            scope,
            None,
            self._evaluated_severity,
            self.detector.final_reads,
        )
        return self._record(self._evaluate(now_ms, detector, wanted))

    def _evaluate(
        self, now_ms: int | None, detector: Detector | None = None, apps: set[tuple[str, str]] | None = None
    ) -> CycleReport:
        with self._lock:
            now = int(self.clock() * 1000) if now_ms is None else now_ms
            report = CycleReport(at_ms=now)
            window_from = now - int(self.settings.lookback_seconds * 1000)
            try:
                findings = (detector or self.detector).findings(window_from, now + 60_000)
            except Exception as exc:  # noqa: BLE001 - a bad value or a failed query ends this pass, never the loop
                report.error = str(exc) if isinstance(exc, SparktapError) else f"{type(exc).__name__}: {exc}"
                log.warning("alerter: %s", report.summary())
                self._counted(apps)
                return report
            self._counted(apps)  # before sending: whoever sees the messages sees the pass counted
            if apps is not None:  # Scope.of filters clusters and apps apart: keep the exact pairs
                findings = [f for f in findings if (f.cluster, f.app_id) in apps]
            self._store(findings, now, (detector or self.detector).scope, window_from, apps)
            lowest = SEVERITIES.index(self.settings.min_severity)
            findings = [f for f in findings if f.severity_rank >= lowest]
            report.findings = len(findings)
            state = self.state.load()
            current = {f.key: f for f in findings}
            silences = self.muting.active(now)
            teams = self.router.teams
            muted = {k: (s, f) for k, f in current.items() if (s := silenced(silences, f, now, teams)) is not None}
            unmuted = {k: f for k, f in current.items() if k not in muted}
            report.silenced = len(muted)
            self.muting.audit(list(muted.values()), now, whole_pass=apps is None)
            sends = self._open_sends(state, unmuted, now)
            resolves, resolving = self._resolve_sends(state, current, now, window_from, apps)
            self._send_all([*sends, *resolves], state, report)
            self._forget_resolved(state, resolving)
            self.state.save(state)
            if apps is None or report.sent or report.failed:
                log.info(
                    "alerter: %s%s",
                    report.summary(),
                    "" if apps is None else f" ({len(apps)} application(s) that just got rows)",
                )
            return report

    @property
    def _evaluated_severity(self) -> Severity:
        """Every severity when the findings are stored (the panels show info too), else the lowest one sent."""
        return "info" if self.findings_store is not None else self.settings.min_severity

    def _store(
        self, findings: list[Finding], now: int, scope: Scope, window_from: int, apps: set[tuple[str, str]] | None
    ) -> None:
        """Write the pass's findings to the findings table; a failure is logged once per kind and never stops the pass
        (the next pass writes again)."""
        if self.findings_store is None:
            return
        try:
            self.findings_store.write(findings, now, scope, window_from, apps)
        except Exception as exc:  # noqa: BLE001 - storing findings for the dashboards must never stop alerting
            kind = type(exc).__name__
            if kind not in self._store_failures:
                detail = str(exc).splitlines()[0] if str(exc) else kind
                log.warning(
                    "alerter: cannot store the findings (alerts go on; the next pass writes them again): %s: %s",
                    kind,
                    detail,
                )
            self._store_failures.add(kind)
            self._m_store_errors.inc()
            return
        if self._store_failures:
            log.info("alerter: storing the findings again")
        self._store_failures.clear()

    def _counted(self, apps: set[tuple[str, str]] | None) -> None:
        self.cycles += 1
        if apps is not None:
            self.event_cycles += 1
            self._m_event_cycles.inc()

    def _record(self, report: CycleReport) -> CycleReport:
        self.last_report = report
        self._m_cycles.inc()
        if report.error:
            self._m_errors.inc()
        else:
            self._m_findings.set(report.findings)
        for channel, note in report.sent:
            self._m_sent.labels(channel, note.status).inc()
        for channel, _ in report.failed:
            self._m_failed.labels(channel).inc()
        self._m_last.set(self.clock())
        return report

    def healthy(self) -> tuple[bool, dict[str, Any]]:
        """Alive when the loop has evaluated within three intervals (a failing query is reported, not fatal:
        restarting would not bring ClickHouse back), its thread (when started) is alive and its heartbeat fresh."""
        last = self.last_report
        age = None if last is None else self.clock() - last.at_ms / 1000
        stalled = self.liveness()
        alive = (last is None or age is None or age <= 3 * self.settings.interval_seconds + 60) and not stalled
        return alive, {
            "cycles": self.cycles,
            "seconds_since_last_cycle": age,
            "last_error": None if last is None else last.error,
            "reason": stalled,
        }

    def liveness(self) -> str:
        """'' while the loop comes round; else why not: its thread died, or no heartbeat for ``stall_seconds``."""
        thread = self._thread
        if thread is not None and not thread.is_alive() and not self._stop.is_set():
            return "the alerter thread has ended"
        if not self._running:
            return ""
        silent = time.monotonic() - self.heartbeat_at
        if silent > self.settings.stall_seconds:
            return (
                f"the alerter loop has not come round for {silent:.0f} s "
                f"(stall_seconds={self.settings.stall_seconds:g})"
            )
        return ""

    def _beat(self) -> None:
        self.heartbeat_at = time.monotonic()

    # ------------------------------------------------------------------------------------------- sending

    def _open_sends(self, state: dict[str, Any], current: dict[str, Finding], now: int) -> list[Send]:
        return open_sends(state, current, now, self.router.targets, self.settings.grafana_url)

    def _resolve_sends(
        self,
        state: dict[str, Any],
        current: dict[str, Finding],
        now: int,
        window_from: int,
        apps: set[tuple[str, str]] | None = None,
    ) -> tuple[list[Send], list[str]]:
        return resolve_sends(state, current, now, window_from, self.channels, self.settings.grafana_url, apps)

    def _forget_resolved(self, state: dict[str, Any], keys: Iterable[str]) -> None:
        forget_resolved(state, keys, self.channels)

    def _send_all(self, sends: Sequence[Send], state: dict[str, Any], report: CycleReport) -> None:
        self.delivery.send_all(sends, state, report)

    # ------------------------------------------------------------------------------------------- the loop

    def inserted(self, apps: Iterable[tuple[str, str]]) -> None:
        """(cluster, app_id) pairs that just got rows in ClickHouse: the loop evaluates them at once (thread-safe,
        never blocks; what arrives during an evaluation is coalesced into the next one)."""
        if not self.settings.event_driven:
            return
        with self._pending_lock:
            self._pending.update(apps)
        self._wake.set()

    def _take_pending(self) -> set[tuple[str, str]]:
        with self._pending_lock:
            apps, self._pending = self._pending, set()
        return apps

    def run(self, stop: threading.Event | None = None, cycles: int | None = None) -> None:
        """Until ``stop`` is set (or ``cycles`` full evaluations were made): a full evaluation every ``interval``,
        and an event-driven one as soon as ``inserted`` names applications."""
        stop = stop or self._stop
        self._running = True
        done = 0
        next_full = self.clock()
        try:
            while not stop.is_set():
                self._beat()
                if self.clock() >= next_full:
                    started = self.clock()
                    self._pass(self.evaluate)
                    done += 1
                    if cycles is not None and done >= cycles:
                        return
                    next_full = started + self.settings.interval_seconds
                apps = self._take_pending()
                if apps:
                    self._pass(self.evaluate_apps, apps)
                    continue
                self._wake.wait(max(0.0, min(next_full - self.clock(), 0.5)))
                self._wake.clear()
        finally:
            self._running = False

    def _pass(self, evaluation: Callable[..., CycleReport], *args: Any) -> None:
        """One pass; whatever it raises (an unwritable state file …) is logged in one line, and the loop goes on."""
        try:
            evaluation(*args)
        except Exception as exc:  # noqa: BLE001 - one bad pass must not end the alerter
            log.error("alerter: the pass failed, the next one goes on: %s: %s", type(exc).__name__, exc)

    def abort(self) -> None:
        """Stop mid-cycle (SIGTERM of ``sparktap alert``): no further message is sent, a Retry-After wait ends at
        once; every message delivered so far is in the state already. The loop then stops as ``stop`` does."""
        self._abort.set()
        self._stop.set()
        self._wake.set()

    def _halted(self) -> bool:
        return self._abort.is_set()

    def follow(self, storage: Storage, stop: threading.Event | None = None) -> threading.Thread:
        """Watch a ClickHouse server, or every shard of a cluster, for newly inserted rows (``detection/follow.py``)
        and evaluate their applications at once: what ``sparktap alert`` does beside a collector it does not share a
        process with."""
        from sparktap.detection.follow import follower_for

        stop = stop or self._stop
        follower = follower_for(storage)
        interval = self.settings.follow_interval_seconds

        def loop() -> None:
            failing = False
            try:
                while not stop.wait(interval):
                    try:
                        apps = follower.poll()
                    except SparktapError as exc:
                        if not failing:
                            log.warning(
                                "alerter: cannot read new parts (event-driven alerts paused, the periodic "
                                "pass goes on): %s",
                                exc,
                            )
                        failing = True
                        continue
                    if failing:
                        log.info("alerter: reading new parts again")
                    failing = False
                    if apps:
                        self.inserted(apps)
            finally:
                follower.close()

        thread = threading.Thread(target=loop, name="sparktap-alerter-follow", daemon=True)
        thread.start()
        return thread

    def start(self) -> threading.Thread:
        """Run in a daemon thread (for a collector process that owns the store)."""
        if self._thread is not None and self._thread.is_alive():
            return self._thread
        self._stop.clear()
        self._abort.clear()
        self._thread = threading.Thread(target=self.run, name="sparktap-alerter", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float | None = None) -> None:
        """Ask the loop to stop and wait for the current cycle to end (``abort`` first: without finishing it)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def serve_metrics(alerter: Alerter, port: int, host: str = "127.0.0.1") -> HttpEndpoints:
    """``/metrics`` (Prometheus exposition) and ``/healthz`` (JSON; 503 when the loop stalled) in a daemon thread,
    on the shared endpoint server (``sparktap/endpoints.py``); ServiceError when the port is taken."""

    def health() -> tuple[int, dict[str, Any]]:
        alive, detail = alerter.healthy()
        return (200 if alive else 503), detail

    return serve(
        host,
        port,
        "/metrics",
        "SPARKTAP_ALERTS__METRICS_PORT",
        registries=[alerter.registry],
        health=health,
        name="sparktap-alerter-metrics",
    )

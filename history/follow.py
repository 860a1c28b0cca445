"""``sparktap import --follow``: the long-running log follower (the Helm chart's ``follower`` deployment).

Every ``interval`` seconds it imports the new and grown logs of its paths (checkpointed), until SIGTERM or SIGINT.
A cycle that fails (the destination unreachable) is reported and retried at the next look, not fatal: restarting
the follower would not bring Kafka or ClickHouse back. With a metrics port it serves, on the shared endpoint server
(``sparktap/endpoints.py``):

- ``/metrics``: ``sparktap_import_logs_total``, ``sparktap_import_events_total{family}``,
  ``sparktap_import_errors_total{kind}`` (``skipped``, ``stopped``, ``refused``, ``cycle``),
  ``sparktap_import_cycles_total``, ``sparktap_import_last_cycle_timestamp_seconds`` and
  ``sparktap_import_lag_seconds``: how long the oldest change not yet imported has waited (the age of the oldest
  new or grown log at the start of the running cycle, 0 once a cycle has imported everything);
- ``/healthz``: 200 while cycles come round (one is running for less than its deadline, or the last ended within
  three intervals + 60 s), 503 otherwise; JSON with the cycles, the last error, the seconds since the last cycle
  and how long the running one has taken.

A cycle can stop making progress (a log on a hung file system, a replay JVM stopped): ``/healthz`` then says 503 once
it has run past ``--cycle-deadline``, so the pod is restarted. On SIGTERM the follower finishes the log it is on, or
kills its replay after ``--stop-grace`` seconds, delivers what it had replayed and exits.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import click
from prometheus_client import CollectorRegistry, Counter, Gauge

from sparktap.endpoints import HttpEndpoints, serve
from sparktap.errors import ServiceError
from sparktap.history.importer import Importer, Summary
from sparktap.history.sources import expand, shown

PROBLEMS = (("skipped", "skipped"), ("stopped early", "stopped"), ("refused", "refused"))


class FollowMetrics:
    def __init__(self, interval: float, clock: Callable[[], float] = time.time, deadline: float = 900.0) -> None:
        self.interval = interval
        self.deadline = deadline
        self.clock = clock
        self.registry = CollectorRegistry()
        r = self.registry
        self.logs = Counter("sparktap_import_logs", "Event logs imported (read to their end)", registry=r)
        self.events = Counter("sparktap_import_events", "Contract events sent", ["family"], registry=r)
        self.errors = Counter(
            "sparktap_import_errors",
            "Logs skipped or stopped early, events refused, cycles that failed",
            ["kind"],
            registry=r,
        )
        self.cycles = Counter("sparktap_import_cycles", "Looks at the followed paths", registry=r)
        self.last = Gauge("sparktap_import_last_cycle_timestamp_seconds", "When the last cycle ended", registry=r)
        self.lag = Gauge(
            "sparktap_import_lag_seconds", "Age of the oldest log change not yet imported (0: caught up)", registry=r
        )
        self.lag.set_function(self.lag_seconds)
        self.pending_since: float | None = None
        self.in_cycle = False
        self.cycle_start: float | None = None
        self.last_end: float | None = None
        self.last_error: str | None = None
        self.count = 0

    def lag_seconds(self) -> float:
        since = self.pending_since
        return 0.0 if since is None else max(0.0, self.clock() - since)

    def begin(self, paths: list[str], importer: Importer) -> None:
        self.in_cycle = True
        self.cycle_start = self.clock()
        logs, _skipped = expand(paths, importer.follow_symlinks)
        changed = [log.mtime_ns for log in logs if not importer.checkpoint.unchanged(log.path, log.size, log.mtime_ns)]
        self.pending_since = min(changed) / 1e9 if changed else None

    def end(self, summary: Summary | None, error: str | None) -> None:
        self.count += 1
        self.cycles.inc()
        self.in_cycle = False
        self.last_end = self.clock()
        self.last.set(self.last_end)
        self.last_error = error
        if error is not None:
            self.errors.labels("cycle").inc()
            return
        assert summary is not None  # noqa: S101 - a cycle without an error has its summary
        self.pending_since = None
        self.logs.inc(summary.logs)
        for family, n in summary.events.items():
            self.events.labels(family).inc(n)
        self.errors.labels("skipped").inc(len(summary.skipped))
        self.errors.labels("stopped").inc(len(summary.stopped))
        self.errors.labels("refused").inc(sum(summary.rejected.values()))

    def health(self) -> tuple[int, dict[str, Any]]:
        now = self.clock()
        age = None if self.last_end is None else now - self.last_end
        running = now - self.cycle_start if self.in_cycle and self.cycle_start is not None else None
        if running is not None:
            alive = running <= self.deadline
        else:
            alive = age is None or age <= 3 * self.interval + 60
        return (200 if alive else 503), {
            "cycles": self.count,
            "in_cycle": self.in_cycle,
            "cycle_seconds": running,
            "stuck": running is not None and running > self.deadline,
            "seconds_since_last_cycle": age,
            "last_error": self.last_error,
            "lag_seconds": self.lag_seconds(),
        }


def follow(
    importer: Importer,
    paths: list[str],
    interval: float,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    cycle_deadline: float = 900.0,
    stop_grace: float = 10.0,
) -> int:
    """Import, wait, import again (only new and grown logs), until SIGTERM or SIGINT; one summary line per cycle
    that found something, each problem reported once."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        if stop.is_set():
            return
        stop.set()
        importer.stopping.set()  # no new log is started; the one being replayed has stop_grace to end
        timer = threading.Timer(stop_grace, importer.abort)
        timer.daemon = True
        timer.start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    metrics = FollowMetrics(interval, deadline=cycle_deadline)
    endpoints: HttpEndpoints | None = None
    if metrics_port is not None:
        endpoints = serve(
            metrics_host, metrics_port, "/metrics and /healthz", "--metrics-port",
            registries=[metrics.registry], health=metrics.health, name="sparktap-import-metrics",
        )  # fmt: skip
        click.echo(f"serving /metrics and /healthz on {metrics_host}:{endpoints.port}")
    reported: set[str] = set()
    click.echo(f"following {len(paths)} paths every {interval:g} s (checkpoint {importer.checkpoint.path})")
    sys.stdout.flush()
    try:
        while not stop.is_set():
            metrics.begin(paths, importer)
            try:
                summary = importer.run(paths)
            except ServiceError as exc:
                metrics.end(None, shown(str(exc)))
                click.echo(f"import cycle failed (retried in {interval:g} s): {shown(str(exc))}")
                sys.stdout.flush()
                stop.wait(interval)
                continue
            metrics.end(summary, None)
            lines = summary.lines()
            problems = [line for line in lines if line.startswith(tuple(p for p, _ in PROBLEMS))]
            new = [line for line in problems if line not in reported]
            reported.update(new)
            if summary.logs:
                click.echo(lines[0])
            for line in new:
                click.echo(line)
            sys.stdout.flush()
            stop.wait(interval)
    finally:
        if endpoints is not None:
            endpoints.close()
    click.echo("stopped following")
    return 0

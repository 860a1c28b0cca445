"""Command: ``sparktap alert``, the built-in alerter (``alerter.py``)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import click

from sparktap.errors import SparktapError


@click.command("alert")
@click.option("--once", is_flag=True, help="Evaluate once, send, and exit.")
@click.option("--interval", type=float, default=None, help="Seconds between evaluations "
              "(default: SPARKTAP_ALERTS__INTERVAL_SECONDS).")
def alert_command(once: bool, interval: float | None) -> None:
    """The built-in alerter: evaluate the detection SQL on an interval and notify Slack / Teams / a webhook.

    Reads ClickHouse through SPARKTAP_CLICKHOUSE__URL (a server, or a chDB directory no other process holds: in
    embedded mode the collector runs the alerter itself)."""
    from sparktap.collector.storage import open_storage
    from sparktap.detection.alerter import Alerter, serve_metrics
    from sparktap.settings import load_settings

    settings = load_settings()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    alerts = settings.alerts if interval is None else settings.alerts.model_copy(update={"interval_seconds": interval})
    target = settings.clickhouse.target()
    try:
        storage = open_storage(target)
    except SparktapError as exc:
        if target.kind == "chdb":
            raise SparktapError(f"{exc}. In embedded mode the collector process owns the store and runs the "
                                "alerter itself (SPARKTAP_ALERTS__* settings); run `sparktap alert` against a "
                                "ClickHouse server instead") from exc
        raise
    with storage:
        alerter = Alerter.from_storage(storage, alerts)
        if once:
            report = alerter.evaluate()
            click.echo(report.summary())
            if report.error:
                raise SparktapError(f"alert evaluation failed: {report.error}")
            return
        stop = threading.Event()

        def _stop(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        metrics = serve_metrics(alerter, alerts.metrics_port) if alerts.metrics_port is not None else None
        click.echo(f"sparktap alerter: every {alerts.interval_seconds:g} s on {storage.redacted_url}, "
                   f"{len(alerter.channels)} channel(s)"
                   + (f", /metrics and /healthz on port {alerts.metrics_port}" if metrics else ""))
        try:
            alerter.run(stop)
        finally:
            if metrics is not None:
                metrics.shutdown()


COMMANDS: list[click.Command] = [alert_command]

"""The alerter's delivery: messages sent in order within a pass's budget and deadline, each recorded as soon as
a channel took it, a 429 retried once after its Retry-After (``alerter.py`` runs the passes)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparktap.detection.alerter_state import Send
from sparktap.detection.notify import Notification, NotifyError, RateLimitedError
from sparktap.detection.settings import AlertSettings

log = logging.getLogger("sparktap.detection.alerter")


@dataclass
class CycleReport:
    """What one evaluation did."""

    at_ms: int
    findings: int = 0
    sent: list[tuple[str, Notification]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None
    silenced: int = 0
    """findings a silence kept from being sent"""

    def summary(self) -> str:
        if self.error:
            return f"evaluation failed: {self.error}"
        firing = sum(1 for _, n in self.sent if n.status == "firing")
        return (
            f"{self.findings} finding(s); sent {firing} alert(s) and {len(self.sent) - firing} resolve(s); "
            f"{len(self.failed)} failed" + (f"; {self.silenced} silenced" if self.silenced else "")
        )


class Delivery:
    """Sends a pass's messages (``send_all``); ``save`` writes the state after each delivery, ``abort`` (SIGTERM)
    stops sending, ``beat`` tells the loop's heartbeat that delivery is still moving."""

    def __init__(
        self,
        settings: AlertSettings,
        save: Callable[[dict[str, Any]], None],
        abort: threading.Event,
        beat: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.save = save
        self.abort = abort
        self.beat = beat

    def send_all(self, sends: Sequence[Send], state: dict[str, Any], report: CycleReport) -> None:
        """Send in order, each delivery recorded in the state and the state saved at once (a kill after 7 of 10
        re-sends none of the 7). At most ``send_budget`` messages per evaluation, none started after
        ``cycle_deadline_seconds`` or once stopping: those wait for the next evaluation (a channel timing out on
        every message no longer holds the loop for the whole cycle)."""
        if not sends:
            return
        budget = self.settings.send_budget
        if len(sends) > budget:
            log.warning(
                "alerter: send budget reached: %d message(s) wait for the next evaluation (send_budget=%d)",
                len(sends) - budget,
                budget,
            )
            sends = sends[:budget]
        deadline = time.monotonic() + self.settings.cycle_deadline_seconds
        for position, send in enumerate(sends):
            if self.abort.is_set() or time.monotonic() > deadline:
                why = "stopping" if self.abort.is_set() else "cycle_deadline_seconds reached"
                log.info("alerter: %d message(s) wait for the next evaluation (%s)", len(sends) - position, why)
                return
            if self.deliver(send, report, deadline):
                send.sent[send.channel.name] = send.record
                self.save(state)
            self.beat()

    def deliver(self, send: Send, report: CycleReport, deadline: float) -> bool:
        """One message; after a 429, wait its Retry-After (up to ``max_retry_after_seconds`` and the deadline) and
        send it once more."""
        channel, notification = send.channel, send.note
        try:
            try:
                channel.send(notification)
            except RateLimitedError as limited:
                wait = limited.retry_after
                if wait > self.settings.max_retry_after_seconds or time.monotonic() + wait > deadline:
                    raise
                log.info("alerter: %s; sending again in %g s", limited, wait)
                if self.abort.wait(wait):
                    raise NotifyError(
                        f"{channel.name}: stopping before the rate-limited message could be sent"
                    ) from limited
                channel.send(notification)
        except NotifyError as exc:
            report.failed.append((channel.name, str(exc)))
            log.warning("alerter: %s", exc)
            return False
        report.sent.append((channel.name, notification))
        return True

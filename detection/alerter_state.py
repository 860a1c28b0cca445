"""The alerter's state and its transitions: what is due to be sent (``open_sends``, ``resolve_sends``), what to
forget once sent (``forget_resolved``), and where the state lives (``FileState``: a JSON file replaced atomically;
``MemoryState``). The alerter (``alerter.py``) saves the state after every delivery."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sparktap.detection.findings import Finding
from sparktap.detection.notify import Channel, Notification, Reason, dashboard_url
from sparktap.detection.routing import Target
from sparktap.detection.thresholds import SEVERITIES
from sparktap.errors import SparktapError

STATE_VERSION = 1


class AlerterError(SparktapError):
    """The alerter cannot run (no channel, unreadable state, store held by another process …)."""


class StateStore(Protocol):
    def load(self) -> dict[str, Any]: ...

    def save(self, state: dict[str, Any]) -> None: ...


class MemoryState:
    """State kept in memory only (tests, or a process that accepts repeats after a restart)."""

    def __init__(self) -> None:
        self._state: dict[str, Any] = {}

    def load(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._state))  # a copy, as a file would give

    def save(self, state: dict[str, Any]) -> None:
        self._state = json.loads(json.dumps(state))


class FileState:
    """State in a JSON file, replaced atomically (write a temporary file, fsync, rename)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise AlerterError(
                f'cannot read alerter state path="{self.path}": {exc}; fix or delete the file (open findings will '
                "then be announced again)"
            ) from exc
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise AlerterError(f'alerter state path="{self.path}" has an unknown format; delete it to start afresh')
        open_findings: dict[str, Any] = data.get("open", {})
        return open_findings

    def save(self, state: dict[str, Any]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".alerter-state-", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"version": STATE_VERSION, "open": state}, handle, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            raise AlerterError(
                f'cannot write alerter state path="{self.path}": {exc.strerror}; check the '
                "directory (SPARKTAP_ALERTS__STATE_PATH) and its permissions"
            ) from exc


@dataclass(frozen=True)
class Send:
    """A message due: on delivery, ``sent[channel.name] = record`` (the finding's entry in the state)."""

    channel: Channel
    note: Notification
    sent: dict[str, Any]
    record: dict[str, Any]


def rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def open_sends(
    state: dict[str, Any],
    current: dict[str, Finding],
    now: int,
    targets: Callable[[Finding], Sequence[Target]],
    grafana_url: str | None,
) -> list[Send]:
    """The firing messages due: new, escalated, or a reminder after the route's re-notify interval, to each channel
    ``targets`` names for the finding (``routing.Router.targets``); each finding's entry in ``state`` is created or
    refreshed."""
    out: list[Send] = []
    for key, finding in current.items():
        entry = state.setdefault(key, {"first_seen_ms": now, "sent": {}})
        entry["finding"] = finding.to_dict()
        entry.pop("resolved", None)
        link = dashboard_url(grafana_url, finding)
        for target in targets(finding):
            channel = target.channel
            sent = entry["sent"].get(channel.name)
            reason: Reason | None
            if sent is None or sent.get("status") == "resolved":
                reason = "new"
            elif rank(finding.severity) > rank(sent["severity"]):
                reason = "escalated"
            elif now - int(sent["at_ms"]) >= int(target.renotify_seconds * 1000):
                reason = "reminder"
            else:
                reason = None
            if reason is None:
                continue
            record = {"at_ms": now, "severity": finding.severity, "status": "firing"}
            note = Notification("firing", reason, finding, link, target.mention)
            out.append(Send(channel, note, entry["sent"], record))
    return out


def resolve_sends(
    state: dict[str, Any],
    current: dict[str, Finding],
    now: int,
    window_from: int,
    channels: Sequence[Channel],
    grafana_url: str | None,
    apps: set[tuple[str, str]] | None = None,
) -> tuple[list[Send], list[str]]:
    """The resolves due (a finding announced that is no longer returned: cleared, or aged out), and the keys of
    the findings concerned (``forget_resolved`` after the sends)."""
    by_name = {c.name: c for c in channels}
    out: list[Send] = []
    keys: list[str] = []
    for key in [k for k in state if k not in current]:
        entry = state[key]
        finding = Finding(**{k: v for k, v in entry["finding"].items() if k not in ("key", "rule_title")})
        if apps is not None and (finding.cluster, finding.app_id) not in apps:
            continue  # an event-driven pass only knows about its applications
        reason: Reason = "aged_out" if finding.detected_at_ms < window_from else "cleared"
        note = Notification("resolved", reason, finding, dashboard_url(grafana_url, finding))
        keys.append(key)
        for name, sent in list(entry["sent"].items()):
            channel = by_name.get(name)
            if channel is None or sent.get("status") == "resolved":
                continue  # a channel no longer configured, or already told
            out.append(Send(channel, note, entry["sent"], {**sent, "status": "resolved", "at_ms": now}))
    return out, keys


def forget_resolved(state: dict[str, Any], keys: Iterable[str], channels: Sequence[Channel]) -> None:
    """Drop the findings every configured channel was told are resolved; mark the others resolved."""
    names = {c.name for c in channels}
    for key in dict.fromkeys(keys):
        entry = state.get(key)
        if entry is None:
            continue
        if all(s.get("status") == "resolved" or name not in names for name, s in entry["sent"].items()):
            del state[key]
        else:
            entry["resolved"] = True

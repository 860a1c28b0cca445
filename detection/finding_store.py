"""The findings the alerter evaluates, stored in the ``findings`` table (``schemas/findings_table.py``) for the overview
and cluster findings panels, which then read one row per finding instead of running the detection query over every
application of the dashboard's range.

After each pass (periodic and event-driven) the alerter hands every finding it evaluated, all severities, to
``FindingsStore.write``, with the scope the pass covered:

- a finding new or changed since this process last stored it (severity, numbers, running -> finished, detection
  time …) is inserted with ``evaluated_at_ms`` = the pass's time, so it replaces the earlier row of its key
  (``ReplacingMergeTree(evaluated_at_ms)``, read through ``findings_dedup``). An unchanged finding is not written
  again (the periodic pass re-evaluates the whole lookback every minute);
- a stored finding of the pass's scope (its clusters, or its applications, detected since the window's start) that the
  pass no longer returned is written again with ``resolved = 1``: a running stage whose numbers fell back under the
  threshold, a finding cleared by a changed threshold. The panels show ``resolved = 0`` only. A finding detected before
  the window is never re-evaluated and stays as last stored (a finished stage's finding does not change).

Values reach ClickHouse through ``Storage.insert_columns`` (columnar insert: clickhouse-driver's native protocol, or
Arrow on chDB), never as SQL text; the one read (the stored keys of the scope) filters on the pass's scope with quoted
literals, as the detection query does. A failed write raises ``StorageError`` to the alerter, which logs it once per
kind of failure and goes on alerting; the next pass writes again (this process's record of what is stored is dropped
after a failure, so nothing is skipped).

``backfill`` evaluates a past range (one day at a time) and stores its findings: ``sparktap findings --store`` fills
the table on a fresh install or after ``sparktap import``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sparktap.detection.findings import Finding
from sparktap.detection.sql import Scope
from sparktap.schemas.ddl import quote_ident
from sparktap.schemas.findings_table import COLUMN_NAMES, FINDINGS_TABLE

if TYPE_CHECKING:
    from sparktap.detection.findings import Detector
    from sparktap.store.protocol import Storage

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
_CONTENT = tuple(c for c in COLUMN_NAMES if c not in ("resolved", "evaluated_at_ms"))


def _id(value: int | None) -> int:
    return -1 if value is None else value


def finding_row(finding: Finding, evaluated_at_ms: int, resolved: bool = False) -> dict[str, Any]:
    """The stored row of a finding (``COLUMN_NAMES``; unknown ids -1, as the detection query gives them)."""
    return {
        "cluster": finding.cluster,
        "app_id": finding.app_id,
        "app_attempt": finding.app_attempt,
        "rule": finding.rule,
        "finding_key": finding.key,
        "app_name": finding.app_name,
        "severity": finding.severity,
        "job_id": _id(finding.job_id),
        "sql_execution_id": _id(finding.sql_execution_id),
        "stage_id": _id(finding.stage_id),
        "stage_attempt": _id(finding.stage_attempt),
        "stage_name": finding.stage_name,
        "node_id": _id(finding.node_id),
        "running": int(finding.running),
        "value": float(finding.value),
        "threshold": float(finding.threshold),
        "time_lost_ms": float(finding.time_lost_ms),
        "evidence_names": list(finding.evidence),
        "evidence_values": [float(v) for v in finding.evidence.values()],
        "explanation": finding.explanation,
        "suggested_fix": finding.suggested_fix,
        "description": finding.description,
        "detected_at_ms": int(finding.detected_at_ms),
        "user": finding.user,
        "team": finding.team,
        "job_tags": list(finding.job_tags),
        "session_id": finding.session_id,
        "operation_id": finding.operation_id,
        "resolved": int(resolved),
        "evaluated_at_ms": int(evaluated_at_ms),
    }


def _signature(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(tuple(v) if isinstance(v, list) else v for v in (row[c] for c in _CONTENT))


class FindingsStore:
    """Writes the alerter's findings into ``findings`` through a ``Storage`` (see the module docstring)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._stored: dict[str, tuple[Any, ...]] = {}
        """finding key -> the content this process last stored for it (forgotten after a failed write)"""
        self._last_version = 0

    def _version(self, now_ms: int) -> int:
        """The pass's time, strictly increasing in this process (two passes in one millisecond stay ordered)."""
        self._last_version = max(now_ms, self._last_version + 1)
        return self._last_version

    def write(
        self,
        findings: Sequence[Finding],
        now_ms: int,
        scope: Scope | None,
        window_from_ms: int,
        apps: Iterable[tuple[str, str]] | None = None,
    ) -> int:
        """Store the pass's findings; mark resolved the stored ones of its scope it no longer returned (``scope``
        None: resolve nothing, a backfill). Returns the rows written. Raises ``StorageError`` when the store refuses."""
        version = self._version(now_ms)
        try:
            rows = [finding_row(f, version) for f in findings]
            fresh = [r for r in rows if self._stored.get(r["finding_key"]) != _signature(r)]
            gone = [] if scope is None else self._disappeared(findings, scope, window_from_ms, apps, version)
            written = self._insert([*fresh, *gone])
        except Exception:
            self._stored.clear()  # unsure what is stored now: the next pass writes everything again
            raise
        for row in fresh:
            self._stored[row["finding_key"]] = _signature(row)
        for row in gone:
            self._stored.pop(row["finding_key"], None)
        if scope is not None and apps is None:  # a periodic pass: forget what the window left behind
            old = {k for k, s in self._stored.items() if s[_CONTENT.index("detected_at_ms")] < window_from_ms - DAY_MS}
            for key in old:
                del self._stored[key]
        return written

    def _disappeared(
        self,
        findings: Sequence[Finding],
        scope: Scope,
        window_from_ms: int,
        apps: Iterable[tuple[str, str]] | None,
        version: int,
    ) -> list[dict[str, Any]]:
        """The stored, unresolved findings of the scope detected since ``window_from_ms`` that the pass did not return,
        as rows marked resolved."""
        since = int(window_from_ms)
        # event_time (seconds) as well: the monthly partitions before the window are not read
        conditions = [*scope.conditions(), "resolved = 0", f"event_time >= toDateTime({since // 1000}, 'UTC')"]
        conditions.append(f"detected_at_ms >= {since}")
        view = f"{quote_ident(self.storage.database)}.{quote_ident(FINDINGS_TABLE + '_dedup')}"
        where = " AND ".join(conditions)
        current = {f.key for f in findings}
        pairs = None if apps is None else set(apps)

        def gone(row: dict[str, Any]) -> bool:
            return row["finding_key"] not in current and (pairs is None or (row["cluster"], row["app_id"]) in pairs)

        keys = self.storage.query(f"SELECT finding_key, cluster, app_id FROM {view} WHERE {where}")  # noqa: S608
        if not any(gone(row) for row in keys):
            return []  # the usual case: the key columns only, a narrow read
        columns = ", ".join(quote_ident(c) for c in COLUMN_NAMES)
        rows = self.storage.query(f"SELECT {columns} FROM {view} WHERE {where}")  # noqa: S608
        return [
            {**{c: row[c] for c in COLUMN_NAMES}, "resolved": 1, "evaluated_at_ms": version}
            for row in rows
            if gone(row)
        ]

    def _insert(self, rows: list[dict[str, Any]]) -> int:
        if not rows:
            return 0
        columns = {name: [row[name] for row in rows] for name in COLUMN_NAMES}
        return self.storage.insert_columns(FINDINGS_TABLE, columns)

    def backfill(
        self,
        detector: Detector,
        from_ms: int,
        to_ms: int,
        now_ms: int,
        progress: Callable[[int, int, int], None] | None = None,
    ) -> int:
        """Evaluate [from_ms, to_ms] one UTC day at a time (bounded memory at fleet scale) and store every finding
        (the detector's ``min_severity`` should be ``info``); a later day's evaluation of a key (a stage running across
        midnight) replaces an earlier day's. Returns the findings evaluated, summed over the days; ``progress(from, to,
        n)`` after each day."""
        total = 0
        start = from_ms
        while start < to_ms:
            end = min((start // DAY_MS + 1) * DAY_MS, to_ms)
            found = detector.findings(start, end)
            self.write(found, now_ms, None, start)
            total += len(found)
            if progress is not None:
                progress(start, end, len(found))
            start = end
        return total

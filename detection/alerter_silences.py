"""The alerter's silences: the ones in force each pass, read from ClickHouse (the last ones read when they cannot
be), and the audit row per finding a silence keeps quiet (``alert_silenced``)."""

from __future__ import annotations

import logging

from sparktap.detection.findings import Finding
from sparktap.detection.silences import Silence, SilenceStore

log = logging.getLogger("sparktap.detection.alerter")


class Muting:
    """The silences of an alerter (none without a ``SilenceStore``)."""

    def __init__(self, silences: SilenceStore | None) -> None:
        self.silences = silences
        self._silences: list[Silence] = []
        self._silences_failing = False
        self._audited: set[tuple[str, str]] = set()
        """(silence id, finding key) pairs already in the audit table while the finding stays muted"""
        self._audit_failing = False

    def audit(self, muted: list[tuple[Silence, Finding]], now: int, whole_pass: bool) -> None:
        """An audit row per finding a silence keeps quiet (``alert_silenced``), once while it stays muted: a pair
        is written again after the finding cleared or the alerter restarted. A failure is logged once and retried
        at the next pass; it never stops alerting."""
        if self.silences is None:
            return
        pairs = {(s.id, f.key) for s, f in muted}
        new = [(s, f) for s, f in muted if (s.id, f.key) not in self._audited]
        try:
            self.silences.record_muted(new, now)
        except Exception as exc:  # noqa: BLE001 - the audit must never stop alerting
            if not self._audit_failing:
                log.warning("alerter: cannot write the silences' audit (retried next pass): %s", exc)
            self._audit_failing = True
            return
        if self._audit_failing:
            log.info("alerter: writing the silences' audit again")
        self._audit_failing = False
        # a pass over some applications only keeps the others' pairs: they are still muted
        self._audited = pairs if whole_pass else self._audited | pairs

    def active(self, now: int) -> list[Silence]:
        """The silences in force now, read from ClickHouse each pass (every replica sees the same); when they
        cannot be read, the last ones read (logged once)."""
        if self.silences is None:
            return []
        try:
            self._silences = self.silences.active(now)
        except Exception as exc:  # noqa: BLE001 - unreadable silences must not stop alerting
            if not self._silences_failing:
                log.warning("alerter: cannot read the silences (the last ones read still apply): %s", exc)
            self._silences_failing = True
        else:
            if self._silences_failing:
                log.info("alerter: reading the silences again")
            self._silences_failing = False
        return self._silences

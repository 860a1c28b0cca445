"""Silences: mute a known problem for a while (``sparktap silence add/list/expire``).

A silence names a rule and/or an application-name glob, optionally a cluster, a team and a user, and lasts from
``starts_at`` to ``ends_at``. While it lasts the alerter sends no *firing* message for a finding it matches (new,
reminder or escalation); once it ends the finding is announced at the next pass like any new finding. Resolves are
unchanged: a finding announced before the silence began is still resolved when it clears.

Silences live in ClickHouse, in ``alert_silences`` (created with the schema by ``Storage.ensure_schema``;
``schemas/ddl.py``), so every alerter replica — and the dashboards — see the same ones. The table is append-only:
``add`` inserts a row, ``expire`` inserts a copy with ``ends_at_ms`` = now, and a silence's end is the least
``ends_at_ms`` of its rows (``GROUP BY id``), so replicas and merges never disagree. Values are written through the
driver's insert (parameters), never into SQL text; reading selects the whole (small) table with no value from a
user in it, and matching is done here.

Matching, like routes (``routing.py``): ``rule``, ``cluster``, ``user`` equal; ``app_name`` a glob of the one glob
language (``routing.glob_regex``, also what Grafana gets); ``team`` equal to the finding's owning team (the routing
file's team mapping, ``teams.py``) or a job tag the mapping trusts; an empty field matches everything.

Guards (issue 41): a silence must name a rule or an application glob that does not match every name (``*``, ``**``,
``?*`` … match everything): a silence of everything is refused unless asked for with ``everything=True`` (``--all``).
It lasts at most ``MAX_SILENCE_SECONDS``. Its author, ``created_by``, is the OS account running the command (read
from the system's user database, not from ``$USER``), with a name given by ``--author`` recorded beside it:
``bob (as alice)``. Every finding a silence keeps quiet gets an audit row in ``alert_silenced``
(``SILENCED_TABLE``: which silence, which finding, when), written by the alerter once per silence and finding while
it stays muted.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sparktap.detection.routing import (
    finding_attrs,
    glob_matches,
    glob_matches_everything,
    glob_regex,
    parse_duration,
    shown,
)
from sparktap.detection.teams import TeamRules
from sparktap.errors import SparktapError
from sparktap.schemas.ddl import SILENCED_TABLE, SILENCES_TABLE, quote_ident

log = logging.getLogger(__name__)

COLUMNS = (
    "id",
    "rule",
    "app_name",
    "cluster",
    "team",
    "user",
    "starts_at_ms",
    "ends_at_ms",
    "created_at_ms",
    "created_by",
    "reason",
)
AUDIT_COLUMNS = ("silence_id", "finding_key", "rule", "cluster", "app_id", "app_name", "severity", "muted_at_ms")
MAX_SILENCE_SECONDS = 366 * 86400.0
"""A silence lasts at most a year: a longer one is a rule to switch off (thresholds), not a silence."""


class SilenceError(SparktapError):
    """A silence cannot be added, listed or expired."""


@dataclass(frozen=True)
class Silence:
    id: str
    rule: str
    app_name: str
    cluster: str
    team: str
    user: str
    starts_at_ms: int
    ends_at_ms: int
    created_at_ms: int
    created_by: str
    reason: str

    def active(self, now_ms: int) -> bool:
        return self.starts_at_ms <= now_ms < self.ends_at_ms

    def matches(self, attrs: Mapping[str, Any]) -> bool:
        """``attrs``: ``routing.finding_attrs`` of a finding."""
        if self.rule and attrs["rule"] != self.rule:
            return False
        if self.app_name and not glob_matches(attrs["app_name"], self.app_name):
            return False
        if self.cluster and attrs["cluster"] != self.cluster:
            return False
        if self.team and self.team != attrs["team"] and self.team not in attrs["job_tags"]:
            return False
        return not (self.user and attrs["user"] != self.user)

    def describe(self) -> str:
        parts = [f"{k}={v}" for k in ("rule", "app_name", "cluster", "team", "user") if (v := getattr(self, k))]
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SilenceStore:
    """Silences in a store's ``alert_silences`` table (``query``/``insert`` of ``collector.storage.Storage``)."""

    def __init__(
        self,
        query: Callable[[str], list[dict[str, Any]]],
        insert: Callable[[str, Sequence[Mapping[str, Any]]], int] | None,
        database: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._query = query
        self._insert = insert
        self.database = database
        self.clock = clock

    @classmethod
    def of(cls, storage: Any, clock: Callable[[], float] = time.time) -> SilenceStore:
        return cls(storage.query, storage.insert, storage.database, clock)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def add(
        self,
        *,
        rule: str = "",
        app_name: str = "",
        cluster: str = "",
        team: str = "",
        user: str = "",
        duration: str | float = "24h",
        reason: str = "",
        author: str = "",
        everything: bool = False,
        starts_at_ms: int | None = None,
    ) -> Silence:
        """Insert a silence lasting ``duration`` ('24h', '30m' … or seconds) from now (or ``starts_at_ms``), by the
        OS account running this (``author``: a name recorded beside it); ``everything``: allow a silence that
        matches every finding."""
        if not everything and not rule and (not app_name or glob_matches_everything(app_name)):
            given = f' (app_name="{app_name}" matches every name)' if app_name else ""
            raise SilenceError(
                f"a silence needs --rule or an --app-name glob that does not match every name{given}: it would hide "
                "every alert; narrow it, or add --all to silence everything on purpose"
            )
        if not reason.strip():
            raise SilenceError('a silence needs --reason "why" (shown in `sparktap silence list` and on the dashboard)')
        from sparktap.detection.query import RULES_BY_ID

        if rule and rule not in RULES_BY_ID:
            raise SilenceError(f'no detection rule rule="{rule}"; the rule ids are in docs/runbook.md')
        if app_name:
            try:
                glob_regex(app_name)
            except ValueError as exc:
                raise SilenceError(f"--app-name {exc}") from exc
        try:
            seconds = parse_duration(duration)
        except ValueError as exc:
            raise SilenceError(f"--for {exc}") from exc
        if seconds > MAX_SILENCE_SECONDS:
            raise SilenceError(
                f'--for "{shown(duration)}" is longer than a silence may last (366d); give a shorter time and '
                "add another silence when it ends"
            )
        now = self._now_ms()
        start = now if starts_at_ms is None else starts_at_ms
        silence = Silence(
            id=uuid.uuid4().hex[:12],
            rule=rule,
            app_name=app_name,
            cluster=cluster,
            team=team,
            user=user,
            starts_at_ms=start,
            ends_at_ms=start + int(seconds * 1000),
            created_at_ms=now,
            created_by=identity(author),
            reason=reason.strip(),
        )
        self._write(silence)
        return silence

    def _write(self, silence: Silence) -> None:
        if self._insert is None:
            raise SilenceError("this store is read-only here")
        self._insert(SILENCES_TABLE, [silence.to_dict()])

    def record_muted(self, muted: Sequence[tuple[Silence, Any]], now_ms: int) -> int:
        """Audit rows in ``alert_silenced``: which silence kept which finding quiet, at ``now_ms``. Returns the rows
        written."""
        if not muted:
            return 0
        if self._insert is None:
            raise SilenceError("this store is read-only here")
        rows = [
            {
                "silence_id": silence.id,
                "finding_key": str(finding.key),
                "rule": str(finding.rule),
                "cluster": str(finding.cluster),
                "app_id": str(finding.app_id),
                "app_name": str(finding.app_name),
                "severity": str(finding.severity),
                "muted_at_ms": now_ms,
            }
            for silence, finding in muted
        ]
        self._insert(SILENCED_TABLE, rows)
        return len(rows)

    def all(self) -> list[Silence]:
        """Every silence, its end the earliest of its rows (an expiry moves it forward), by end time."""
        table = f"{quote_ident(self.database)}.{quote_ident(SILENCES_TABLE)}"
        fields = ", ".join(
            f"{'min' if c == 'ends_at_ms' else 'any'}({quote_ident(c)}) AS {quote_ident('s_' + c)}"
            for c in COLUMNS
            if c != "id"
        )
        sql = f"SELECT `id` AS `s_id`, {fields} FROM {table} GROUP BY `id` ORDER BY `s_ends_at_ms`, `s_id`"  # noqa: S608
        rows = self._query(sql)
        return [_silence(r) for r in rows]

    def active(self, now_ms: int | None = None) -> list[Silence]:
        now = self._now_ms() if now_ms is None else now_ms
        return [s for s in self.all() if s.active(now)]

    def expire(self, silence_id: str) -> Silence:
        """End a silence now (from the next alerter pass on, its findings are sent)."""
        now = self._now_ms()
        found = [s for s in self.all() if s.id == silence_id]
        if not found:
            raise SilenceError(f'no silence id="{silence_id}"; `sparktap silence list --all` shows them all')
        silence = found[0]
        if silence.ends_at_ms <= now:
            return silence
        ended = dataclasses.replace(silence, ends_at_ms=max(now, silence.starts_at_ms))
        self._write(ended)
        return ended


def _silence(row: Mapping[str, Any]) -> Silence:
    def text(c: str) -> str:
        return str(row["s_" + c])

    def ms(c: str) -> int:
        return int(row["s_" + c])

    return Silence(
        id=text("id"),
        rule=text("rule"),
        app_name=text("app_name"),
        cluster=text("cluster"),
        team=text("team"),
        user=text("user"),
        starts_at_ms=ms("starts_at_ms"),
        ends_at_ms=ms("ends_at_ms"),
        created_at_ms=ms("created_at_ms"),
        created_by=text("created_by"),
        reason=text("reason"),
    )


def silenced(silences: Sequence[Silence], finding: Any, now_ms: int, teams: TeamRules | None = None) -> Silence | None:
    """The first active silence that matches the finding, or None. With a team mapping (``teams``), a silence's
    ``team`` matches the team the mapping gives and the tags it trusts, never a tag the Spark user chose alone."""
    attrs = finding_attrs(finding, teams)
    for silence in silences:
        if silence.active(now_ms) and silence.matches(attrs):
            return silence
    return None


def os_user() -> str:
    """The OS account running this process, from the system's user database (``$USER`` and ``$LOGNAME`` are
    whatever the caller set: not an identity); the numeric uid when the account has no entry."""
    import pwd

    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def identity(author: str = "") -> str:
    """``created_by`` of a silence: the OS account, then the name given with ``--author`` beside it (never instead
    of it: the first word is always the account)."""
    user = os_user()
    named = " ".join(author.split())
    return user if not named or named == user else f"{user} (as {named})"

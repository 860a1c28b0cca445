"""Evaluate the detection SQL and turn its rows into ``Finding`` objects.

``Detector`` holds the choice of rules, thresholds, database, server version and scope; ``findings(from_ms,
to_ms)`` expands the Grafana macros of the rule query for that time range (``macros.expand``) and runs it through
any ``query(sql) -> list[dict]`` callable — ``Storage.query`` of ``store/base.py``, a clickhouse-driver
client, or chDB.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast
from urllib.parse import urlencode

from sparktap.detection.macros import expand
from sparktap.detection.query import OPTIONAL_INPUTS, RULES_BY_ID, input_probe, rule_parts, rule_query
from sparktap.detection.sql import DEFAULT_DATABASE, RuleChoice, Scope, SqlContext, Staging
from sparktap.detection.thresholds import DEFAULT_THRESHOLDS, SEVERITIES, Severity, Thresholds
from sparktap.schemas.ddl import LATEST_VERSION, Features, quote_ident

QueryFn = Callable[[str], list[dict[str, Any]]]
log = logging.getLogger(__name__)


def _id(value: Any) -> int | None:
    number = int(value)
    return None if number < 0 else number


def _float(value: Any) -> float:
    number = float(value)
    return number if math.isfinite(number) else 0.0


@functools.cache
def _table_rules() -> frozenset[str]:
    """The rules whose findings are about a table (their SQL reads the ``table`` relation)."""
    return frozenset(p.rule for p in rule_parts() if p.source == "table")


@dataclass(frozen=True)
class Finding:
    """One rule firing on one stage attempt (or AQE shuffle-read node, plan node, streaming query run) of one
    application attempt."""

    cluster: str
    app_id: str
    app_attempt: str
    app_name: str
    rule: str
    severity: Severity
    value: float
    threshold: float
    explanation: str
    suggested_fix: str
    detected_at_ms: int
    job_id: int | None = None
    sql_execution_id: int | None = None
    stage_id: int | None = None
    stage_attempt: int | None = None
    stage_name: str = ""
    node_id: int | None = None
    running: bool = False
    evidence: dict[str, float] = field(default_factory=dict)
    description: str = ""
    """The job or SQL description of what the finding is about, when the application set one (``names.py``)."""
    user: str = ""
    """Who ran it: the Spark Connect user of the operation, else the application's Spark user ('' unknown)."""
    team: str = ""
    """The application's ``team`` tag (``app_start.tags``), '' when it has none."""
    job_tags: tuple[str, ...] = ()
    """The job's ``spark.job.tags`` (``spark.addTag``), Connect's operation tag included."""
    session_id: str = ""
    """The Spark Connect session of the operation, '' outside Connect."""
    operation_id: str = ""
    """The Spark Connect operation, '' outside Connect."""

    @property
    def key(self) -> str:
        """Stable identity: rule + cluster + application attempt + stage attempt (or SQL execution + AQE or plan
        node, or the streaming query run). It does not change while a running stage's numbers move, nor when the
        stage completes."""
        where = {
            "stage": f"stage={self.stage_id}.{self.stage_attempt}",
            "stream": f"stream={self.stage_name}",
            "table": f"table={self.stage_name}",
            "sql": f"sql={self.sql_execution_id}.node={self.node_id}",
            "app": "app",
        }[self.subject]
        return "|".join((self.rule, self.cluster, self.app_id, self.app_attempt, where))

    @property
    def subject(self) -> str:
        """What the finding is about: a ``stage`` attempt, a ``stream`` (a streaming query run, named in
        ``stage_name``), a ``table`` (named in ``stage_name``: the table rules, ``detection/tables.py``), a ``sql``
        execution's plan or AQE node, or the whole ``app`` (no ids, no name)."""
        if self.stage_id is not None:
            return "stage"
        if self.rule in _table_rules():
            return "table"
        if self.sql_execution_id is None and self.node_id is None:
            return "stream" if self.stage_name else "app"
        return "sql"

    @property
    def rule_title(self) -> str:
        info = RULES_BY_ID.get(self.rule)
        return info.title if info else self.rule

    @property
    def name(self) -> str:
        """The job or SQL description when there is one, else a stage's call site ("count at x.py:1"), else ''."""
        if self.description:
            return self.description
        return self.stage_name if self.subject == "stage" else ""

    @property
    def where(self) -> str:
        """'stage 5 (attempt 0) "TPC-H q05"' (the job description, else the call site "count at x.py:1"),
        'SQL execution 2 "TPC-H q05", AQE shuffle read node 4', 'SQL execution 2, plan node 7 "SortMergeJoin"' or
        'streaming query "events (0f8e…)"'."""
        named = f' "{self.name}"' if self.name else ""
        if self.subject == "stage":
            return f"stage {self.stage_id} (attempt {self.stage_attempt}){named}"
        if self.subject == "stream":
            return f'streaming query "{self.stage_name}"'
        if self.subject == "table":
            return f'table "{self.stage_name}"'
        if self.subject == "app":
            return f'application "{self.app_name}"' if self.app_name else "application"
        if self.stage_name:
            return f'SQL execution {self.sql_execution_id}{named}, plan node {self.node_id} "{self.stage_name}"'
        return f"SQL execution {self.sql_execution_id}{named}, AQE shuffle read node {self.node_id}"

    @property
    def time_lost_ms(self) -> float:
        """The rule's estimate of the wall time the problem cost (``time_lost_ms`` of the evidence; runbook)."""
        return self.evidence.get("time_lost_ms", 0.0)

    @property
    def severity_rank(self) -> int:
        return SEVERITIES.index(self.severity)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["key"] = self.key
        out["rule_title"] = self.rule_title
        return out

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Finding:
        severity = str(row["severity"])
        if severity not in SEVERITIES:
            raise ValueError(f"unexpected severity {severity!r} in a finding row")
        names = list(row.get("evidence_names") or [])
        values = list(row.get("evidence_values") or [])
        return cls(
            cluster=str(row["cluster"]),
            app_id=str(row["app_id"]),
            app_attempt=str(row["app_attempt"]),
            app_name=str(row["app_name"]),
            rule=str(row["rule"]),
            severity=severity,
            value=_float(row["value"]),
            threshold=_float(row["threshold"]),
            explanation=str(row["explanation"]),
            suggested_fix=str(row["suggested_fix"]),
            detected_at_ms=int(row["detected_at_ms"]),
            job_id=_id(row["job_id"]),
            sql_execution_id=_id(row["sql_execution_id"]),
            stage_id=_id(row["stage_id"]),
            stage_attempt=_id(row["stage_attempt"]) if int(row["stage_id"]) >= 0 else None,
            stage_name=str(row.get("stage_name") or ""),
            node_id=_id(row["node_id"]),
            running=bool(int(row["running"])),
            evidence={str(n): _float(v) for n, v in zip(names, values, strict=True)},
            user=str(row.get("user") or ""),
            team=str(row.get("team") or ""),
            job_tags=tuple(str(t) for t in row.get("job_tags") or ()),
            session_id=str(row.get("session_id") or ""),
            operation_id=str(row.get("operation_id") or ""),
        )


@dataclass(frozen=True)
class Detector:
    """The detection query for a choice of rules and thresholds, runnable for any time range."""

    query: QueryFn
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    database: str = DEFAULT_DATABASE
    version: tuple[int, ...] = LATEST_VERSION
    scope: Scope = field(default_factory=Scope)
    rules: tuple[str, ...] | None = None
    min_severity: Severity = "info"
    final_reads: bool = False
    """``SqlContext.final_reads``: the store is one node (chDB or one server), not a cluster"""
    probe_inputs: bool = True
    """Run ``input_probe`` first and leave out of the detection query the optional inputs (plan, streaming, AQE
    relations) without a row in the range: the same findings, ~0.2 s less CPU where they are empty (issue 22)"""
    staged: bool = True
    """Compute the relations the query nests deeply or reads more than once into temporary tables of the session first
    (``sql.Staging``), then run the query over them, then drop them: the same findings, analysed in small pieces
    (issue 27). Event-driven passes (an application scope) and full passes of up to ``staged_full_ms`` (the periodic
    alerter pass, the findings backfill's days) alike; a full pass's tables hold its range's stage rows (about 0.5 kB
    a stage, in the server's memory), so a longer one (``sparktap findings --since 30d``) runs the single query.
    ``query`` must run every statement in one session (a chDB connection, one clickhouse-driver connection); where a
    staged statement fails, the pass runs the single query instead (one warning)."""
    staged_full_ms: int = 27 * 3_600_000
    """The longest range a pass without an application scope is staged over (a day and the alerter's margins)"""

    @property
    def _features(self) -> Features:
        return Features.for_version(self.version)

    @property
    def sql(self) -> str:
        """The query with Grafana macros (what a panel or Grafana alert rule runs)."""
        ctx = SqlContext(self.database, self.version, self.scope, final_reads=self.final_reads)
        return rule_query(self.rules, self.thresholds, ctx, self.min_severity)

    def findings(self, from_ms: int, to_ms: int) -> list[Finding]:
        """Findings over events whose time is in [from_ms, to_ms], the most time lost first (then most severe), named
        by their job or SQL description where the application set one (``names.describe``)."""
        from sparktap.detection.names import describe

        absent = self.absent_inputs(from_ms, to_ms) if self.probe_inputs else frozenset()
        if not any(p.source not in absent for p in rule_parts(self.rules, self.thresholds)):
            return []  # every chosen rule reads only inputs without a row in the range
        staged = self.staged and (bool(self.scope.app) or to_ms - from_ms <= self.staged_full_ms)
        rows = self._staged_rows(from_ms, to_ms, absent) if staged else None
        if rows is None:
            rows = self.query(self.rendered(from_ms, to_ms, absent))
        found = [Finding.from_row(row) for row in rows]
        return describe(self.query, self.database, found)

    def staged_statements(
        self, from_ms: int, to_ms: int, absent: frozenset[str] = frozenset(), prefix: str = "sparktap_pass"
    ) -> tuple[list[tuple[str, str]], str]:
        """The staged pass for [from_ms, to_ms]: the ``(temporary table, SELECT)`` statements in order, and the query
        over their tables (``absent``: see ``rule_query``). Each findings table's rules are all in its SELECT; a pass
        narrows them to those that fire first (``staged_pass``, ``sql.RuleChoice``)."""
        staging, final = self.staged_pass(from_ms, to_ms, absent, prefix)
        return list(staging.statements), final

    def staged_pass(
        self, from_ms: int, to_ms: int, absent: frozenset[str] = frozenset(), prefix: str = "sparktap_pass"
    ) -> tuple[Staging, str]:
        """``staged_statements`` with the ``Staging`` itself (its findings tables' ``RuleChoice``s, rendered)."""
        staging = Staging(prefix)

        def build(ctx: SqlContext) -> str:
            return rule_query(
                self.rules, self.thresholds, replace(ctx, staging=staging), self.min_severity, absent=absent
            )

        return staging, self._render(build, from_ms, to_ms, staging)

    def _staged_rows(self, from_ms: int, to_ms: int, absent: frozenset[str]) -> list[dict[str, Any]] | None:
        """The rows of the staged pass, None when a staged statement failed (the caller runs the single query)."""
        slot = _SLOTS.take()
        try:
            return self._staged_rows_in(from_ms, to_ms, absent, slot)
        finally:
            _SLOTS.give_back(slot)

    def _staged_rows_in(
        self, from_ms: int, to_ms: int, absent: frozenset[str], slot: int
    ) -> list[dict[str, Any]] | None:
        staging, final = self.staged_pass(from_ms, to_ms, absent, f"sparktap_pass_{slot}")
        statements = staging.statements
        # _MODERN_SETTINGS where the server has LowCardinality; through the views (a cluster's Distributed tables) the
        # SELECT of a CREATE does not get the session's distributed_product_mode on 18.16 (store/cluster.py
        # sets 'global' for every read): it is given again (as a subquery's SETTINGS there: 18.16 takes one SETTINGS
        # clause a statement, and a caller may add its own)
        product = [] if self.final_reads else ["distributed_product_mode = 'global'"]

        def with_settings(select: str) -> str:
            if self._features.low_cardinality:
                return f"{select}\nSETTINGS {', '.join([*_MODERN_SETTINGS, *product])}"
            if product:
                return f"SELECT * FROM\n(\n{select}\nSETTINGS {product[0]}\n)"
            return select

        created: list[str] = []
        fired_any = not staging.choices
        try:
            for table, select in statements:
                choice = staging.choices.get(table)
                if choice is not None:  # the rules that fire first, then the findings of those alone
                    fired = {int(row["rule"]) for row in self.query(with_settings(choice.probe))}
                    fired_any = fired_any or bool(fired)
                    select = choice.select(fired)
                if table == staging.found and not fired_any:
                    return []  # no rule fires: no finding to attribute
                self.query(f"CREATE TEMPORARY TABLE {quote_ident(table)} AS\n{with_settings(select)}")
                created.append(table)
            return self.query(final)
        except Exception as exc:  # noqa: BLE001 - any failure: the single query gives the same findings (or the error)
            if "TIMEOUT_EXCEEDED" in str(exc):
                raise  # out of time (a caller's max_execution_time): the single query would be too
            global _STAGING_WARNED  # noqa: PLW0603 - one warning per process
            if not _STAGING_WARNED:
                _STAGING_WARNED = True
                log.warning(
                    'staged detection pass failed, running it as one query: statements="%d" error="%s"; the '
                    "findings are the same, the pass slower (does the query function keep one session?)",
                    len(statements),
                    _reason(exc),
                )
            return None
        finally:
            for table in reversed(created):
                try:
                    self.query(f"DROP TEMPORARY TABLE IF EXISTS {quote_ident(table)}")
                except Exception:  # noqa: BLE001 - the session ends with its tables anyway
                    log.debug("could not drop temporary table %s", table)
                    _SLOTS.retire(slot)  # its names may still be taken in the session: never reuse them

    def absent_inputs(self, from_ms: int, to_ms: int) -> frozenset[str]:
        """The ``OPTIONAL_INPUTS`` without a row in [from_ms, to_ms] and the scope (one small query)."""
        present = {str(row["input"]) for row in self.query(self._render(input_probe, from_ms, to_ms))}
        return frozenset(OPTIONAL_INPUTS) - present

    def rendered(self, from_ms: int, to_ms: int, absent: frozenset[str] = frozenset()) -> str:
        """The query for [from_ms, to_ms] (``absent``: see ``rule_query``)."""

        def build(ctx: SqlContext) -> str:
            return rule_query(self.rules, self.thresholds, ctx, self.min_severity, absent=absent)

        return self._render(build, from_ms, to_ms)

    def _render(
        self, build: Callable[[SqlContext], str], from_ms: int, to_ms: int, staging: Staging | None = None
    ) -> str:
        """``build``'s query for [from_ms, to_ms]: macros are expanded *before* the scope's literal values go in, so
        a cluster or application id holding ``$__x`` is data, never a macro (it used to raise MacroError). The
        ``staging`` statements ``build`` records are rendered the same way, in place."""
        marks = Scope(_CLUSTER_MARK if self.scope.cluster else None, _APP_MARK if self.scope.app else None)
        ctx = SqlContext(self.database, self.version, marks, final_reads=self.final_reads)
        values = {_CLUSTER_MARK: self.scope.cluster or _CLUSTER_MARK, _APP_MARK: self.scope.app or _APP_MARK}

        def render(sql: str) -> str:  # one pass: a value holding a mark's text stays data
            return _MARKS.sub(lambda m: values[m.group(0)], expand(sql, from_ms, to_ms))

        sql = render(build(ctx))
        if staging is not None:
            staging.statements[:] = [(table, render(select)) for table, select in staging.statements]
            for table, c in staging.choices.items():
                staging.choices[table] = RuleChoice(render(c.probe), [render(t) for t in c.tuples], render(c.template))
        return sql


class _Slots:
    """The staged passes' table names, reused: a pass takes the lowest free slot ``n`` (its tables are
    ``sparktap_pass_<n>_…``) and gives it back once they are dropped, so passes running at the same time (the
    alerter's loop and its follower, the collector's ``/findings`` requests) never share a name, and a long-lived
    session sees the same few names pass after pass: clickhouse-server 18.16 slows down with every new temporary
    table name a session has seen (a new name per pass: +70 % server CPU by the fourth pass, issue 27). A slot whose
    tables may not have been dropped (a failed ``DROP``) is never handed out again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: set[int] = set()
        self._retired: set[int] = set()
        self._next = 0

    def take(self) -> int:
        with self._lock:
            if self._free:
                slot = min(self._free)
                self._free.discard(slot)
                return slot
            self._next += 1
            return self._next - 1

    def give_back(self, slot: int) -> None:
        with self._lock:
            if slot not in self._retired:
                self._free.add(slot)

    def retire(self, slot: int) -> None:
        with self._lock:
            self._retired.add(slot)


_SLOTS = _Slots()
_CLUSTER_MARK = "(sparktap_scope_cluster_d41d8cd98f00)"
_APP_MARK = "(sparktap_scope_app_d41d8cd98f00)"
_MARKS = re.compile("|".join(re.escape(m) for m in (_CLUSTER_MARK, _APP_MARK)))
_STAGING_WARNED = False
_MODERN_SETTINGS = ("allow_suspicious_low_cardinality_types = 1", "compile_expressions = 0")
"""A staged relation's CREATE on servers with LowCardinality: a relation may carry a LowCardinality number (a function
of a LowCardinality column), fine in a query and refused in a table unless allowed; no JIT compilation of its
expressions (tens of rows: compiling, ~1 s the first times a process sees them, never pays back)"""


def _reason(exc: BaseException) -> str:
    """The end of an error's first line (a storage error's first line quotes the query before the server's reason)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 300 else "…" + text[-300:]


# ----------------------------------------------------------------------------------- listing (sparktap findings)

_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str) -> float:
    """'90s', '30m', '2h', '7d', '1w' -> seconds."""
    match = _SINCE.match(text)
    if not match:
        raise ValueError(f"--since {text!r}: expected a number and a unit s, m, h, d or w, e.g. 2h or 7d")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


@dataclass(frozen=True)
class FindingsRequest:
    """What ``sparktap findings`` asks for: applications, clusters (empty: all), how far back, the lowest severity,
    and who (users, teams; empty: anyone)."""

    apps: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()
    since: str = "24h"
    min_severity: Severity = "info"
    users: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        parse_since(self.since)
        if self.min_severity not in SEVERITIES:
            raise ValueError(f"min_severity {self.min_severity!r}: expected one of {', '.join(SEVERITIES)}")

    def query_string(self) -> str:
        """As URL query parameters (what the collector's ``/findings`` reads)."""
        pairs = [("app", a) for a in self.apps] + [("cluster", c) for c in self.clusters]
        who = [("user", u) for u in self.users] + [("team", t) for t in self.teams]
        return urlencode([*pairs, ("since", self.since), ("min_severity", self.min_severity), *who])

    def matches(self, finding: Finding) -> bool:
        """Whether the finding is one of the users' (its ``user``) and teams' (its ``team`` tag, or a job tag naming
        the team, as the routing file matches them)."""
        if self.users and finding.user not in self.users:
            return False
        return not self.teams or finding.team in self.teams or any(t in self.teams for t in finding.job_tags)

    @classmethod
    def from_query(cls, query: Mapping[str, Sequence[str]]) -> FindingsRequest:
        since = list(query.get("since", ["24h"]))[-1]
        severity = list(query.get("min_severity", ["info"]))[-1]
        return cls(
            tuple(query.get("app", ())),
            tuple(query.get("cluster", ())),
            since,
            cast(Severity, severity),
            tuple(query.get("user", ())),
            tuple(query.get("team", ())),
        )


def find(
    query: QueryFn,
    request: FindingsRequest,
    *,
    database: str = DEFAULT_DATABASE,
    version: tuple[int, ...] = LATEST_VERSION,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    now_ms: int | None = None,
    final_reads: bool = False,
) -> list[Finding]:
    """The findings ``request`` asks for, the most time lost first, over events of the last ``request.since``
    (``final_reads``: the store is one node, see ``Detector``)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    scope = Scope.of(request.clusters, request.apps)
    detector = Detector(
        query, thresholds, database, version, scope, min_severity=request.min_severity, final_reads=final_reads
    )
    found = detector.findings(now - int(parse_since(request.since) * 1000), now + 60_000)
    return [f for f in found if request.matches(f)]


def from_dict(data: Mapping[str, Any]) -> Finding:
    """A finding back from ``Finding.to_dict()`` (JSON)."""
    fields = {k: v for k, v in data.items() if k not in ("key", "rule_title")}
    if "job_tags" in fields:
        fields["job_tags"] = tuple(fields["job_tags"])
    return Finding(**fields)


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TERMINAL_ESCAPES = {
    code: _escape(code)
    for code in (
        *range(0x00, 0x20),  # C0: ESC starts a terminal sequence (window title, cursor moves), BEL, CR, LF …
        0x7F,
        *range(0x80, 0xA0),  # C1: CSI (0x9b) and OSC (0x9d) are escape sequences on their own in some terminals
        0x200E,
        0x200F,
        0x2028,
        0x2029,
        *range(0x202A, 0x202F),  # bidirectional overrides reorder what is shown (a row reading other than it is)
        *range(0x2066, 0x206A),
    )
}


def terminal_text(value: object) -> str:
    """A value as it may reach a terminal: control characters (C0, DEL, C1), line separators and bidirectional
    controls written as visible escapes (``\\x1b``, ``\\u202e``), so a Spark or Connect user's name, a job
    description or a silence's reason cannot move the cursor, retitle the window, ring the bell or forge a row.
    JSON output needs none of this: ``json.dumps`` escapes control characters itself."""
    return str(value).translate(_TERMINAL_ESCAPES)


def text_table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> str:
    """Left-aligned columns, a rule under the headers; the last column is not padded. Every cell goes through
    ``terminal_text`` (every text table of the CLI is made here)."""
    cells = [[terminal_text(c) for c in r] for r in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = "  ".join("{:<" + str(w) + "}" for w in widths)
    out = [line.format(*cells[0]), line.format(*("-" * w for w in widths))]
    out += [line.format(*r) for r in cells[1:]]
    return "\n".join(text.rstrip() for text in out)


FINDING_HEADERS = ("rule", "severity", "where", "finding")


def finding_row(f: Finding) -> tuple[str, str, str, str]:
    """The demo's columns of one finding: rule, severity, where (stage, SQL execution or streaming query, with
    its job or SQL description, else a stage's call site), explanation."""
    where = {
        "stage": f"stage {f.stage_id}",
        "stream": f"stream {f.stage_name}",
        "table": f"table {f.stage_name}",
        "sql": f"sql {f.sql_execution_id}",
        "app": "application",
    }[f.subject]
    return f.rule, f.severity, f'{where} "{f.name}"' if f.name else where, f.explanation

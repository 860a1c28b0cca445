"""What a detection rule is made of: the kit every module of ``detection/rules/`` builds its one rule from.

A rule module defines ``RULE = Rule(...)``: its thresholds (``config``, a ``Group`` subclass with defaults), its SQL
(``sql(thresholds) -> list[RuleSql]``, expressions over the ``stage`` or ``aqe_read`` relation of ``sql.py``, or the
``plan`` or ``streaming`` relation of ``relations.py``, the ``app`` relation of ``fleet.py``, or the ``table``
relation of ``tables.py``), a
title and a one-line summary, its condition in words (``condition(thresholds)``, the Grafana alert description) and
its runbook entry (Markdown: fires when, check, fix). ``registry.py`` discovers the modules; adding a rule is adding
one file.

``RuleSql.as_tuple`` renders a rule's parts as one tuple of the ``ARRAY JOIN`` that ``query.py`` evaluates for all
the rules in one pass over each relation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sparktap.detection.sql import lit, strings

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")
Source = Literal["stage", "aqe_read", "plan", "streaming", "app", "table"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

Ratio = Annotated[float, Field(gt=0)]
Share = Annotated[float, Field(gt=0, le=1)]
Size = Annotated[int, Field(ge=0)]
Millis = Annotated[int, Field(ge=0)]


class Group(BaseModel):
    """A rule's named thresholds (kubernetes-mixin ``_config`` style): frozen, no unknown names."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Impact(Group):
    """The time floors of a rule (issue 22): no finding whose estimated time lost (``time_lost_ms`` of its evidence,
    defined per rule in the runbook) is under ``min_time_lost_ms``, and no critical one under
    ``critical_min_time_lost_ms`` (it is reported as a warning)."""

    min_time_lost_ms: Millis = 0
    critical_min_time_lost_ms: Millis = 0

    @model_validator(mode="after")
    def _floors(self) -> Impact:
        if self.min_time_lost_ms > self.critical_min_time_lost_ms:
            raise ValueError("min_time_lost_ms must not exceed critical_min_time_lost_ms")
        return self


class Ladder(Impact):
    """info <= warning <= critical rungs of one ratio."""

    @model_validator(mode="after")
    def _ordered(self) -> Ladder:
        rungs = [getattr(self, n) for n in ("ratio_info", "ratio_warning", "ratio_critical") if hasattr(self, n)]
        if rungs != sorted(rungs):
            raise ValueError(f"severity rungs must not decrease: {rungs}")
        return self


@dataclass(frozen=True)
class RuleSql:
    """One rule over one relation. ``derived`` are named helper expressions (computed once per row, visible to all
    the other expressions); ``severity`` may be '' for "does not fire" and is only used where ``condition`` holds."""

    rule: str
    source: Source
    condition: str
    severity: str
    value: str
    threshold: str
    evidence: tuple[tuple[str, str], ...]
    explanation: str
    fix: str
    derived: tuple[tuple[str, str], ...] = ()
    needs: frozenset[str] = field(default_factory=frozenset)
    time_lost: str = "0."
    floors: tuple[int, int] = (0, 0)

    def as_tuple(self) -> str:
        """The rule's tuple; ``time_lost_ms`` is the last evidence number, the time floors gate the severity."""
        evidence = (*self.evidence, (TIME_LOST, self.time_lost))
        names = strings(n for n, _ in evidence)
        values = "[" + ", ".join(f"toFloat64({e})" for _, e in evidence) + "]"
        return (
            f"tuple({lit(self.rule)}, {self.graded()}, toFloat64({self.value}), "
            f"toFloat64({self.threshold}), {names}, {values}, {self.explanation}, {self.fix})"
        )

    def graded(self) -> str:
        """The finding's severity: '' where the condition does not hold or the time lost is under the floor, a
        ``critical`` under the critical floor lowered to ``warning``."""
        low, high = self.floors
        lost = f"toFloat64({self.time_lost})"
        return (
            f"multiIf(NOT ({self.condition}) OR {lost} < {lit(low)}, '', "
            f"{self.severity} = 'critical' AND {lost} < {lit(high)}, 'warning', {self.severity})"
        )

    def probe_tuple(self, index: int) -> str:
        """``as_tuple``'s shape with only the severity computed and ``index`` as the rule: which of a pass's rules
        fire, without analysing their values, evidence and texts (``query.RuleChoice``)."""
        return f"tuple({lit(str(index))}, {self.graded()}, 0., 0., emptyArrayString(), emptyArrayFloat64(), '', '')"


TIME_LOST = "time_lost_ms"
MEDIAN_MIN_TASKS = 5
"""Below this many tasks a stage's median task is not a baseline: the rules use its balanced task (mean) instead."""

TYPICAL_TASK = (
    "typical_task_ms",
    f"if(tasks >= {MEDIAN_MIN_TASKS}, dur_p50, dur_sum / greatest(tasks, 1.))",
)
"""The stage's typical task time: the median with enough tasks, else the mean (the balanced task time)."""

STRAGGLER_LOST = ("straggler_lost_ms", "greatest(dur_max - typical_task_ms, 0.)")
"""The slowest task's time beyond the typical task: what the stage would finish sooner without the straggler."""


ZERO_MEDIAN_MIN_SHARE = 0.2
"""With a median task of nothing (AQE or a few keys left most partitions empty), the largest task is a hot partition
only when it holds at least this share of the stage's data: k equal non-empty partitions hold 1/k each, and five or
more of them run side by side, whatever the empty ones."""


def none_beside(
    largest: str,
    total: str,
    amount: Callable[[str], str],
    what: str,
    lead: tuple[str, str] = ("One task reads all ", "Largest task reads "),
) -> str:
    """The words for a largest task beside a median task of nothing, where a ratio would divide by zero: 'One task
    reads all 1.20 GiB of shuffle data; the median task reads none', or where other tasks read some too 'Largest task
    reads 150.00 MiB of shuffle data (62 % of the stage's 240.00 MiB); the median task reads none'. ``largest`` and
    ``total`` are SQL numbers, ``amount`` formats one (``size``, ``rows``), ``what`` is SQL text (a string literal
    such as ' of shuffle data'), ``lead`` the words before the amount when the task read everything, and when it
    did not."""
    whole = concat(lit(lead[0]), amount(largest), what)
    part = concat(
        lit(lead[1]),
        amount(largest),
        what,
        "' ('",
        pct(f"{largest} / {total}"),
        "' of the stage''s '",
        amount(total),
        "')'",
    )
    return concat(f"if({largest} >= {total}, {whole}, {part})", "'; the median task reads none'")


def floors(config: Impact) -> tuple[int, int]:
    """A rule config's time floors, for ``RuleSql.floors``."""
    return config.min_time_lost_ms, config.critical_min_time_lost_ms


T = TypeVar("T")
"""The thresholds a rule's SQL reads: ``sparktap.detection.thresholds.Thresholds``, which is composed of every
rule's ``config`` (so this module cannot name it without a circle)."""


@dataclass(frozen=True)
class Rule(Generic[T]):
    """One detection rule, everything about it in one place (the dashboards, alert rules, alerter, report and
    runbook all read it from here). ``order`` sorts the rules (tables, alert groups, runbook)."""

    id: str
    order: int
    title: str
    summary: str
    config: type[Group]
    sql: Callable[[T], list[RuleSql]]
    condition: Callable[[T], str]
    runbook: str
    time_lost: str = ""
    """How the rule estimates ``time_lost_ms`` (the runbook's *Time lost* line)."""

    @property
    def anchor(self) -> str:
        """The runbook heading's anchor (GitHub's slug of the title)."""
        return self.title.lower().replace(" ", "-").replace("/", "")


# ------------------------------------------------------------------------------- SQL text helpers for the rules


def ladder(value: str, rungs: Sequence[tuple[Severity, float]]) -> str:
    """multiIf over (severity, rung) from the highest rung down; '' below the lowest."""
    ordered = sorted(rungs, key=lambda r: SEVERITIES.index(r[0]), reverse=True)
    arms = ", ".join(f"{value} >= {lit(rung)}, {lit(sev)}" for sev, rung in ordered)
    return f"multiIf({arms}, '')"


def crossed(value: str, info: float, warning: float, critical: float) -> str:
    """The rung of a three-rung ladder the value crossed (a finding's ``threshold``)."""
    return (
        f"multiIf({value} >= {lit(critical)}, {lit(critical)}, {value} >= {lit(warning)}, {lit(warning)}, {lit(info)})"
    )


def secs(expr: str) -> str:
    """Milliseconds as '120 ms' under a second, else '2.5 s' (a sub-second median must not read '0 s')."""
    return (
        f"if(({expr}) < 1000, concat(toString(round({expr})), ' ms'), "
        f"concat(toString(round(({expr}) / 1000, 1)), ' s'))"
    )


def times(expr: str, digits: int = 1) -> str:
    return f"concat(toString(round({expr}, {digits})), '×')"


def pct(expr: str) -> str:
    return f"concat(toString(round(100 * ({expr}))), ' %')"


def size(expr: str) -> str:
    return f"formatReadableSize({expr})"


def integer(expr: str) -> str:
    return f"toString(toUInt64(round({expr})))"


def rows(expr: str) -> str:
    """A row count as '11390100 rows'."""
    return concat(integer(expr), "' rows'")


def join(*parts: str) -> str:
    """SQL fragments joined by commas (separating commas written at a part's ends are tolerated)."""
    return ", ".join(p.strip().strip(",").strip() for p in parts)


def concat(*parts: str) -> str:
    """concat() of SQL string expressions; separating commas written at a part's ends are tolerated."""
    return "concat(" + ", ".join(p.strip().strip(",").strip() for p in parts) + ")"

"""What the application rules of issue 25 (idle executors, memory over-provisioned, memory pressure, driver memory
pressure, run-over-run regression) share, written once: their ``RuleSql`` over the ``app`` relation of ``fleet.py``,
a recurring job's runs out of the relation's ``h_*`` arrays, and the recommended memory size their evidence and fix
quote (rounded up to 256 MiB, given to Spark in MiB).

Same dialect as ``sql.py`` (18.16 and chDB): no lambda captures a column, a per-row value goes in as
``replicate(value, array)``.
"""

from __future__ import annotations

from typing import Any

from sparktap.detection.rule import Impact, MiB, RuleSql, floors
from sparktap.detection.sql import lit

STEP = 256 * MiB
"""A recommended memory size is a multiple of this."""


def app_rule(rule: str, config: Impact | None = None, **parts: Any) -> list[RuleSql]:
    """The rule's one ``RuleSql`` over the ``app`` relation; with ``config``, its time floors gate the severity."""
    if config is not None:
        parts["floors"] = floors(config)
    return [RuleSql(rule=rule, source="app", **parts)]


def with_headroom(expr: str, headroom: float) -> str:
    """``expr`` plus ``headroom`` (0.5: 50 %)."""
    return f"{expr} * {lit(1 + headroom)}"


def rounded_up(expr: str, minimum_bytes: int = 0) -> str:
    """A recommended memory size: ``expr`` (bytes) rounded up to 256 MiB, at least ``minimum_bytes``."""
    size = f"ceil({expr} / {lit(STEP)}) * {lit(STEP)}"
    return f"greatest({size}, {lit(minimum_bytes)})" if minimum_bytes else size


def spark_mib(expr: str) -> str:
    """A size in bytes as the number of a Spark memory setting in MiB (``'2048'`` for ``2048m``)."""
    return f"toString(toUInt64({expr} / {MiB}))"


def job_runs(values: str, n: int, *, this_run: bool) -> str:
    """The ``values`` (an ``h_*`` array of the relation) of this application's recurring job, for its finished runs
    that started before this one (``this_run``: up to this one, itself included), newest first, at most ``n``."""
    me = "replicate(toString(app_id), h_apps), replicate(start_ms, h_apps)"
    keep = "t <= s AND e > 0" if this_run else "a != m AND t < s AND e > 0"
    return (
        f"arraySlice(arrayReverseSort((x, t) -> t, arrayFilter((x, a, t, e, m, s) -> {keep}, {values}, h_apps, "
        f"h_starts, h_ends, {me}), arrayFilter((t, a, e, m, s) -> {keep}, h_starts, h_apps, h_ends, {me})), 1, "
        f"{lit(n)})"
    )

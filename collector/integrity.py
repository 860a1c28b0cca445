"""The integrity check: does ClickHouse hold each event exactly once, with no ``seq`` gaps?

    report = integrity_report(storage)                  # through the _dedup views: what sparktap users see
    assert report.problems(expected=100_000) == []
    control = integrity_report(storage, source="plain")  # the <table>_plain copies: no deduplication at all
    assert control.problems(expected=100_000) != []      # after a redelivery, the negative control must fail

``rows`` counts rows as the source returns them; ``distinct_keys`` counts distinct (app_id, app_attempt, seq);
``duplicates = rows - distinct_keys``; ``missing`` sums ``max(seq) - distinct seq`` per application attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sparktap.schemas.ddl import Schema
from sparktap.store import Storage
from sparktap.store.views import PLAIN_SUFFIX

Source = Literal["dedup", "plain", "base"]
_SUFFIX = {"dedup": "_dedup", "plain": PLAIN_SUFFIX, "base": ""}


@dataclass(frozen=True)
class IntegrityReport:
    source: str
    rows: int
    distinct_keys: int
    missing: int
    applications: int

    @property
    def duplicates(self) -> int:
        return self.rows - self.distinct_keys

    def problems(self, expected: int) -> list[str]:
        """What is wrong compared with ``expected`` events (empty: the check passes)."""
        out = []
        if self.rows != expected:
            out.append(f"{self.source}: {self.rows} rows, expected {expected}")
        if self.distinct_keys != expected:
            out.append(f"{self.source}: {self.distinct_keys} distinct (app_id, app_attempt, seq), expected {expected}")
        if self.duplicates:
            out.append(f"{self.source}: {self.duplicates} duplicate rows")
        if self.missing:
            out.append(f"{self.source}: {self.missing} seq gaps")
        return out


def integrity_report(storage: Storage, source: Source = "dedup", schema: Schema | None = None) -> IntegrityReport:
    """Count rows, distinct event keys and ``seq`` gaps over every event table read through ``source``:
    ``dedup`` (the ``_dedup`` views), ``plain`` (the no-dedup copies) or ``base`` (the tables without FINAL)."""
    schema = schema or storage.schema()
    suffix = _SUFFIX[source]
    union = "\n    UNION ALL\n    ".join(
        f"SELECT app_id, app_attempt, seq FROM {schema.qualified(name + suffix)}"  # noqa: S608 - our identifiers
        for name in sorted(schema.tables)
    )
    (totals,) = storage.query(
        "SELECT count() AS rows, uniqExact(app_id, app_attempt, seq) AS distinct_keys\n"  # noqa: S608
        f"FROM (\n    {union}\n)"
    )
    gaps = storage.query(
        "SELECT sum(missing) AS missing, count() AS applications FROM (\n"  # noqa: S608
        "  SELECT toInt64(max(seq)) - toInt64(count()) AS missing FROM (\n"
        f"    SELECT DISTINCT app_id, app_attempt, seq FROM (\n    {union}\n    )\n"
        "  ) GROUP BY app_id, app_attempt\n"
        ")"
    )
    missing = int(gaps[0]["missing"] or 0) if gaps else 0
    applications = int(gaps[0]["applications"] or 0) if gaps else 0
    return IntegrityReport(source, int(totals["rows"]), int(totals["distinct_keys"]), missing, applications)

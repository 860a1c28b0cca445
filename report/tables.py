"""The report's Tables section (issue 42): the tables the application read and wrote (``table_rollup``), what it
wrote to each (files, bytes, rows, average file size), and each written table's trend across the fleet: the files
written to it per day over the 30 days up to the application's last event, by every application of its cluster.

A table's name and location are untrusted text: they never reach SQL (the trend is a join on the application's own
rows, selected by its id) and are HTML-escaped in the section.
"""

# ruff: noqa: S608 - SQL from our own identifiers and the application id's quoted literal, never from user text.

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sparktap.report.text import fmt_bytes, h
from sparktap.schemas.rollups import TABLE_KEY, TABLE_ROLLUP

TREND_DAYS = 30
DAY_MS = 86_400_000


@dataclass(frozen=True)
class TableUse:
    """One table (or bare path) one application read or wrote, with what it did to it."""

    role: str
    catalog: str
    table: str
    format: str
    location: str
    write_mode: str
    accesses: int
    files: int
    bytes: int
    rows: int
    trend_files: int = 0
    """files written to the table per the last ``TREND_DAYS`` days, by every application of the cluster"""
    trend_days: int = 0
    trend_writers: int = 0

    @property
    def name(self) -> str:
        return self.table or self.location

    @property
    def avg_file_bytes(self) -> float | None:
        return self.bytes / self.files if self.files else None


def read_tables(
    query: Callable[[str], list[dict[str, Any]]], view: Callable[[str], str], app: str, last_ms: int
) -> list[TableUse]:
    """The application's tables (``app``: the quoted literal of its id), writes first, then by files and name."""
    rollup = view(TABLE_ROLLUP)
    own = query(
        f"""SELECT role, toString(catalog) AS catalog, toString(`table`) AS tbl, toString(format) AS fmt, location,
    arrayStringConcat(arraySort(groupUniqArray(toString(write_mode))), ', ') AS modes, count() AS n,
    sum(ifNull(files, 0)) AS files, sum(ifNull(bytes, 0)) AS bytes, sum(ifNull(rows, 0)) AS rows_
FROM {rollup}
WHERE app_id = {app}
GROUP BY role, catalog, tbl, fmt, location
ORDER BY role DESC, files DESC, tbl, location"""
    )
    since = last_ms - TREND_DAYS * DAY_MS
    trend = query(
        f"""SELECT toString(catalog) AS catalog, {TABLE_KEY} AS t_key, toString(format) AS fmt,
    sum(ifNull(files, 0)) AS files, uniqExact(toDate(event_time)) AS days, uniqExact(app_id) AS writers
FROM {rollup}
WHERE role = 'write' AND event_time_ms >= {int(since)} AND event_time_ms <= {int(last_ms)}
    AND (cluster, catalog, `table`, location) IN
        (SELECT cluster, catalog, `table`, location FROM {rollup} WHERE app_id = {app} AND role = 'write')
GROUP BY catalog, t_key, fmt"""
    )
    trends = {(str(r["catalog"]), str(r["t_key"]), str(r["fmt"])): r for r in trend}
    out = []
    for r in own:
        use = TableUse(
            str(r["role"]),
            str(r["catalog"]),
            str(r["tbl"]),
            str(r["fmt"]),
            str(r["location"]),
            str(r["modes"]),
            int(r["n"]),
            int(r["files"]),
            int(r["bytes"]),
            int(r["rows_"]),
        )
        t = trends.get((use.catalog, use.name, use.format)) if use.role == "write" else None
        if t is not None:
            use = replace(use, trend_files=int(t["files"]), trend_days=int(t["days"]), trend_writers=int(t["writers"]))
        out.append(use)
    return out


def section_html(tables: list[TableUse], table: Callable[[list[str], list[list[str]]], str]) -> str:
    """The Tables section: one row per table and role, every name and location escaped."""
    rows = []
    for u in tables:
        trend = (
            f"{u.trend_files // max(u.trend_days, 1)} files a day over {u.trend_days} days "
            f"({u.trend_files} files, {u.trend_writers} application{'s' if u.trend_writers != 1 else ''})"
            if u.trend_days
            else "–"
        )
        rows.append(
            [
                h(u.role),
                f'<div class="desc">{h(u.name) or "–"}</div>',
                h(u.catalog or "–"),
                h(u.format or "–"),
                f'<div class="desc">{h(u.location) or "–"}</div>',
                h(u.write_mode or "–"),
                str(u.accesses),
                str(u.files),
                h(fmt_bytes(u.bytes)),
                h(fmt_bytes(u.avg_file_bytes)),
                h(trend),
            ]
        )
    headers = ["Role", "Table", "Catalog", "Format", "Location", "Write mode", "Accesses", "Files", "Bytes"]
    return table([*headers, "Average file", f"Written, last {TREND_DAYS} days (all applications)"], rows)

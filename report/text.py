"""Escaping and readable quantities for the report's HTML and plotly labels."""

from __future__ import annotations

import datetime as dt
from html import escape


def h(value: object) -> str:
    """Escape for HTML text and attribute values."""
    return escape(str(value), quote=True)


def t(value: object) -> str:
    """Escape for plotly labels (plotly reads ``<b>``, ``<a href>`` … in text, and decodes ``&lt;``)."""
    return escape(str(value), quote=False)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "–"
    if ms < 1_000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    return f"{minutes // 60} h {minutes % 60} min"


def fmt_time(ms: int | None) -> str:
    if ms is None:
        return "–"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

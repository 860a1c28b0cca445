"""Expansion of the grafana-clickhouse-datasource SQL macros, exactly as the plugin's backend does it
(``shared/contracts/clickhouse-datasource/macro-expansions.derived.json``), plus Grafana template-variable
interpolation for the formats the sparktap dashboards use.

The built-in alerter runs the Grafana alert-rule SQL through ``expand`` with its own time range, so Grafana and
the alerter evaluate the same text. ``$__conditionalAll`` and ``$__adHocFilters`` are frontend-only in the plugin
and are never used by sparktap queries.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

_MACRO = re.compile(r"\$__(\w+)")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w|y)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000, None: 1}


class MacroError(ValueError):
    """A macro is unknown or has the wrong number of arguments."""


def _parse_args(sql: str, start: int) -> tuple[list[str], int]:
    """Arguments of ``(a, b(c, d))`` starting at ``sql[start] == '('``; returns (args, index after ')')."""
    depth, args, current, i = 0, [], [], start
    quote: str | None = None
    while i < len(sql):
        ch = sql[i]
        if quote:
            current.append(ch)
            if ch == "\\" and i + 1 < len(sql):
                current.append(sql[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
            current.append(ch)
        elif ch == "(":
            depth += 1
            if depth > 1:
                current.append(ch)
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return [a for a in args if a != ""] if args != [""] else [], i + 1
            current.append(ch)
        elif ch == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    raise MacroError("unbalanced parentheses in macro arguments")


def _seconds(duration: str) -> float:
    match = _DURATION.match(duration)
    if not match:
        raise MacroError(f"invalid interval {duration!r}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def expand(sql: str, from_ms: int, to_ms: int, interval_ms: int = 20_000) -> str:
    """Expand every ``$__macro`` in ``sql`` for the time range [from_ms, to_ms] (epoch milliseconds, UTC)."""
    from_s, to_s = from_ms // 1000, to_ms // 1000
    from_date = datetime.fromtimestamp(from_s, UTC).strftime("%Y-%m-%d")
    to_date = datetime.fromtimestamp(to_s, UTC).strftime("%Y-%m-%d")
    interval_s = max(1, interval_ms // 1000)
    interval_ms_clamped = max(1, interval_ms)

    def time_filter(a: Sequence[str]) -> str:
        return f"{a[0]} >= toDateTime({from_s}) AND {a[0]} <= toDateTime({to_s})"

    def date_filter(a: Sequence[str]) -> str:
        return f"{a[0]} >= toDate('{from_date}') AND {a[0]} <= toDate('{to_date}')"

    with_args: dict[str, tuple[int, Callable[[Sequence[str]], str]]] = {
        "timeFilter": (1, time_filter),
        "timeFilter_ms": (
            1,
            lambda a: f"{a[0]} >= fromUnixTimestamp64Milli({from_ms}) AND {a[0]} <= fromUnixTimestamp64Milli({to_ms})",
        ),
        "dateFilter": (1, date_filter),
        "dateTimeFilter": (2, lambda a: f"({date_filter(a[:1])}) AND ({time_filter(a[1:])})"),
        "timeFrom": (1, lambda a: f"{a[0]} >= toDateTime({from_s})"),
        "timeTo": (1, lambda a: f"{a[0]} <= toDateTime({to_s})"),
        "timeGroup": (2, lambda a: f"toStartOfInterval(toDateTime({a[0]}), INTERVAL {int(_seconds(a[1]))} second)"),
        "timeInterval": (1, lambda a: f"toStartOfInterval(toDateTime({a[0]}), INTERVAL {interval_s} second)"),
        "timeInterval_ms": (
            1,
            lambda a: f"toStartOfInterval(toDateTime64({a[0]}, 3), INTERVAL {interval_ms_clamped} millisecond)",
        ),
    }
    plain = {
        "fromTime": f"toDateTime({from_s})",
        "toTime": f"toDateTime({to_s})",
        "fromTime_ms": f"fromUnixTimestamp64Milli({from_ms})",
        "toTime_ms": f"fromUnixTimestamp64Milli({to_ms})",
        "interval_s": str(interval_s),
        "interval": f"{interval_s}s",
        "interval_ms": str(interval_ms_clamped),
    }
    out: list[str] = []
    pos = 0
    while True:
        match = _MACRO.search(sql, pos)
        if match is None:
            out.append(sql[pos:])
            return "".join(out)
        name = match.group(1)
        out.append(sql[pos : match.start()])
        if name in with_args:
            arity, render = with_args[name]
            if match.end() >= len(sql) or sql[match.end()] != "(":
                raise MacroError(f"macro $__{name} needs {arity} argument(s)")
            args, pos = _parse_args(sql, match.end())
            if len(args) != arity:
                raise MacroError(f"macro $__{name} expects {arity} argument(s), got {len(args)}")
            out.append(render(args))
        elif name in plain:
            out.append(plain[name])
            pos = match.end()
        else:
            raise MacroError(f"unknown macro $__{name}")


# ------------------------------------------------------------------------------------------ template variables

_VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")


def interpolate(sql: str, variables: Mapping[str, str | Sequence[str]]) -> str:
    """Substitute Grafana template variables as the ClickHouse plugin's frontend does.

    ``${v:percentencode}`` -> ``a%2Fb`` for one value, ``%7Ba%2Cb%7D`` (``{a,b}``) for several (Grafana's
    ``encodeURIComponentStrict``: only ``A-Z a-z 0-9 - _ . ~`` stay, as Python's ``quote(safe="")``; the only format
    sparktap queries use, see ``detection.sql.variable_values``); ``${v:singlequote}`` -> ``'a','b'`` with ``'``
    as ``\\'`` (a backslash is left as is: unsafe on ClickHouse); ``${v:csv}`` -> ``a,b``; ``${v:sqlstring}`` ->
    ``'a','b'`` with quotes doubled (unsafe likewise); ``$v`` / ``${v}`` -> the value, or ``'a','b'`` for several
    values (the plugin's default format).
    Names starting with ``__`` (macros) are left alone; an unknown variable is an error."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        fmt = match.group(2)
        if name.startswith("__"):
            return match.group(0)
        if name not in variables:
            raise KeyError(f"template variable ${name} has no value")
        raw = variables[name]
        values = [raw] if isinstance(raw, str) else list(raw)
        if fmt == "percentencode":  # encodeURIComponentStrict; several values as the glob "{a,b}"
            text = raw if isinstance(raw, str) else "{" + ",".join(values) + "}"
            return urllib.parse.quote(text, safe="")
        if fmt == "singlequote":
            return ",".join("'" + v.replace("'", "\\'") + "'" for v in values)
        if fmt == "sqlstring":
            return ",".join("'" + v.replace("'", "''") + "'" for v in values)
        if fmt == "csv":
            return ",".join(values)
        if fmt is not None:
            raise KeyError(f"template variable format {fmt!r} is not supported here")
        return values[0] if isinstance(raw, str) else "'" + "','".join(values) + "'"

    return _VARIABLE.sub(replace, sql)

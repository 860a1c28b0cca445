"""The one glob language of routes, silences, the team mapping and their export to Grafana, and the durations of
the routing file and ``sparktap silence`` (``4h``, ``1d``)."""

from __future__ import annotations

import functools
import math
import re
from typing import Any

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_REGEX_SPECIAL = set("\\.+*?()|[]{}^$")
"""Characters a regular expression reads as operators, in Python's ``re`` and in RE2 alike: escaped when literal."""


def shown(value: Any, limit: int = 40) -> str:
    """A value for a message: as given when short, else its start and end around '…' (a 400-digit number is
    not repeated to the user whole)."""
    text = str(value)
    return text if len(text) <= limit else f"{text[: limit - 10]}…{text[-6:]}"


def parse_duration(text: Any) -> float:
    """'90s', '30m', '4h', '1d', '1w' (or a number of seconds) -> seconds; ValueError otherwise."""
    if isinstance(text, int | float) and not isinstance(text, bool) and 0 < text < math.inf:
        return float(text)
    match = _DURATION.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"{shown(text)!r} is not a duration: expected a number and a unit s, m, h, d or w, e.g. 4h")
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"{shown(text)!r} is too long a duration: the number is too large")
    return seconds


def glob_regex(glob: str) -> str:
    """The one glob language of routes, silences and their export to Grafana, as a regular expression matching a
    whole value (the same text for Python's ``re`` here and RE2 in Grafana): ``*`` any run of characters, ``?`` one,
    ``[abc]``/``[a-z]`` one of a class, ``[!…]`` one not in it; every other character is itself. ValueError (one
    clear reason) for what the two engines would read differently: an unclosed ``[``, an empty class, a class that
    starts with ``^`` or ``]`` or holds a ``[`` (POSIX classes in RE2), a reversed range."""
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            end = glob.find("]", i + 1)
            if end < 0:
                raise ValueError(f"{glob!r}: '[' at position {i + 1} is never closed by ']'")
            body = glob[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            if not body:
                raise ValueError(f"{glob!r}: an empty class [] at position {i + 1}")
            if body[0] in "^]" or "[" in body or any(pair in body for pair in ("--", "&&", "||", "~~")):
                raise ValueError(
                    f"{glob!r}: the class at position {i + 1} starts with '^' or ']', or holds '[' or a doubled "
                    "-, &, | or ~ (read differently by Grafana's RE2); write [!…] to negate a class"
                )
            cls = "[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]"
            try:
                re.compile(cls)
            except re.error as exc:
                raise ValueError(f"{glob!r}: the class at position {i + 1} is not valid: {exc.msg}") from exc
            out.append(cls)
            i = end
        elif c == "]":
            raise ValueError(f"{glob!r}: ']' at position {i + 1} closes no '['")
        else:
            out.append("\\" + c if c in _REGEX_SPECIAL else c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def _glob_pattern(glob: str) -> re.Pattern[str]:
    return re.compile(glob_regex(glob))


def glob_matches(value: str, glob: str) -> bool:
    """Whether ``value`` matches ``glob`` as a whole (``glob_regex``; an invalid glob matches nothing)."""
    try:
        pattern = _glob_pattern(glob)
    except ValueError:
        return False
    return pattern.fullmatch(value) is not None


def glob_matches_everything(glob: str) -> bool:
    """A glob of wildcards only, with a ``*`` (``*``, ``**``, ``?*``, ``*?*``): it matches every application name
    (names are never empty; ``?*`` misses only the empty one)."""
    return "*" in glob and set(glob) <= {"*", "?"}


def format_duration(seconds: float) -> str:
    """Seconds as Grafana writes durations: '1h', '90m', '45s'."""
    whole = int(seconds)
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size and whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{max(whole, 1)}s"

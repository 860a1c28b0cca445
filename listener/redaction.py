"""Scrubbing text the relay itself writes (its log lines and error messages) before it leaves the process.

The events are redacted in the listener (Redactor.java). Both use ONE pattern set, ``redaction-patterns.txt`` next
to the Java sources (it is a resource of the listener jar): credentials in URLs (up to the last ``@`` before the
host), secret assignments (``password=…``, ``"token": "…"``, ``fs.azure.account.key.<acct>=…``),
``.option("password", …)``, SAS signatures (``sig=…``), SQL ``PASSWORD '…'``, bearer tokens. Each pattern's last
group is the secret; here every mask is ``***``. ``tests/java/redaction_cases.tsv`` holds canaries that the JUnit
tests and the Python tests check against both.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

PATTERNS_FILE = Path(__file__).resolve().parent / "java" / "io" / "sparktap" / "listener" / "redaction-patterns.txt"
MASK = "***"


@dataclass(frozen=True)
class SecretPattern:
    """One line of the pattern file: ``url`` patterns apply to every text, ``secret`` ones unless asked not to."""

    url: bool
    regex: re.Pattern[str]


def parse_patterns(text: str) -> tuple[SecretPattern, ...]:
    """The patterns of a pattern file's text, in order; ValueError naming the line when one is bad."""
    out: list[SecretPattern] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        kind, _, regex = line.partition(" ")
        if kind not in ("url", "secret") or not regex:
            raise ValueError(f'{PATTERNS_FILE.name} line {number}: expected "url <regex>" or "secret <regex>"')
        try:
            compiled = re.compile(regex, re.ASCII)
        except re.error as exc:
            raise ValueError(f"{PATTERNS_FILE.name} line {number}: {exc}") from exc
        if compiled.groups < 1:
            raise ValueError(f"{PATTERNS_FILE.name} line {number}: the regex has no group")
        out.append(SecretPattern(kind == "url", compiled))
    if not out:
        raise ValueError(f"{PATTERNS_FILE.name} holds no pattern")
    return tuple(out)


@functools.cache
def patterns() -> tuple[SecretPattern, ...]:
    """The shared pattern set (read once)."""
    return parse_patterns(PATTERNS_FILE.read_text(encoding="utf-8"))


def mask_last_group(regex: re.Pattern[str], text: str, mask: str = MASK) -> str:
    """Every match of ``regex`` with its last capturing group replaced by ``mask``; the rest of the match stays."""
    out: list[str] = []
    last = 0
    group = regex.groups
    for match in regex.finditer(text):
        start, end = match.span(group)
        if start >= 0:
            out.append(text[last:start])
            out.append(mask)
            last = end
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def mask(text: str, secrets: bool = True) -> str:
    """The shared patterns applied in order (the ``secret`` ones only when ``secrets``), masks ``***``."""
    has_at = "@" in text
    for pattern in patterns():
        if has_at if pattern.url else secrets:
            text = mask_last_group(pattern.regex, text)
    return text


def scrub_text(text: str, max_chars: int = 500) -> str:
    """Mask what the shared patterns mask; truncate to ``max_chars``."""
    out = mask(text)
    if len(out) > max_chars:
        out = out[:max_chars] + "…"
    return out

"""The shared redaction patterns in Python: the relay's own log lines and error messages, and the collector's second
pass over every value a user controls (``clean``, ``is_clean``: ``collector/scrub.py``).

The events are redacted in the listener (Redactor.java). Both use ONE pattern set, ``redaction-patterns.txt`` next
to the Java sources (it is a resource of the listener jar): credentials in URLs (up to the last ``@`` before the
host), secret assignments (``password=…``, ``"token": "…"``, ``fs.azure.account.key.<acct>=…``),
``.option("password", …)`` and Spark Connect's ``options { key: "password" value: "…" }``, SAS signatures
(``sig=…``), SQL ``PASSWORD '…'``, bearer tokens, bare AWS key ids and GitHub, GitLab, Slack, Google and JWT tokens.
Each pattern's last group is the secret; the relay's mask is ``***``, the collector's the listener's
(``LISTENER_MASK``). ``tests/java/redaction_cases.tsv`` holds canaries that the JUnit tests and the Python tests
check against both.

``clean`` is Redactor.java's one path for a user's value, step for step: look at no more than the cap plus
``SCAN_SLACK_CHARS`` characters (bounded work whatever the length), remove control characters, mask, cut to the cap
with ``…[truncated N chars]`` (``schemas/types.py``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparktap.schemas.types import UserText

PATTERNS_FILE = Path(__file__).resolve().parent / "java" / "io" / "sparktap" / "listener" / "redaction-patterns.txt"
MASK = "***"
LISTENER_MASK = "*********(redacted)"
"""Redactor.java's mask of a secret, which the collector writes too: a value looks the same whichever pass masked it"""
SCAN_SLACK_CHARS = 1024
"""Redactor.java's: past the cap, this much more is still masked, so a secret straddling the cut is masked first"""
_INVISIBLE = "\u2028\u2029\u202a-\u202e\u2066-\u2069"
"""Line and paragraph separators (a line break to JavaScript and some terminals) and the bidirectional overrides and
isolates that make a terminal or page show text in another order than it is (CVE-2021-42574): removed like controls"""
_CONTROLS = {
    "name": re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]"),
    "text": re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]"),  # tab and newline stay in free text
}


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
        if start >= 0 and not text.startswith(mask, start):  # masked already: masking twice changes nothing
            out.append(text[last:start])
            out.append(mask)
            last = end
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def mask(text: str, secrets: bool = True, secret_mask: str = MASK) -> str:
    """The shared patterns applied in order (the ``secret`` ones only when ``secrets``); URL credentials become
    ``***``, secrets ``secret_mask``."""
    has_at = "@" in text
    for pattern in patterns():
        if pattern.url:
            if has_at:
                text = mask_last_group(pattern.regex, text)
        elif secrets:
            text = mask_last_group(pattern.regex, text, secret_mask)
    return text


def truncate(value: str, max_chars: int, unseen: int = 0) -> str:
    """``value`` (followed by ``unseen`` characters cut off already) as at most ``max_chars`` characters: when
    longer, its start and ``…[truncated N chars]``, N counting every character left out (Redactor.truncate)."""
    if unseen == 0 and len(value) <= max_chars:
        return value
    from sparktap.schemas.types import TRUNCATION_MARKER  # here: the relay runs without pydantic (schemas' models)

    total = len(value) + unseen
    end = max(0, min(len(value), max_chars - len(TRUNCATION_MARKER.format(total))))
    cut = TRUNCATION_MARKER.format(total - end)
    return cut[:max_chars] if len(cut) > max_chars else value[:end] + cut


def clean(value: str, spec: UserText, secret_mask: str = LISTENER_MASK) -> str:
    """A user's value made safe to store: Redactor.java's ``name`` (``spec`` NAME) or ``text`` (TEXT) path."""
    window = spec.max_chars + SCAN_SLACK_CHARS
    unseen = max(0, len(value) - window)
    head = value[:window] if unseen else value
    head = _CONTROLS[spec.kind].sub("", head)
    return truncate(mask(head, True, secret_mask), spec.max_chars, unseen)


def is_clean(value: str, spec: UserText, secret_mask: str = LISTENER_MASK) -> bool:
    """Whether ``clean`` leaves ``value`` as it is (the cheap checks first)."""
    if len(value) > spec.max_chars or _CONTROLS[spec.kind].search(value) is not None:
        return False
    return mask(value, True, secret_mask) == value


def clean_name(value: str) -> str:
    """A name a user chose (a Connect user id, a tag value), as the listener sends it."""
    from sparktap.schemas.types import NAME

    return clean(value, NAME)


def clean_text(value: str) -> str:
    """Free text a user wrote (a description, SQL or plan text), as the listener sends it."""
    from sparktap.schemas.types import TEXT

    return clean(value, TEXT)


def scrub_text(text: str, max_chars: int = 500) -> str:
    """Mask what the shared patterns mask; truncate to ``max_chars``."""
    out = mask(text)
    if len(out) > max_chars:
        out = out[:max_chars] + "…"
    return out

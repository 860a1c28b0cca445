"""Scrubbing text the relay itself writes (its log lines and error messages) before it leaves the process.

The events are redacted in the listener (Redactor.java: allow-listed properties only; credentials in URLs and
``spark.sql.redaction.string.regex`` matches masked in free text). The relay only ever prints librdkafka's
messages and its own, which may quote a broker URL: the same URL rule applies here.
"""

from __future__ import annotations

import re

URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/\s@:]*:[^/\s@]*@")
"""``scheme://user:password@`` — the user-info part never leaves."""
SECRET_ASSIGNMENT = re.compile(r"(?i)((?:secret|password|token|access[.]?key)[\w.\-]*\s*[=:]\s*)(\"[^\"]*\"|\S+)")
"""``password=…``, ``sasl.password: …``, ``token="…"``: the value is masked."""
MASK = "***"


def scrub_text(text: str, max_chars: int = 500) -> str:
    """Mask URL credentials and ``<secret-ish name>=<value>`` assignments; truncate to ``max_chars``."""
    out = URL_CREDENTIALS.sub(lambda m: m.group(1) + MASK + "@", text)
    out = SECRET_ASSIGNMENT.sub(lambda m: m.group(1) + MASK, out)
    if len(out) > max_chars:
        out = out[:max_chars] + "…"
    return out

"""Field annotations shared by the event models: they carry the ClickHouse column type with the field."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field


@dataclass(frozen=True)
class Column:
    """ClickHouse column hints for a field: its base type and whether it is a low-cardinality string."""

    type: str
    low_cardinality: bool = False


# Counters, sizes and durations reported by Spark are never negative.
Count = Annotated[int, Field(ge=0), Column("UInt64")]
Bytes = Annotated[int, Field(ge=0), Column("UInt64")]
Millis = Annotated[int, Field(ge=0), Column("UInt64")]
Nanos = Annotated[int, Field(ge=0), Column("UInt64")]
# Epoch milliseconds (UTC).
EpochMillis = Annotated[int, Field(ge=0), Column("Int64")]
# Spark ids (job, stage, task, SQL execution, attempt numbers).
Id = Annotated[int, Field(ge=0), Column("Int64")]
# Every value a Spark or Connect user controls takes one of two paths, in the listener (Redactor.java) and again in
# the collector (collector/scrub.py), with the same caps (tests/unit/test_listener_redaction.py compares them):
# - a *name* (the ``Label`` fields: a Connect user id, user name, session and operation ids, the application name,
#   hosts, statuses): every control character removed, the shared redaction patterns masked, at most
#   NAME_MAX_CHARS characters;
# - *free text* (every other plain ``str`` field, list element and dict value: descriptions, SQL and plan text, stage
#   names, tags, failure messages): control characters but tab and newline removed, masked, at most TEXT_MAX_CHARS.
# An over-long value keeps its start and ends with TRUNCATION_MARKER, counting the characters left out; the marker is
# inside the cap, so cutting a cut value again changes nothing, and the event is always kept.
NAME_MAX_CHARS = 256
TEXT_MAX_CHARS = 2000
TRUNCATION_MARKER = "…[truncated {} chars]"


@dataclass(frozen=True)
class UserText:
    """A string a user controls: which path it takes (``name`` or ``text``) and its cap (``schemas/fields.py`` reads
    it into ``FieldSpec.text``; an unmarked plain ``str`` field is free text)."""

    kind: Literal["name", "text"]
    max_chars: int


NAME = UserText("name", NAME_MAX_CHARS)
TEXT = UserText("text", TEXT_MAX_CHARS)

# Short, repetitive strings (cluster, executor id, host, status, locality …): names.
Label = Annotated[str, Column("String", low_cardinality=True), NAME]

# Identifiers: every value that dashboards, Grafana variables and detection rules interpolate into SQL or URLs
# (cluster, app_id, app_attempt, executor ids, streaming query/run ids). THE one definition, copied verbatim by the
# listener (Java) and documented in docs/architecture.md ("Identifiers"). Real Spark ids all fit:
# app-20261124101500-0001, local-1764000000000, application_1764000000000_0001, spark-<32 hex>, Mesos
# 20261124-101500-16777343-5050-1234-0001, attempts "1", executor ids "driver" / "17", streaming UUIDs. Excluded on
# purpose: backslash, quotes, backtick, `$`, `{}`, `%`, `*`, `;`, whitespace, control characters, anything non-ASCII.
# An empty value is allowed only where the field may be empty (``app_attempt`` when the cluster manager has none).
IDENTIFIER_MAX_LENGTH = 128
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}$"
OPTIONAL_IDENTIFIER_PATTERN = r"^(?:[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127})?$"
"""``IDENTIFIER_PATTERN`` or the empty string (a field documented as possibly empty: ``app_attempt``)."""
IDENTIFIER_RULE = "1 to 128 characters of A-Z a-z 0-9 . _ : @ / + = -, starting with a letter or digit"
"""The pattern in words, for dead-letter reasons and error messages."""


def is_identifier(value: object, optional: bool = False) -> bool:
    """Whether ``value`` is an identifier (the whole string; the empty string too when ``optional``)."""
    if type(value) is not str:
        return False
    if optional and value == "":
        return True
    return _IDENTIFIER_RE.fullmatch(value) is not None


_IDENTIFIER_RE = re.compile(IDENTIFIER_PATTERN)

# An identifier field: checked by pydantic (``pattern``) and by the collector's fast path (``FieldSpec.pattern``).
Ident = Annotated[str, Field(pattern=IDENTIFIER_PATTERN), Column("String", low_cardinality=True)]
# The same, or empty.
OptionalIdent = Annotated[str, Field(pattern=OPTIONAL_IDENTIFIER_PATTERN), Column("String", low_cardinality=True)]

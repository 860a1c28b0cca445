"""Storage errors: permanent (``StorageError``) versus retryable (``StorageUnavailableError``).

Messages follow docs/contributing.md (what, ``key="value"`` context, why, how to fix), keep ClickHouse's error code
and name, and never contain the password: every message passes through ``scrub`` with the target's secrets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sparktap.errors import SparktapError

# Server-side errors that go away by themselves: overload, shutdown, network trouble, timeouts.
RETRYABLE_CODES: frozenset[int] = frozenset(
    {
        3,  # UNEXPECTED_END_OF_FILE
        159,  # TIMEOUT_EXCEEDED
        164,  # READONLY (server starting up / replica read-only)
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        236,  # ABORTED
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        252,  # TOO_MANY_PARTS
        279,  # ALL_CONNECTION_TRIES_FAILED
        319,  # UNKNOWN_STATUS_OF_INSERT
        394,  # QUERY_WAS_CANCELLED
        425,  # SYSTEM_ERROR
        999,  # KEEPER_EXCEPTION
    }
)
AUTH_CODES: frozenset[int] = frozenset({192, 193, 194, 516})  # UNKNOWN_USER, WRONG_PASSWORD, REQUIRED_PASSWORD, AUTH…

_CODE_RE = re.compile(r"Code:\s*(\d+)")
_NAME_RE = re.compile(r"\(([A-Z][A-Z0-9_]+)\)\s*(?:\(version [^)]*\))?\s*$")
_PREFIX_RE = re.compile(r"^(?:Code:\s*\d+\.?\s*)?(?:DB::Exception:\s*)?")


class StorageError(SparktapError):
    """A ClickHouse operation failed and repeating it will not help (bad SQL, schema mismatch, auth, bad data).

    ``code`` and ``name`` are ClickHouse's (``60``, ``"UNKNOWN_TABLE"``) when the server reported one.
    """

    def __init__(self, message: str, *, code: int | None = None, name: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.name = name

    @property
    def retryable(self) -> bool:
        return False


class StorageUnavailableError(StorageError):
    """ClickHouse cannot be reached or is overloaded right now; the same operation may succeed later.

    An insert that failed this way may or may not have been stored: retrying it is safe, because every table
    deduplicates on (app_id, app_attempt, seq).
    """

    @property
    def retryable(self) -> bool:
        return True


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def parse_server_message(text: str, code: int | None = None) -> tuple[int | None, str | None, str]:
    """(code, NAME, first line of the message) from a ClickHouse exception text; stack traces are dropped."""
    if code is None:
        match = _CODE_RE.search(text)
        code = int(match.group(1)) if match else None
    body = text.strip()
    start = body.find("DB::Exception:")
    body = body[start + len("DB::Exception:") :] if start >= 0 else _PREFIX_RE.sub("", body, count=1)
    body = body.strip()
    for marker in (" Stack trace:", "\nStack trace:", "\n"):
        cut = body.find(marker)
        if cut >= 0:
            body = body[:cut]
    body = body.strip().rstrip(".")
    name_match = _NAME_RE.search(body)
    name = name_match.group(1) if name_match else _code_name(code)
    if name_match:
        body = body[: name_match.start()].strip().rstrip(".")
    return code, name, body


def _code_name(code: int | None) -> str | None:
    if code is None:
        return None
    try:
        from clickhouse_driver.errors import ErrorCodes
    except ImportError:  # pragma: no cover - clickhouse-driver is a dependency
        return None
    for attr, value in vars(ErrorCodes).items():
        if value == code and attr.isupper():
            return attr
    return None


def describe(code: int | None, name: str | None, fallback: str = "error") -> str:
    """``Code 60 UNKNOWN_TABLE`` (whatever parts are known; ``fallback`` when none is)."""
    parts = []
    if code is not None:
        parts.append(f"Code {code}")
    if name:
        parts.append(name)
    return " ".join(parts) or fallback


def snippet(sql: str, limit: int = 160) -> str:
    """The start of a statement on one line, for messages (never the inserted data: it is sent separately)."""
    text = " ".join(sql.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

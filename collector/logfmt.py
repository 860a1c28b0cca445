"""Structured logs: one JSON object per line (default) or ``key=value`` text, on stderr.

    log.info("batch committed", extra=fields(rows=1200, tables=2))
    {"ts":"2026-11-22T14:00:00.123Z","level":"info","logger":"sparktap.collector","msg":"batch committed",
     "rows":1200,"tables":2}

Never pass secrets: storage targets are logged through ``StorageTarget.redacted`` only.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from typing import Any, Literal, TextIO

import orjson

_FIELDS = "sparktap_fields"


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a log call: structured fields next to the message."""
    return {_FIELDS: values}


def _timestamp(record: logging.LogRecord) -> str:
    moment = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname.lower(), record.getMessage()]
        for key, value in getattr(record, _FIELDS, {}).items():
            text = str(value)
            parts.append(f"{key}={orjson.dumps(text).decode() if (' ' in text or not text) else text}")
        if record.exc_info:  # on the same line: one line per event, in either format
            parts.append("exception=" + orjson.dumps(self.formatException(record.exc_info)).decode())
        return " ".join(parts)


LIBRARY_LOGGERS = ("clickhouse_driver",)
"""libraries whose own warnings (with tracebacks: clickhouse-driver's "Failed to connect") go through the same
formatter, one line per event, instead of Python's last-resort handler (a multi-line traceback on stderr)"""


def setup_logging(level: str = "INFO", fmt: Literal["json", "text"] = "json", stream: TextIO | None = None) -> None:
    """Send the ``sparktap`` loggers (and ``LIBRARY_LOGGERS``, at WARNING) to ``stream`` (stderr) in the chosen
    format; idempotent."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name("sparktap-collector")
    for name in ("sparktap", *LIBRARY_LOGGERS):
        logger = logging.getLogger(name)
        for existing in list(logger.handlers):
            if existing.get_name() == "sparktap-collector":
                logger.removeHandler(existing)
        logger.addHandler(handler)
        logger.setLevel(level if name == "sparktap" else max(logging.WARNING, logging.getLevelName(level)))
        logger.propagate = False

"""Log formatting: one JSON object or one text line per record, tracebacks included."""

from __future__ import annotations

import io
import logging
from typing import Any, Literal

import orjson
import pytest

from sparktap.collector.logfmt import JsonFormatter, TextFormatter, fields, setup_logging


def _record(message: str, **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("sparktap.collector", logging.WARNING, __file__, 1, message, None, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_json_logs_are_one_object_per_line_with_fields() -> None:
    line = JsonFormatter().format(_record("cannot reach ClickHouse", **fields(url="clickhouse://u:***@h:9000/db")))
    entry = orjson.loads(line)
    assert entry["level"] == "warning" and entry["msg"] == "cannot reach ClickHouse"
    assert entry["url"] == "clickhouse://u:***@h:9000/db"
    assert entry["ts"].endswith("Z") and "\n" not in line
    text = TextFormatter().format(_record("paused", **fields(partitions=3, why="ClickHouse away")))
    assert text.endswith('warning paused partitions=3 why="ClickHouse away"')


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_library_warnings_with_tracebacks_stay_on_one_line(fmt: Literal["json", "text"]) -> None:
    """clickhouse-driver logs "Failed to connect" with a traceback: through our handler, one line per event."""
    stream = io.StringIO()
    setup_logging("INFO", fmt, stream)
    library = logging.getLogger("clickhouse_driver")
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError:
            logging.getLogger("clickhouse_driver.connection").warning(
                "Failed to connect to %s:%s", "h", 9000, exc_info=True
            )
        logging.getLogger("clickhouse_driver.connection").info("driver chatter below WARNING is dropped")
    finally:
        for logger in (library, logging.getLogger("sparktap")):
            for handler in list(logger.handlers):
                if handler.get_name() == "sparktap-collector":
                    logger.removeHandler(handler)
            logger.propagate = True
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    if fmt == "json":
        entry = orjson.loads(lines[0])
        assert entry["msg"] == "Failed to connect to h:9000" and entry["logger"] == "clickhouse_driver.connection"
        assert "ConnectionRefusedError: [Errno 111] Connection refused" in entry["exception"]
    else:
        assert ' exception="Traceback' in lines[0]


def test_text_formatter_handles_empty_values() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    handler.emit(_record("x", **fields(empty="", n=1)))
    assert stream.getvalue().strip().endswith('x empty="" n=1')

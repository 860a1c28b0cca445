"""``ClientLogLimit``: librdkafka's log lines in the collector, each kind (level, facility) once per period, the next
line of a kind saying how many were held back (the broker-restart flood: tests/integration/
test_collector_kafka_log_rate.py)."""

from __future__ import annotations

import logging
import time

from sparktap.collector.kafka.client import ClientLogLimit


def _record(level: int, facility: str, text: str) -> logging.LogRecord:
    return logging.LogRecord(
        "sparktap.collector.kafka", level, __file__, 1, "%s [%s] %s", (facility, "c#1", text), None
    )


def test_each_kind_once_per_period_then_a_count_of_what_was_held() -> None:
    limit = ClientLogLimit(every=0.3)
    first = _record(logging.ERROR, "FAIL", "Connect to ipv4#127.0.0.1:9092 failed: Connection refused")
    assert limit.filter(first) and first.getMessage().endswith("Connection refused")
    assert [limit.filter(_record(logging.ERROR, "FAIL", f"again {i}")) for i in range(50)] == [False] * 50
    assert limit.filter(_record(logging.WARNING, "FAIL", "another level is another kind"))
    assert limit.filter(_record(logging.ERROR, "SESSTMOUT", "another facility too"))
    deadline = time.monotonic() + 10
    passed = None
    while passed is None and time.monotonic() < deadline:  # the period ends: the next line of the kind goes out
        record = _record(logging.ERROR, "FAIL", "Connect failed once more")
        if limit.filter(record):
            passed = record
    assert passed is not None
    held = limit.suppressed  # the 50, and any the loop sent before the period ended
    assert held >= 50
    assert passed.getMessage() == f"FAIL [c#1] Connect failed once more ({held} more like it in the last 0.3 s)"
    assert limit.held == {}

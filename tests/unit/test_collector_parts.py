"""The collector's parts that need no service: batch accounting, dead-letter records, metrics, health, logs, CLI,
views and settings."""

from __future__ import annotations

import functools
import io
import logging
import time
from typing import Any, Literal

import orjson
import pyarrow as pa
import pytest
from click.testing import CliRunner
from confluent_kafka import Message

from sparktap.collector.arrowpath import as_list
from sparktap.collector.batch import PendingBatch
from sparktap.collector.cli import _overrides, collect
from sparktap.collector.decode import Decoder as _Decoder
from sparktap.collector.dlq import (
    HEADER_ERROR,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_REASON,
    HEADER_TIMESTAMP,
    HEADER_TOPIC,
    HEADER_TRUNCATED,
    DeadLetter,
    one_line,
)
from sparktap.collector.health import HealthState
from sparktap.collector.logfmt import JsonFormatter, TextFormatter, fields, setup_logging
from sparktap.collector.metrics import CollectorMetrics, ListenerHealthTracker
from sparktap.collector.settings import CollectorSettings
from sparktap.collector.views import ensure_plain_copies, listener_drops_sql, seq_gaps_sql, view_statements
from sparktap.collector.writer import Backoff
from sparktap.config import parse_kafka_options
from sparktap.errors import ConfigError
from sparktap.schemas.ddl import schema_for
from sparktap.schemas.examples import EXAMPLE_TIME_MS, example_event
from sparktap.settings import Settings, load_settings

# judge the examples (schemas/examples.py: yesterday, fixed for the day) by a clock 100 s after their event time
Decoder = functools.partial(_Decoder, clock=lambda: EXAMPLE_TIME_MS / 1000 + 100)


def _message(partition: int, offset: int, value: bytes | None, topic: str = "events") -> Message:
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=b"app-1",
        value=value,
        headers=[("trace", b"abc")],
        timestamp=(1, 1_795_000_000_123),
    )


def _event(seq: int) -> bytes:
    return example_event("task_end", seq=seq).model_dump_json().encode()


def _listener_event(seq: int) -> bytes:
    """As the listener writes it: no nulls (the C reader's kind of message)."""
    event = example_event("task_end", seq=seq).model_dump()
    return orjson.dumps({k: v for k, v in event.items() if v is not None})


# ----------------------------------------------------------------------------------------------- batch


def test_batch_tracks_rows_offsets_and_rejects() -> None:
    decoder = Decoder(schema_for((26, 9), "db"))
    batch = PendingBatch()
    assert batch.empty and not batch.due(1, 1.0)
    first = [_message(0, 10, _event(1)), _message(1, 3, b"junk"), _message(0, 11, _event(2))]
    batch.add(first, decoder.decode([m.value() for m in first]))
    second = [_message(1, 4, _event(3)), _message(0, 12, _event(4))]
    batch.add(second, decoder.decode([m.value() for m in second]))
    assert (batch.messages, batch.rows) == (5, 4)
    assert [(m.offset(), kind) for m, kind, _ in batch.rejects] == [(3, "not_json")]
    assert batch.tables["task_end"].columns["seq"] == [1, 2, 3, 4]
    assert [m.offset() for m in batch.tables["task_end"].origins] == [10, 11, 4, 12]
    commit = sorted((tp.partition, tp.offset) for tp in batch.commit_offsets())
    assert commit == [(0, 13), (1, 5)]  # the next offset to read, per partition
    assert sorted((tp.partition, tp.offset) for tp in batch.first_offsets()) == [(0, 10), (1, 3)]
    assert batch.due(batch_rows=4, interval=3600.0)
    assert not batch.due(batch_rows=5, interval=3600.0)
    assert batch.started_at is not None
    assert batch.due(batch_rows=5, interval=1.0, now=batch.started_at + 1.0)
    gone = batch.remove_rows("task_end", {1, 2})
    assert [m.offset() for m in gone] == [11, 4]
    assert batch.tables["task_end"].columns["seq"] == [1, 4]
    assert batch.rows == 2
    assert sorted((tp.partition, tp.offset) for tp in batch.commit_offsets()) == [(0, 13), (1, 5)]


def test_a_batch_of_arrow_chunks_grows_without_copies_and_still_slices_and_drops_rows() -> None:
    decoder = Decoder(schema_for((26, 9), "db"), arrow=True)
    batch = PendingBatch()
    for start in (1, 4, 7):
        chunk = [_message(0, 100 + seq, _listener_event(seq)) for seq in range(start, start + 3)]
        batch.add(chunk, decoder.decode([m.value() for m in chunk]))
    seq = batch.tables["task_end"].columns["seq"]
    assert isinstance(seq, pa.ChunkedArray) and seq.num_chunks == 3  # one chunk per decoded chunk, none copied
    assert as_list(seq) == list(range(1, 10))
    assert as_list(batch.tables["task_end"].slice(2, 5)["seq"]) == [3, 4, 5]
    assert [m.offset() for m in batch.remove_rows("task_end", {0, 4, 8})] == [101, 105, 109]
    assert as_list(batch.tables["task_end"].columns["seq"]) == [2, 3, 4, 6, 7, 8]
    assert [m.offset() for m in batch.tables["task_end"].origins] == [102, 103, 104, 106, 107, 108]
    assert [(tp.partition, tp.offset) for tp in batch.commit_offsets()] == [(0, 110)]
    assert [(tp.partition, tp.offset) for tp in batch.first_offsets()] == [(0, 101)]


# ----------------------------------------------------------------------------------------------- dead letters


def test_dead_letter_keeps_the_message_and_says_where_it_came_from() -> None:
    letter = DeadLetter.of(_message(2, 41, b"{oops"), "not_json", "not JSON: unexpected character\nat line 1")
    assert (letter.key, letter.value) == (b"app-1", b"{oops")
    headers = dict(letter.headers)
    assert headers["trace"] == b"abc"  # the original headers travel along
    assert headers[HEADER_TOPIC] == b"events"
    assert headers[HEADER_PARTITION] == b"2"
    assert headers[HEADER_OFFSET] == b"41"
    assert headers[HEADER_TIMESTAMP] == b"1795000000123"
    assert headers[HEADER_ERROR] == b"not_json"
    assert headers[HEADER_REASON] == b"not JSON: unexpected character at line 1"


def test_dead_letter_truncation_and_reason_length() -> None:
    letter = DeadLetter.of(_message(0, 1, b"x" * 5000), "too_large", "message too large")
    small = letter.shrunk(100)
    assert small.value == b"x" * 100 and small.truncated
    assert dict(small.headers)[HEADER_TRUNCATED] == b"5000"
    assert len(one_line("y" * 5000)) == 1000


def test_a_dead_letter_refused_again_sheds_the_message_headers() -> None:
    """The message's own headers can fill the topic's limit: the last resort keeps only ours and 1 KiB of value,
    so a dead letter never holds the batch forever. A header named like ours but sent by the producer is not ours."""
    msg = _message(0, 7, b"v" * 5000)
    msg.set_headers([("big", b"h" * 900_000), (HEADER_REASON, b"spoofed" * 1000)])
    letter = DeadLetter.of(msg, "not_json", "not JSON: unexpected character")
    last = letter.smaller(100)
    assert last is not None and last.truncated and not last.stripped
    last = last.smaller(100)
    assert last is not None and last.stripped
    headers = dict(last.headers)
    assert last.value == b"v" * 100
    assert headers[HEADER_REASON] == b"not JSON: unexpected character" and "big" not in headers
    assert headers[HEADER_TRUNCATED] == b"5000" and headers["sparktap.headers_dropped"] == b"2"
    assert sum(len(k) + len(v) for k, v in last.headers) < 2_000
    assert last.smaller(100) is None


# ----------------------------------------------------------------------------------------------- metrics


def _sample(metrics: CollectorMetrics, name: str, **labels: str) -> float:
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise KeyError(name)


def test_listener_health_counters_add_only_growth() -> None:
    tracker = ListenerHealthTracker(capacity=2)

    def health(*rows: tuple[str, str, int, int]) -> dict[str, list[Any]]:
        return {
            "cluster": ["c1"] * len(rows),
            "app_id": [r[0] for r in rows],
            "app_attempt": [r[1] for r in rows],
            "events_dropped": [r[2] for r in rows],
            "kafka_events_lost": [r[3] for r in rows],
        }

    assert tracker.deltas(health(("a", "1", 5, 0), ("a", "1", 7, 1))) == [("c1", 5, 0), ("c1", 2, 1)]
    assert tracker.deltas(health(("a", "1", 6, 1))) == []  # an older, redelivered report adds nothing
    assert tracker.deltas(health(("b", "1", 3, 0))) == [("c1", 3, 0)]
    metrics = CollectorMetrics()
    metrics.observe_listener_health(health(("a", "1", 4, 2)))
    assert _sample(metrics, "sparktap_listener_events_dropped_total", cluster="c1") == 4
    assert _sample(metrics, "sparktap_listener_kafka_events_lost_total", cluster="c1") == 2


def test_metrics_exposition_names() -> None:
    metrics = CollectorMetrics()
    metrics.consumed.inc(3)
    metrics.inserted.labels("task_end").inc(2)
    metrics.dead_letters.labels("invalid").inc()
    metrics.observe_latency(list(range(1_795_000_000_000, 1_795_000_000_000 + 1000)), now=1_795_000_001.0)
    text = metrics.text().decode()
    for line in (
        "sparktap_collector_consumed_messages_total 3.0",
        'sparktap_collector_inserted_rows_total{table="task_end"} 2.0',
        'sparktap_collector_dead_letters_total{reason="invalid"} 1.0',
        'sparktap_collector_dead_letters_total{reason="too_large"} 0.0',
        "sparktap_collector_storage_up 0.0",
    ):
        assert line in text.splitlines(), line
    assert "sparktap_collector_batch_seconds_bucket" in text
    assert "sparktap_collector_lag_messages_total_approx" in text
    assert _sample(metrics, "sparktap_collector_event_latency_seconds_count") == 67  # every 15th of 1000 events


# ----------------------------------------------------------------------------------------------- health


def test_healthz_stays_up_during_an_outage_and_fails_when_stalled() -> None:
    health = HealthState(stall_seconds=60)
    health.storage_up = True
    health.assigned = 3
    assert health.snapshot()[0] == 200 and health.snapshot()[1]["status"] == "ok"
    assert health.ready()
    health.storage_up = False
    health.paused = True
    code, body = health.snapshot()
    assert (code, body["status"], body["paused"]) == (200, "degraded", True)
    assert not health.ready()
    health.heartbeat_at -= 61
    assert health.snapshot() == (503, {**health.snapshot()[1], "status": "stalled"})


def test_healthz_says_why_when_messages_wait_for_an_insert() -> None:
    """A frozen server: the insert has not even failed yet (storage_up is still true), but messages wait."""
    health = HealthState(stall_seconds=60, insert_stall_seconds=30, storage_up=True, assigned=1)
    now = time.monotonic()
    health.pending_messages, health.pending_since, health.last_insert_at = 5, now - 2, now - 40
    assert health.snapshot()[1]["status"] == "ok"  # a batch filling up: normal
    health.pending_since = now - 12
    code, body = health.snapshot()
    assert (code, body["status"]) == (200, "degraded")
    assert body["reason"].startswith("no insert into ClickHouse succeeded for 12 s while 5 messages wait")
    health.pending_since = now - 31
    code, body = health.snapshot()
    assert (code, body["status"]) == (503, "insert_stalled")
    assert body["reason"].endswith("(unhealthy after insert_stall_seconds=30)")
    health.last_insert_at = time.monotonic()  # an insert went through: the wait starts again
    assert health.snapshot()[:1] == (200,) and health.snapshot()[1]["status"] == "ok"
    health.pending_messages = 0
    assert health.waiting() == 0.0


# ----------------------------------------------------------------------------------------------- logs


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


# ----------------------------------------------------------------------------------------------- backoff


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(0.5, 4.0)
    waits = [backoff.next() for _ in range(6)]
    for wait, nominal in zip(waits, [0.5, 1.0, 2.0, 4.0, 4.0, 4.0], strict=True):
        assert nominal * 0.8 <= wait <= nominal * 1.2
    backoff.reset()
    assert backoff.next() <= 0.6


# ----------------------------------------------------------------------------------------------- settings & CLI


def test_collector_settings_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = CollectorSettings()
    assert (defaults.batch_rows, defaults.batch_interval_seconds) == (20_000, 1.0)
    monkeypatch.setenv("SPARKTAP_COLLECTOR__BATCH_ROWS", "5000")
    monkeypatch.setenv("SPARKTAP_COLLECTOR__INSTANCE_ID", "collector-0")
    settings = load_settings()
    assert settings.collector.batch_rows == 5000 and settings.collector.instance_id == "collector-0"
    monkeypatch.setenv("SPARKTAP_COLLECTOR__BATCH_ROWS", "0")
    with pytest.raises(ConfigError, match="SPARKTAP_COLLECTOR__BATCH_ROWS"):
        load_settings()


def test_command_line_options_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTAP_KAFKA__GROUP_ID", "from-env")
    overrides = _overrides(
        kafka__topic="t", kafka__group_id=None, collector__batch_rows=10, collector__plain_copy=False
    )
    assert overrides == {"kafka": {"topic": "t"}, "collector": {"batch_rows": 10}}
    settings = Settings(**overrides)  # type: ignore[arg-type]
    assert (settings.kafka.topic, settings.kafka.group_id, settings.collector.batch_rows) == ("t", "from-env", 10)
    assert parse_kafka_options(("session.timeout.ms=6000", "a=b=c")) == {"session.timeout.ms": "6000", "a": "b=c"}
    with pytest.raises(ConfigError, match="-X expects key=value"):
        parse_kafka_options(("nonsense",))


def test_collect_rejects_unknown_engines_and_bad_urls() -> None:
    result = CliRunner().invoke(collect, ["--engine", "flink"])
    assert result.exit_code == 2 and "'flink' is not one of 'consumer', 'spark'" in result.output
    result = CliRunner().invoke(collect, ["--storage-url", "ftp://host/x"])
    assert isinstance(result.exception, ConfigError)
    assert "unsupported storage URL scheme 'ftp'" in str(result.exception)


# ----------------------------------------------------------------------------------------------- views


@pytest.mark.parametrize("version", [(26, 9), (18, 16, 1)], ids=lambda v: ".".join(map(str, v)))
def test_views_cover_every_table(version: tuple[int, ...]) -> None:
    schema = schema_for(version, "sparktap")
    gaps = seq_gaps_sql(schema)
    assert gaps.count("UNION ALL") == len(schema.tables) - 1
    for table in schema.tables:
        assert f"`sparktap`.`{table}`" in gaps
    assert "`sparktap`.`listener_health`" in listener_drops_sql(schema)
    assert sorted(view_statements(schema)) == ["listener_drops", "seq_gaps"]

    class Recorder:
        def __init__(self) -> None:
            self.sql: list[str] = []

        def command(self, sql: str) -> None:
            self.sql.append(sql)

    recorder = Recorder()
    copies = ensure_plain_copies(recorder, schema)  # type: ignore[arg-type]
    assert copies == sorted(f"{t}_plain" for t in schema.tables)
    assert all("ENGINE = MergeTree ORDER BY" in sql and "Replacing" not in sql for sql in recorder.sql)


def test_text_formatter_handles_empty_values() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    handler.emit(_record("x", **fields(empty="", n=1)))
    assert stream.getvalue().strip().endswith('x empty="" n=1')

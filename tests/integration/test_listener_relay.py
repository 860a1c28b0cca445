"""The relay process on its own (`python -m sparktap.listener.relay`) against the real broker: its stdin/stdout
protocol, delivery with the app id as key, spooling while Kafka is away and resending once it is back."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures.kafka import KafkaService
from tests.fixtures.listener import new_topic, read_all
from tests.support.relay import RelayUnderTest, config, event

pytestmark = pytest.mark.integration


@pytest.fixture
def relays() -> Iterator[list[RelayUnderTest]]:
    started: list[RelayUnderTest] = []
    yield started
    for relay in started:
        relay.stop()


def start_ready(relays: list[RelayUnderTest], cfg: dict[str, Any]) -> RelayUnderTest:
    """A relay started (stopped after the test by ``relays``) and past its "ready" status."""
    relay = RelayUnderTest(cfg)
    relays.append(relay)
    relay.wait_for(lambda s: s["status"] == "ready")
    return relay


def test_relay_delivers_keyed_events_and_reports_counts(
    kafka_broker: KafkaService, tmp_path: Path, relays: list[RelayUnderTest]
) -> None:
    topic = new_topic(kafka_broker.bootstrap_servers)
    relay = start_ready(relays, config(kafka_broker.bootstrap_servers, topic, tmp_path))
    relay.send(*(event(i) for i in range(1, 1001)))
    relay.send(b"#flush 10000")
    flushed = relay.wait_for(lambda s: s["status"] == "flushed")
    assert (flushed["received"], flushed["delivered"], flushed["undelivered"], flushed["spooled"]) == (1000, 1000, 0, 0)
    code, last = relay.finish()
    assert code == 0 and last["delivered"] == 1000 and last["lost"] == 0

    records = read_all(kafka_broker.bootstrap_servers, topic, 30.0, until=lambda r: len(r) >= 1000, settle=0.5)
    assert len(records) == 1000
    assert {r.key for r in records} == {b"app-1"}
    assert [orjson.loads(r.value or b"")["seq"] for r in records] == list(range(1, 1001))  # one key: in order
    assert not list(tmp_path.glob("seg-*"))


def test_spooled_while_kafka_is_away_then_resent_by_the_next_relay(
    kafka_broker: KafkaService, tmp_path: Path, relays: list[RelayUnderTest]
) -> None:
    if not kafka_broker.pausable:
        pytest.skip("needs the embedded (pausable) broker")
    topic = new_topic(kafka_broker.bootstrap_servers)
    with kafka_broker.paused():
        first = start_ready(relays, config(kafka_broker.bootstrap_servers, topic, tmp_path, app_id="app-old"))
        first.send(*(event(i) for i in range(1, 301)), b"#flush 500", event(301, "listener_health"))
        flushed = first.wait_for(lambda s: s["status"] == "flushed")
        assert (flushed["undelivered"], flushed["spooled"], flushed["spool_pending"]) == (300, 300, 300)
        code, last = first.finish()
        assert code == 0 and last["spooled"] == 301 and last["lost"] == 0
    assert [p.suffix for p in tmp_path.glob("seg-*")] == [".seg"]

    second = start_ready(relays, config(kafka_broker.bootstrap_servers, topic, tmp_path, app_id="app-new"))
    second.send(event(1))  # a live delivery shows Kafka is back: the spool follows
    resent = second.wait_for(lambda s: s["resent"] == 301, timeout=60.0)
    assert resent["delivered"] == 1 and resent["errors"] == 0
    code, _ = second.finish()
    assert code == 0
    assert not list(tmp_path.glob("seg-*"))

    records = read_all(kafka_broker.bootstrap_servers, topic, 30.0, until=lambda r: len(r) >= 302, settle=0.5)
    by_key: dict[bytes | None, list[int]] = {}
    for r in records:
        by_key.setdefault(r.key, []).append(orjson.loads(r.value or b"")["seq"])
    assert sorted(by_key[b"app-old"]) == list(range(1, 302))  # each spooled event keeps its own key
    assert by_key[b"app-new"] == [1]


def test_relay_with_a_tiny_spool_counts_what_does_not_fit(
    kafka_broker: KafkaService, tmp_path: Path, relays: list[RelayUnderTest]
) -> None:
    if not kafka_broker.pausable:
        pytest.skip("needs the embedded (pausable) broker")
    topic = new_topic(kafka_broker.bootstrap_servers)
    with kafka_broker.paused():
        relay = start_ready(relays, config(kafka_broker.bootstrap_servers, topic, tmp_path, spool_max_bytes=2000))
        relay.send(*(event(i) for i in range(1, 101)), b"#flush 300")
        flushed = relay.wait_for(lambda s: s["status"] == "flushed")
        code, last = relay.finish()
    assert code == 0
    assert flushed["spooled"] + flushed["lost"] == 100
    assert 0 < flushed["spooled"] < 100
    assert sum(p.stat().st_size for p in tmp_path.glob("seg-*")) <= 2000
    assert last["lost"] == flushed["lost"]


def test_invalid_kafka_setting_is_one_error_line_without_the_value(
    tmp_path: Path, relays: list[RelayUnderTest]
) -> None:
    cfg = config("127.0.0.1:9", "t", tmp_path)
    cfg["kafka"]["socket.timeout.ms"] = "SECRET-LOOKING-VALUE"
    relay = RelayUnderTest(cfg)
    relays.append(relay)
    status = relay.wait_for(lambda s: s["status"] == "error")
    assert relay.proc.wait(timeout=30) == 2
    assert status["message"].endswith('Invalid value for configuration property "socket.timeout.ms"')
    assert "SECRET-LOOKING-VALUE" not in status["message"]
    assert relay.proc.stderr is not None
    assert b"SECRET-LOOKING-VALUE" not in relay.proc.stderr.read()


def test_an_outage_is_two_log_lines_with_counts_and_loses_nothing(
    kafka_broker: KafkaService, tmp_path: Path, relays: list[RelayUnderTest]
) -> None:
    """Kafka stopped for ~15 s while events keep coming: the relay says so once, and once more when Kafka is back
    (librdkafka alone logged 66-87 lines in 15 s); every event arrives."""
    broker = kafka_broker.require_pausable()
    topic = new_topic(kafka_broker.bootstrap_servers)
    relay = start_ready(relays, config(kafka_broker.bootstrap_servers, topic, tmp_path, status_interval_ms=50))
    relay.send(event(1))
    relay.wait_for(lambda s: s["delivered"] == 1)
    broker.stop_keeping_data()
    try:
        relay.send(event(2))
        relay.wait_log(lambda line: "Kafka unreachable" in line, timeout=60.0)
        # keep events coming for 300 of the relay's 50 ms status lines (~15 s)
        seq = 2
        for _ in range(300):
            seq += 1
            relay.send(event(seq))
            relay.wait_for(lambda s: s["status"] == "stats", timeout=5.0)
        during = seq - 1  # events 2..seq were sent while Kafka was down
    finally:
        broker.start()
    relay.wait_for(lambda s: s["delivered"] == seq, timeout=120.0)
    relay.wait_log(lambda line: "Kafka reachable again" in line, timeout=10.0)
    code, last = relay.finish()
    assert code == 0 and (last["delivered"], last["lost"], last["spooled"]) == (seq, 0, 0)
    lines = [line for line in relay.log if line.strip()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("sparktap relay: Kafka unreachable (")
    assert lines[0].endswith(f'spool dir="{tmp_path}"; one line follows when Kafka is back')
    match = re.fullmatch(
        r"sparktap relay: Kafka reachable again after (\d+\.\d)s: (\d+) events received meanwhile, 0 spooled "
        r"\(resent from the spool now\), 0 lost, (\d+) delivery errors, (\d+) client log lines suppressed",
        lines[1],
    )
    assert match, lines[1]
    assert float(match.group(1)) >= 10.0
    assert int(match.group(2)) in (during - 1, during)  # event 2 may have been received before the line
    assert int(match.group(4)) > 0  # librdkafka did complain; none of it reached the log
    records = read_all(kafka_broker.bootstrap_servers, topic, 30.0, until=lambda r: len(r) >= seq, settle=0.5)
    assert sorted(orjson.loads(r.value or b"")["seq"] for r in records) == list(range(1, seq + 1))

"""The relay's handler of librdkafka's log lines (listener/relay.py ``_ClientLog``), fed by a real confluent-kafka
producer: a configuration warning reaches the driver log once, as one line; connection noise is only counted."""

from __future__ import annotations

import logging
import time

import confluent_kafka
import pytest

from sparktap.listener.relay import Outage, _ClientLog


def test_a_configuration_warning_is_one_line_and_connection_noise_is_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outage = Outage.__new__(Outage)  # only its client-log side: no relay behind it
    outage.client_lines = 0
    logger = logging.getLogger("test.relay.client_log")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(_ClientLog(outage))
    # a consumer-only property on a producer: librdkafka's CONFWARN; port 1 refuses: connection errors
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": "127.0.0.1:1", "auto.offset.reset": "earliest", "logger": logger}
    )
    deadline = time.monotonic() + 30
    try:
        while outage.client_lines == 0 and time.monotonic() < deadline:
            producer.poll(0.2)
    finally:
        logger.handlers.clear()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "sparktap relay: Kafka client: [thrd:app]: Configuration property auto.offset.reset is a consumer property "
        "and will be ignored by this producer instance"
    ]
    assert outage.client_lines >= 1  # the refused connection's lines, counted for the outage's closing line

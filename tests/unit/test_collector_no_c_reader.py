"""Without the compiled C reader the collector still imports and decodes (server mode, a pure-Python install):
the Python path takes every message, and one log line says so."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from types import ModuleType

import orjson
import pytest

from sparktap.schemas.ddl import schema_for
from sparktap.schemas.examples import example_event

FRESH = ("sparktap.collector.arrowpath", "sparktap.collector.decode")


@pytest.fixture
def decode_without_c_reader() -> Iterator[ModuleType]:
    """``sparktap.collector.decode`` imported afresh while ``_flatjson`` cannot be imported; restored after."""
    saved = {name: sys.modules.pop(name) for name in (*FRESH, "sparktap.collector._flatjson") if name in sys.modules}
    sys.modules["sparktap.collector._flatjson"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        yield importlib.import_module("sparktap.collector.decode")
    finally:
        for name in (*FRESH, "sparktap.collector._flatjson"):
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def test_decoding_takes_the_python_path_with_one_log_line(
    decode_without_c_reader: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    module = decode_without_c_reader
    assert sys.modules["sparktap.collector.arrowpath"].C_READER is False
    messages = [orjson.dumps(example_event("task_end", seq=s).model_dump(mode="json")) for s in (1, 2)]
    with caplog.at_level(logging.WARNING, logger="sparktap.collector.decode"):
        for arrow in (False, True, True):
            decoded = module.Decoder(schema_for((26, 9), "db"), arrow=arrow).decode(messages)
            assert decoded.rows == 2 and decoded.rejects == []
            assert not module.is_arrow(decoded.tables["task_end"].columns["seq"])
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "the collector's C reader (sparktap.collector._flatjson) is not built"
    ]


def test_the_consumer_falls_back_to_confluent_kafkas_with_one_log_line(
    decode_without_c_reader: ModuleType, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the C extension the collector's own consumer cannot run: ``auto`` takes confluent-kafka's with one
    warning saying why, and ``librdkafka`` stops the start with one line naming the setting."""
    from confluent_kafka import Consumer

    from sparktap.collector import kafka, librdkafka
    from sparktap.collector.logfmt import _FIELDS
    from sparktap.errors import ConfigError

    monkeypatch.setattr(librdkafka, "_loaded", None)  # loaded afresh while _flatjson cannot be imported
    assert librdkafka.load() == (None, "the collector's C extension (sparktap.collector._flatjson) is not built")
    conf = {"bootstrap.servers": "127.0.0.1:1", "group.id": "fallback"}
    with caplog.at_level(logging.WARNING, logger="sparktap.collector"):
        consumer = kafka.group_consumer(dict(conf), "auto")
    try:
        assert type(consumer) is Consumer
    finally:
        consumer.close()
    assert [(r.getMessage(), getattr(r, _FIELDS)["why"]) for r in caplog.records] == [
        (
            "consuming with confluent-kafka's consumer (a Python object per message)",
            "the collector's C extension (sparktap.collector._flatjson) is not built",
        )
    ]
    with pytest.raises(ConfigError, match="SPARKTAP_COLLECTOR__KAFKA_CLIENT=librdkafka cannot run here: the"):
        kafka.group_consumer(dict(conf), "librdkafka")

"""Without the native code (not compiled: a pure-Python install; or switched off: ``SPARKTAP_NATIVE=off``) the
collector still imports and decodes: the Python path takes every message, and one log line says why."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator
from types import ModuleType

import orjson
import pytest

from sparktap import native
from sparktap.schemas.examples import example_event
from sparktap.schemas.schema import schema_for

FRESH = ("sparktap.collector.arrowpath", "sparktap.collector.decode")


CAUSES = {
    "not built": "the C extension (sparktap.native._flatjson) is not built",
    "switched off": "SPARKTAP_NATIVE=off",
}


@pytest.fixture(params=sorted(CAUSES))
def decode_without_c_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``sparktap.collector.decode`` imported afresh while ``_flatjson`` cannot be imported, or with the switch off;
    restored after. ``why`` is the reason the fallback must give."""
    monkeypatch.delenv(native.ENV, raising=False)
    saved = {name: sys.modules.pop(name) for name in (*FRESH, "sparktap.native._flatjson") if name in sys.modules}
    if request.param == "not built":
        sys.modules["sparktap.native._flatjson"] = None  # type: ignore[assignment]  # import raises ImportError
    else:
        monkeypatch.setenv(native.ENV, "off")
    request.node.why = CAUSES[request.param]
    try:
        yield importlib.import_module("sparktap.collector.decode")
    finally:
        for name in (*FRESH, "sparktap.native._flatjson"):
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def test_decoding_takes_the_python_path_with_one_log_line(
    decode_without_c_reader: ModuleType, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    module = decode_without_c_reader
    assert sys.modules["sparktap.collector.arrowpath"].C_READER is False
    messages = [orjson.dumps(example_event("task_end", seq=s).model_dump(mode="json")) for s in (1, 2)]
    with caplog.at_level(logging.WARNING, logger="sparktap.collector.decode"):
        for arrow in (False, True, True):
            decoded = module.Decoder(schema_for((26, 9), "db"), arrow=arrow).decode(messages)
            assert decoded.rows == 2 and decoded.rejects == []
            assert not module.is_arrow(decoded.tables["task_end"].columns["seq"])
    assert [r.getMessage() for r in caplog.records] == [
        f"the collector's C reader is not used ({request.node.why}): task_end is decoded on the Python path"
    ]


def test_the_consumer_falls_back_to_confluent_kafkas_with_one_log_line(
    decode_without_c_reader: ModuleType,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """Without the C extension the collector's own consumer cannot run: ``auto`` takes confluent-kafka's with one
    warning saying why, and ``librdkafka`` stops the start with one line naming the setting."""
    from confluent_kafka import Consumer

    from sparktap.collector.kafka import client as kafka
    from sparktap.collector.kafka import rdkafka
    from sparktap.collector.logfmt import _FIELDS
    from sparktap.errors import ConfigError

    monkeypatch.setattr(rdkafka, "_loaded", None)  # loaded afresh while _flatjson cannot be imported
    assert rdkafka.load() == (None, request.node.why)
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
            request.node.why,
        )
    ]
    fix = (
        "unset SPARKTAP_NATIVE"
        if native.mode() == "off"
        else "reinstall sparktap with a C compiler and the Python headers"
    )
    with pytest.raises(ConfigError) as refused:
        kafka.group_consumer(dict(conf), "librdkafka")
    assert str(refused.value) == (
        f"SPARKTAP_COLLECTOR__KAFKA_CLIENT=librdkafka cannot run here: {request.node.why}; {fix}, or set it to auto "
        "or confluent-kafka"
    )


def test_the_switch_takes_auto_or_off_and_names_itself_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparktap.errors import ConfigError

    monkeypatch.setenv(native.ENV, "Off")
    assert (native.mode(), native.unavailable(), native.extension()) == ("off", "SPARKTAP_NATIVE=off", None)
    monkeypatch.setenv(native.ENV, "fast")
    with pytest.raises(ConfigError, match=r'^invalid setting SPARKTAP_NATIVE="fast": use auto \(the default\) or off$'):
        native.mode()

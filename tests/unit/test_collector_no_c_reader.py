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

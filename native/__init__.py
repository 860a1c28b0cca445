"""sparktap's native code, behind one switch.

One C extension, ``_flatjson``, compiled at install from this folder: the collector's JSON reader (flat events into
column buffers), the message chunks of its own Kafka consumer (``_kafkachunk.c``: messages kept where librdkafka put
them), and the Native-format string encoder of the server insert path. Every caller asks ``extension()`` here and,
when it answers None, takes its pure-Python path, which is the reference the native one is tested against.

The switch is ``SPARKTAP_NATIVE``: ``auto`` (the default: the extension when it was built) or ``off`` (never: every
part takes its Python path, the collector's consumer is confluent-kafka's, a server insert goes through
clickhouse-driver's own encoding). CI runs the native-dependent tests both ways. A part reads the switch when it is
first imported, so set it in the environment of the process, before it starts.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from sparktap.errors import ConfigError

ENV = "SPARKTAP_NATIVE"
MODES = ("auto", "off")


def mode() -> str:
    """The switch as the environment sets it (``auto`` when unset); anything else is a ConfigError naming it."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ConfigError(f'invalid setting {ENV}="{value}": use auto (the default) or off')
    return value


def extension() -> ModuleType | None:
    """The compiled extension, or None when the switch is off or it was not built (``unavailable`` says which)."""
    return None if unavailable() else importlib.import_module("sparktap.native._flatjson")


def unavailable() -> str | None:
    """Why the native paths are not taken, as a phrase for a log line; None when they are."""
    if mode() == "off":
        return f"{ENV}=off"
    try:
        importlib.import_module("sparktap.native._flatjson")
    except ImportError:
        return "the C extension (sparktap.native._flatjson) is not built"
    return None

"""librdkafka's C API through ctypes: the shared library the confluent-kafka wheel ships, the functions and structs
the collector's own consumer uses (``librdkafka.py``), and the releases they were checked against (``TESTED``).

``load()`` is (None, why) when the library cannot be found, is a release outside ``TESTED``, lacks a function used
here, or the native switch is off (``sparktap.native``): the collector then takes confluent-kafka's consumer and says
so in one log line (``SPARKTAP_COLLECTOR__KAFKA_CLIENT``).
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_size_t, c_ssize_t, c_void_p
from pathlib import Path
from typing import Any

from sparktap import native

CONSUMER_TYPE = 1  # RD_KAFKA_CONSUMER
PARTITION_UA = -1
ASSIGN = -175  # RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS
REVOKE = -174  # RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS
FATAL = -150  # RD_KAFKA_RESP_ERR__FATAL
NO_CONSUMER_CLOSE = 0x8  # RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE


class MessageT(Structure):
    """rdkafka.h's public ``rd_kafka_message_t``"""

    _fields_ = [
        ("err", c_int),
        ("rkt", c_void_p),
        ("partition", c_int32),
        ("payload", c_void_p),
        ("len", c_size_t),
        ("key", c_void_p),
        ("key_len", c_size_t),
        ("offset", c_int64),
        ("_private", c_void_p),
    ]


class PartitionT(Structure):
    """rdkafka.h's public ``rd_kafka_topic_partition_t``"""

    _fields_ = [
        ("topic", c_char_p),
        ("partition", c_int32),
        ("offset", c_int64),
        ("metadata", c_void_p),
        ("metadata_size", c_size_t),
        ("opaque", c_void_p),
        ("err", c_int),
        ("_private", c_void_p),
    ]


class PartitionListT(Structure):
    """rdkafka.h's public ``rd_kafka_topic_partition_list_t``"""

    _fields_ = [("cnt", c_int), ("size", c_int), ("elems", POINTER(PartitionT))]


ListPtr = POINTER(PartitionListT)
REBALANCE_CB = CFUNCTYPE(None, c_void_p, c_int, ListPtr, c_void_p)
ERROR_CB = CFUNCTYPE(None, c_void_p, c_int, c_char_p, c_void_p)
LOG_CB = CFUNCTYPE(None, c_void_p, c_int, c_char_p, c_char_p)

_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "rd_kafka_version": (c_int, []),
    "rd_kafka_err2str": (c_char_p, [c_int]),
    "rd_kafka_last_error": (c_int, []),
    "rd_kafka_conf_new": (c_void_p, []),
    "rd_kafka_conf_set": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]),
    "rd_kafka_conf_destroy": (None, [c_void_p]),
    "rd_kafka_conf_set_rebalance_cb": (None, [c_void_p, REBALANCE_CB]),
    "rd_kafka_conf_set_error_cb": (None, [c_void_p, ERROR_CB]),
    "rd_kafka_conf_set_log_cb": (None, [c_void_p, LOG_CB]),
    "rd_kafka_new": (c_void_p, [c_int, c_void_p, c_char_p, c_size_t]),
    "rd_kafka_destroy": (None, [c_void_p]),
    "rd_kafka_destroy_flags": (None, [c_void_p, c_int]),
    "rd_kafka_name": (c_char_p, [c_void_p]),
    "rd_kafka_poll_set_consumer": (c_int, [c_void_p]),
    "rd_kafka_queue_get_consumer": (c_void_p, [c_void_p]),
    "rd_kafka_queue_destroy": (None, [c_void_p]),
    "rd_kafka_set_log_queue": (c_int, [c_void_p, c_void_p]),
    "rd_kafka_yield": (None, [c_void_p]),
    "rd_kafka_fatal_error": (c_int, [c_void_p, c_char_p, c_size_t]),
    "rd_kafka_topic_partition_list_new": (ListPtr, [c_int]),
    "rd_kafka_topic_partition_list_add": (POINTER(PartitionT), [ListPtr, c_char_p, c_int32]),
    "rd_kafka_topic_partition_list_destroy": (None, [ListPtr]),
    "rd_kafka_subscribe": (c_int, [c_void_p, ListPtr]),
    "rd_kafka_assign": (c_int, [c_void_p, ListPtr]),
    "rd_kafka_incremental_assign": (c_void_p, [c_void_p, ListPtr]),
    "rd_kafka_incremental_unassign": (c_void_p, [c_void_p, ListPtr]),
    "rd_kafka_rebalance_protocol": (c_char_p, [c_void_p]),
    "rd_kafka_assignment_lost": (c_int, [c_void_p]),
    "rd_kafka_assignment": (c_int, [c_void_p, POINTER(ListPtr)]),
    "rd_kafka_commit": (c_int, [c_void_p, ListPtr, c_int]),
    "rd_kafka_position": (c_int, [c_void_p, ListPtr]),
    "rd_kafka_seek_partitions": (c_void_p, [c_void_p, ListPtr, c_int]),
    "rd_kafka_pause_partitions": (c_int, [c_void_p, ListPtr]),
    "rd_kafka_resume_partitions": (c_int, [c_void_p, ListPtr]),
    "rd_kafka_query_watermark_offsets": (
        c_int,
        [c_void_p, c_char_p, c_int32, POINTER(c_int64), POINTER(c_int64), c_int],
    ),
    "rd_kafka_get_watermark_offsets": (c_int, [c_void_p, c_char_p, c_int32, POINTER(c_int64), POINTER(c_int64)]),
    "rd_kafka_consumer_close": (c_int, [c_void_p]),
    "rd_kafka_error_code": (c_int, [c_void_p]),
    "rd_kafka_error_string": (c_char_p, [c_void_p]),
    "rd_kafka_error_is_fatal": (c_int, [c_void_p]),
    "rd_kafka_error_destroy": (None, [c_void_p]),
    "rd_kafka_consume_batch_queue": (c_ssize_t, [c_void_p, c_int, c_void_p, c_size_t]),
    "rd_kafka_message_destroy": (None, [c_void_p]),
    "rd_kafka_topic_name": (c_char_p, [c_void_p]),
    "rd_kafka_message_timestamp": (c_int64, [c_void_p, POINTER(c_int)]),
    "rd_kafka_message_headers": (c_int, [c_void_p, POINTER(c_void_p)]),
    "rd_kafka_header_get_all": (
        c_int,
        [c_void_p, c_size_t, POINTER(c_char_p), POINTER(c_void_p), POINTER(c_size_t)],
    ),
}


TESTED = ((2, 4), (2, 16))
"""The librdkafka releases (major, minor: first and last, inclusive) whose ``rd_kafka_message_t`` layout and
functions this binding was checked against (the suite runs on the release the pinned confluent-kafka wheel ships:
constraints.txt). Another release is not loaded: ``auto`` takes confluent-kafka's consumer instead and says why."""


def version_text(number: int) -> str:
    """``rd_kafka_version()``'s 0xMMmmrrpp as ``major.minor.revision``."""
    return f"{number >> 24 & 0xFF}.{number >> 16 & 0xFF}.{number >> 8 & 0xFF}"


def tested(number: int) -> bool:
    release = (number >> 24 & 0xFF, number >> 16 & 0xFF)
    return TESTED[0] <= release <= TESTED[1]


class Library:
    """librdkafka's functions (``_SIGNATURES``) from one shared library, and the C addresses ``consume_chunk``
    takes. A release outside ``TESTED`` is refused (OSError) before any function is used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lib = ctypes.CDLL(str(path))
        self._lib.rd_kafka_version.restype = c_int
        self._lib.rd_kafka_version.argtypes = []
        self.release: str = version_text(self._lib.rd_kafka_version())
        """``major.minor.revision`` (the ``version`` attribute is librdkafka's own function)"""
        if not tested(self._lib.rd_kafka_version()):
            first, last = (".".join(map(str, r)) for r in TESTED)
            raise OSError(f"librdkafka {self.release} is outside the tested releases {first} to {last}")
        for name, (restype, argtypes) in _SIGNATURES.items():
            function = getattr(self._lib, name)  # AttributeError: a librdkafka without it
            function.restype = restype
            function.argtypes = argtypes
            attr = name.removeprefix("rd_kafka_")
            setattr(self, "yield_" if attr == "yield" else attr, function)
        self.consume_address = _address(self._lib.rd_kafka_consume_batch_queue)
        self.destroy_address = _address(self._lib.rd_kafka_message_destroy)
        self.topic_name_address = _address(self._lib.rd_kafka_topic_name)

    def __getattr__(self, name: str) -> Any:  # the functions set in __init__ (for mypy)
        raise AttributeError(name)


def library_path() -> Path | None:
    """The librdkafka the confluent-kafka wheel ships (``confluent_kafka.libs/librdkafka-*.so*``), or None (a
    confluent-kafka built against a system librdkafka, or another platform's wheel layout)."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*")) if libs.is_dir() else []
    return found[0] if found else None


_loaded: tuple[Library | None, str] | None = None
_load_lock = threading.Lock()


def _address(function: Any) -> int:
    """A C function's address, for the C extension to call it (a library that resolves it to NULL is refused)."""
    address = ctypes.cast(function, c_void_p).value
    if not address:
        raise OSError(f"librdkafka resolves {getattr(function, '__name__', function)} to NULL")
    return address


def load() -> tuple[Library | None, str]:
    """(the library, "") or (None, why not), once per process."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            _loaded = _load()
        return _loaded


def _load() -> tuple[Library | None, str]:
    why = native.unavailable()  # the C side must be there too
    if why is not None:
        return None, why
    path = library_path()
    if path is None:
        return None, "no librdkafka*.so* in the confluent-kafka wheel's confluent_kafka.libs folder"
    try:
        return Library(path), ""
    except (OSError, AttributeError) as exc:
        return None, f"cannot use {path.name}: {exc}"

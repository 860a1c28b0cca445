"""The collector's own group consumer: librdkafka's C API through ctypes, with the messages kept as librdkafka made
them (``MessageChunk``, native/_kafkachunk.c).

confluent-kafka's ``consume()`` makes a Python ``Message`` per message, with its value copied into a bytes object
of its own: with the reads of those objects and their freeing, most of what the collector spent beyond its reader
(bench/consume_objects.py, docs/benchmarks.md). ``ChunkConsumer`` is the same librdkafka (the one the
confluent-kafka wheel ships, loaded from its ``confluent_kafka.libs`` folder) driven directly: ``consume_queued``
returns a ``MessageChunk`` that the reader parses where the messages lie, and a ``Message`` is made only for one
the collector needs as an object (a dead letter, an error, a rewind).

The rest is confluent-kafka's ``Consumer`` as the collector uses it, with the same semantics: ``subscribe`` with
``on_assign``/``on_revoke``/``on_lost`` (after which the assignment is applied, incrementally under a cooperative
or KIP-848 protocol), synchronous ``commit``, ``seek``, ``pause``/``resume``, ``position``, watermarks, ``close``;
errors raise ``KafkaException`` with a ``KafkaError``; ``error_cb`` and ``logger`` as confluent-kafka takes them;
an exception raised by a rebalance callback is raised by the consume call that served it.

The library, its functions and structs and the tested releases are ``rdkafka.py``'s; ``rdkafka.load()`` says when
this consumer cannot run (the collector then takes confluent-kafka's and says so in one log line).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Sequence
from ctypes import (
    byref,
    c_char_p,
    c_int,
    c_int64,
    c_size_t,
    c_void_p,
    create_string_buffer,
)
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from sparktap.collector.kafka.rdkafka import (
    ASSIGN,
    CONSUMER_TYPE,
    ERROR_CB,
    FATAL,
    LOG_CB,
    NO_CONSUMER_CLOSE,
    PARTITION_UA,
    REBALANCE_CB,
    REVOKE,
    Library,
    ListPtr,
    MessageT,
    load,
)

log = logging.getLogger("sparktap.collector")

_CALLBACKS = frozenset({"error_cb", "logger"})
"""the callables of a confluent-kafka configuration this consumer takes (the collector's are these two)"""


def _text(value: bytes | None) -> str:
    return value.decode("utf-8", "replace") if value else ""


def _conf_value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ValueError(f"librdkafka setting {key!r}: {type(value).__name__} is not a str, int, float or bool")


_SYSLOG_LEVELS = (logging.CRITICAL,) * 3 + (logging.ERROR, logging.WARNING, logging.INFO, logging.INFO, logging.DEBUG)


class ChunkConsumer:
    """A librdkafka group consumer with confluent-kafka's ``Consumer`` methods the collector calls, whose
    ``consume_queued`` returns a ``MessageChunk`` (see the module's docstring)."""

    def __init__(self, conf: dict[str, Any], library: Library | None = None) -> None:
        lib = library or load()[0]
        if lib is None:
            raise RuntimeError(f"librdkafka cannot be used here: {load()[1]}")
        self._lib = lib
        self.library = lib
        """the librdkafka this consumer drives (its ``version``)"""
        self._raised: BaseException | None = None
        self._on_assign: Callable[..., Any] | None = None
        self._on_revoke: Callable[..., Any] | None = None
        self._on_lost: Callable[..., Any] | None = None
        self._error_cb: Callable[[KafkaError], Any] | None = conf.get("error_cb")
        self._logger: logging.Logger | None = conf.get("logger")
        self._lock = threading.RLock()
        # kept referenced as long as librdkafka may call them
        self._callbacks = (REBALANCE_CB(self._rebalance), ERROR_CB(self._error), LOG_CB(self._log))
        self._make = self._message  # a bound method made once: the chunks keep it
        cfg = lib.conf_new()
        errstr = create_string_buffer(512)
        try:
            for key, value in conf.items():
                if key in _CALLBACKS:
                    continue
                if callable(value) or isinstance(value, dict):
                    raise ValueError(
                        f"librdkafka setting {key!r}: sparktap's consumer takes no {type(value).__name__} here "
                        "(set SPARKTAP_COLLECTOR__KAFKA_CLIENT=confluent-kafka for confluent-kafka's)"
                    )
                if lib.conf_set(cfg, key.encode(), _conf_value(key, value).encode(), errstr, len(errstr)) != 0:
                    raise KafkaException(KafkaError(KafkaError._INVALID_ARG, _text(errstr.value)))
            lib.conf_set_rebalance_cb(cfg, self._callbacks[0])
            if self._error_cb is not None:
                lib.conf_set_error_cb(cfg, self._callbacks[1])
            if self._logger is not None:
                lib.conf_set(cfg, b"log.queue", b"true", errstr, len(errstr))
                lib.conf_set_log_cb(cfg, self._callbacks[2])
        except BaseException:
            lib.conf_destroy(cfg)
            raise
        rk = lib.new(CONSUMER_TYPE, cfg, errstr, len(errstr))  # takes the configuration, unless it fails
        if not rk:
            lib.conf_destroy(cfg)
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, _text(errstr.value)))
        self._rk: int | None = rk
        if self._logger is not None:
            lib.set_log_queue(rk, None)  # the main queue, served by consume calls (below)
        lib.poll_set_consumer(rk)  # the main queue's events (errors, logs) come with the messages
        self._queue: int | None = lib.queue_get_consumer(rk)
        self._last: Any = None
        """the chunk ``consume_queued`` returned last: released by the next call, or by ``close``"""

    # -- the messages

    def consume_queued(self, num_messages: int, timeout: float) -> Any:
        """Up to ``num_messages`` messages as a ``MessageChunk``, no more than librdkafka has already fetched when
        the wait (``timeout`` seconds, for the first one) ends: collector/kafka/client.py ``consume_queued``.

        The chunk's messages live until its ``release()``, the next call, or ``close()``, whichever comes first
        (librdkafka cannot leave the group while messages of it are held: its close would wait for them)."""
        from sparktap.native._flatjson import consume_chunk

        self._release_last()
        lib = self._lib
        chunk = consume_chunk(
            lib.consume_address,
            lib.destroy_address,
            lib.topic_name_address,
            self._handle_queue(),
            max(1, num_messages),
            max(0, int(timeout * 1000)),
            self._make,
        )
        raised, self._raised = self._raised, None
        if raised is not None:  # as confluent-kafka: the call that served a failing callback raises its exception
            if chunk is not None:
                chunk.release()
            raise raised
        if chunk is None:
            code = lib.last_error()
            raise KafkaException(KafkaError(code, _text(lib.err2str(code))))
        self._last = chunk
        return chunk

    def _release_last(self) -> None:
        last, self._last = self._last, None
        if last is not None:
            last.release()

    def _message(self, address: int) -> Message:
        """The confluent-kafka ``Message`` of the librdkafka message at ``address`` (a copy: it outlives the
        chunk)."""
        lib = self._lib
        m = MessageT.from_address(address)
        topic = _text(lib.topic_name(m.rkt)) if m.rkt else None
        if m.err:
            reason = ctypes.string_at(m.payload, m.len).decode("utf-8", "replace") if m.payload else ""
            error = KafkaError(m.err, reason or _text(lib.err2str(m.err)))
            return Message(topic=topic, partition=m.partition, offset=m.offset, error=error)
        kind = c_int(0)
        stamp = lib.message_timestamp(address, byref(kind))
        headers: list[tuple[str, str | bytes | None]] | None = None
        found = c_void_p()
        if lib.message_headers(address, byref(found)) == 0 and found.value:
            headers = []
            name, value, size = c_char_p(), c_void_p(), c_size_t()
            index = 0
            while lib.header_get_all(found, index, byref(name), byref(value), byref(size)) == 0:
                data = ctypes.string_at(value.value, size.value) if value.value else None
                headers.append((_text(name.value), data))
                index += 1
        return Message(
            topic=topic,
            partition=m.partition,
            offset=m.offset,
            key=ctypes.string_at(m.key, m.key_len) if m.key else None,
            value=ctypes.string_at(m.payload, m.len) if m.payload else None,
            headers=headers,
            timestamp=(kind.value, stamp),
        )

    # -- the group

    def subscribe(
        self,
        topics: list[str],
        on_assign: Callable[..., Any] | None = None,
        on_revoke: Callable[..., Any] | None = None,
        on_lost: Callable[..., Any] | None = None,
    ) -> None:
        lib = self._lib
        parts = lib.topic_partition_list_new(len(topics))
        try:
            for topic in topics:
                lib.topic_partition_list_add(parts, topic.encode(), PARTITION_UA)
            self._check(lib.subscribe(self._handle(), parts), "Failed to set subscription")
        finally:
            lib.topic_partition_list_destroy(parts)
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost

    def _rebalance(self, rk: int, err: int, parts: Any, _opaque: int) -> None:
        """librdkafka's rebalance callback (served in a consume call): the collector's callback, then the
        assignment applied, as confluent-kafka does when the callback did not apply it itself."""
        lib = self._lib
        try:
            partitions = self._partitions(parts)
            incremental = _text(lib.rebalance_protocol(rk)) == "COOPERATIVE"
            if err == ASSIGN:
                self._call(self._on_assign, partitions)
                if incremental:
                    self._error_of(lib.incremental_assign(rk, parts))
                else:
                    self._check(lib.assign(rk, parts), "Failed to set assignment")
                return
            if err != REVOKE:  # the rebalance failed: no assignment (confluent-kafka does the same)
                if self._logger is not None:
                    self._logger.error("rebalance failed: %s", _text(lib.err2str(err)))
                self._check(lib.assign(rk, None), "Failed to remove assignment")
                return
            lost = bool(lib.assignment_lost(rk))
            self._call(self._on_lost if lost and self._on_lost is not None else self._on_revoke, partitions)
            if incremental:
                self._error_of(lib.incremental_unassign(rk, parts))
            else:
                self._check(lib.assign(rk, None), "Failed to remove assignment")
        except BaseException as exc:  # noqa: BLE001 - raised by the consume call that served this callback
            self._raise_later(exc, rk)

    def _call(self, callback: Callable[..., Any] | None, partitions: list[TopicPartition]) -> None:
        if callback is not None:
            try:
                callback(self, partitions)
            except BaseException as exc:  # noqa: BLE001 - the assignment is applied still, as confluent-kafka does
                self._raise_later(exc, self._rk)

    def _raise_later(self, exc: BaseException, rk: int | None) -> None:
        if self._raised is None:
            self._raised = exc
        if rk:
            self._lib.yield_(rk)  # the consume call returns at once

    def _error(self, rk: int, err: int, reason: bytes | None, _opaque: int) -> None:
        try:
            fatal = err == FATAL
            text = _text(reason)
            if fatal:
                buffer = create_string_buffer(512)
                err = self._lib.fatal_error(rk, buffer, len(buffer)) or err
                text = _text(buffer.value) or text
            if self._error_cb is not None:
                self._error_cb(KafkaError(err, text, fatal=fatal))
        except BaseException as exc:  # noqa: BLE001
            self._raise_later(exc, rk)

    def _log(self, rk: int, level: int, facility: bytes | None, text: bytes | None) -> None:
        logger = self._logger
        if logger is None:
            return
        try:
            name = _text(self._lib.name(rk)) if rk else ""
            logger.log(_SYSLOG_LEVELS[min(max(level, 0), 7)], "%s [%s] %s", _text(facility), name, _text(text))
        except Exception:  # noqa: BLE001, S110 - a log line that cannot be written must not fail the consumer
            pass

    # -- offsets and positions

    def assignment(self) -> list[TopicPartition]:
        lib = self._lib
        parts = ListPtr()
        self._check(lib.assignment(self._handle(), byref(parts)), "Failed to get assignment")
        try:
            return self._partitions(parts)
        finally:
            lib.topic_partition_list_destroy(parts)

    def commit(self, offsets: Sequence[TopicPartition], asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit ``offsets``; synchronous unless ``asynchronous`` (then returns None at once). The synchronous
        commit returns the offsets as committed (a partition's own error is on its ``error``)."""
        with self._list(offsets) as parts:
            self._check(self._lib.commit(self._handle(), parts, 1 if asynchronous else 0), "Commit failed")
            return None if asynchronous else self._partitions(parts)

    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        with self._list(partitions) as parts:
            self._check(self._lib.position(self._handle(), parts), "Failed to get position")
            return self._partitions(parts)

    def seek(self, partition: TopicPartition) -> None:
        """Where the partition's next fetch starts (the messages already fetched past it are dropped)."""
        with self._list([partition]) as parts:
            self._error_of(self._lib.seek_partitions(self._handle(), parts, -1))
            err = parts.contents.elems[0].err if parts.contents.cnt else 0
            self._check(err, "Failed to seek")

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        with self._list(partitions) as parts:
            self._check(self._lib.pause_partitions(self._handle(), parts), "Failed to pause")

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        with self._list(partitions) as parts:
            self._check(self._lib.resume_partitions(self._handle(), parts), "Failed to resume")

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        low, high = c_int64(-1), c_int64(-1)
        topic = partition.topic.encode()
        if cached:
            err = self._lib.get_watermark_offsets(self._handle(), topic, partition.partition, byref(low), byref(high))
        else:
            ms = -1 if timeout is None or timeout < 0 else int(timeout * 1000)
            err = self._lib.query_watermark_offsets(
                self._handle(), topic, partition.partition, byref(low), byref(high), ms
            )
        self._check(err, "Failed to get watermark offsets")
        return low.value, high.value

    def close(self) -> None:
        """Leave the group (the revoke callback runs in here) and free the consumer; a second call does nothing."""
        with self._lock:
            rk = self._rk
            if rk is None:
                return
            lib = self._lib
            self._release_last()
            try:
                lib.consumer_close(rk)  # the callbacks it serves may still commit
            finally:
                self._rk = None
                if self._queue:
                    lib.queue_destroy(self._queue)
                    self._queue = None
                lib.destroy(rk)
            raised, self._raised = self._raised, None
            if raised is not None:
                raise raised

    def __del__(self) -> None:
        """A consumer collected without ``close()``: freed without leaving the group (no callback runs), as
        confluent-kafka's is."""
        rk, self._rk = getattr(self, "_rk", None), None
        if rk:
            self._release_last()
            if self._queue:
                self._lib.queue_destroy(self._queue)
            self._lib.destroy_flags(rk, NO_CONSUMER_CLOSE)

    # -- helpers

    def _handle(self) -> int:
        if self._rk is None:
            raise RuntimeError("Consumer closed")
        return self._rk

    def _handle_queue(self) -> int:
        self._handle()
        assert self._queue is not None  # noqa: S101 - set with the handle
        return self._queue

    def _check(self, err: int, what: str) -> None:
        if err:
            raise KafkaException(KafkaError(err, f"{what}: {_text(self._lib.err2str(err))}"))

    def _error_of(self, error: int | None) -> None:
        """Raise the ``rd_kafka_error_t`` a call returned (and free it); nothing when it returned none."""
        if not error:
            return
        lib = self._lib
        try:
            code, text, fatal = lib.error_code(error), _text(lib.error_string(error)), bool(lib.error_is_fatal(error))
        finally:
            lib.error_destroy(error)
        raise KafkaException(KafkaError(code, text, fatal=fatal))

    @staticmethod
    def _partitions(parts: Any) -> list[TopicPartition]:
        if not parts:
            return []
        found = parts.contents
        return [
            TopicPartition(_text(found.elems[i].topic), found.elems[i].partition, found.elems[i].offset)
            for i in range(found.cnt)
        ]

    def _list(self, partitions: Sequence[TopicPartition]) -> _Partitions:
        return _Partitions(self._lib, partitions)


class _Partitions:
    """A librdkafka partition list made from TopicPartitions for one call (``with``: destroyed after it)."""

    def __init__(self, lib: Library, partitions: Sequence[TopicPartition]) -> None:
        self._lib = lib
        self.parts = lib.topic_partition_list_new(max(1, len(partitions)))
        for tp in partitions:
            lib.topic_partition_list_add(self.parts, tp.topic.encode(), tp.partition).contents.offset = tp.offset

    def __enter__(self) -> Any:
        return self.parts

    def __exit__(self, *_exc: object) -> None:
        self._lib.topic_partition_list_destroy(self.parts)

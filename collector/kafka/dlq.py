"""The dead-letter topic (``<topic>.dlq``): messages the collector cannot store, with where they came from and why.

Each dead letter keeps the original key, value and headers, and adds:

| header | value |
| --- | --- |
| ``sparktap.origin.topic`` | topic the message was read from |
| ``sparktap.origin.partition`` | its partition (decimal text) |
| ``sparktap.origin.offset`` | its offset (decimal text) |
| ``sparktap.origin.timestamp`` | its Kafka timestamp in ms, when it had one |
| ``sparktap.error`` | the kind: ``empty``, ``too_large``, ``not_json``, ``invalid``, ``unsupported_version``, |
| | ``rejected_by_clickhouse`` |
| ``sparktap.reason`` | a one-line reason that never echoes the message's values |

Dead letters are produced with idempotence and ``acks=all``; the batch that contains them is committed only after
every one of them is acknowledged (``settle``), so a crash can duplicate a dead letter but never lose one. A value
the DLQ topic refuses as too large is sent truncated, with ``sparktap.truncated`` = the original size; refused again
(the message's own headers fill the limit), it is sent with only the ``sparktap.*`` headers and a 1 KiB head of the
value, ``sparktap.headers_dropped`` = how many headers were left out. So no message can hold the batch forever.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from sparktap.collector.batch import Origin
from sparktap.collector.decode import RejectKind
from sparktap.collector.logfmt import fields

log = logging.getLogger("sparktap.collector.kafka.dlq")

HEADER_TOPIC = "sparktap.origin.topic"
HEADER_PARTITION = "sparktap.origin.partition"
HEADER_OFFSET = "sparktap.origin.offset"
HEADER_TIMESTAMP = "sparktap.origin.timestamp"
HEADER_ERROR = "sparktap.error"
HEADER_REASON = "sparktap.reason"
HEADER_TRUNCATED = "sparktap.truncated"
HEADER_HEADERS_DROPPED = "sparktap.headers_dropped"
STRIPPED_VALUE_BYTES = 1024
_OWN_HEADERS = frozenset(
    {HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET, HEADER_TIMESTAMP, HEADER_ERROR, HEADER_REASON, HEADER_TRUNCATED}
)
REASON_LIMIT = 1000
_SIZE_ERRORS = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD}


@dataclass
class DeadLetter:
    """One record for the dead-letter topic."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    truncated: bool = False
    stripped: bool = False

    @classmethod
    def of(cls, message: Message, kind: RejectKind, reason: str) -> DeadLetter:
        headers = _headers(message.headers())
        headers += [
            (HEADER_TOPIC, (message.topic() or "").encode()),
            (HEADER_PARTITION, str(message.partition()).encode()),
            (HEADER_OFFSET, str(message.offset()).encode()),
            (HEADER_ERROR, kind.encode()),
            (HEADER_REASON, one_line(reason).encode()),
        ]
        ts_type, ts = message.timestamp()
        if ts_type and ts is not None and ts >= 0:
            headers.append((HEADER_TIMESTAMP, str(ts).encode()))
        return cls(_bytes(message.key()), _bytes(message.value()), headers)

    @classmethod
    def gone(cls, origin: Origin, kind: RejectKind, reason: str) -> DeadLetter:
        """A dead letter for a refused row whose message is no longer in Kafka (retention removed it before it
        could be read back, ``reread.py``): where it was and why, without key or value."""
        headers = [
            (HEADER_TOPIC, origin.topic().encode()),
            (HEADER_PARTITION, str(origin.partition()).encode()),
            (HEADER_OFFSET, str(origin.offset()).encode()),
            (HEADER_ERROR, kind.encode()),
            (HEADER_REASON, one_line(f"{reason} (the message was no longer in Kafka to be read back)").encode()),
        ]
        return cls(None, None, headers)

    def shrunk(self, limit: int) -> DeadLetter:
        """A copy whose value fits ``limit`` bytes, marked with the original size."""
        size = len(self.value or b"")
        return DeadLetter(
            self.key, (self.value or b"")[:limit], [*self.headers, (HEADER_TRUNCATED, str(size).encode())], True
        )

    def smaller(self, limit: int) -> DeadLetter | None:
        """The next smaller form after the topic refused this one as too large: the value truncated to ``limit``,
        then only sparktap's own headers and a 1 KiB head of the value; None when it cannot get smaller."""
        if not self.truncated:
            return self.shrunk(limit)
        if self.stripped:
            return None
        ours: dict[str, bytes] = {}
        for name, value in reversed(self.headers):  # ours come last; a same-named header of the message is not ours
            if name in _OWN_HEADERS and name not in ours:
                ours[name] = value[:4096]
        dropped = len(self.headers) - len(ours)
        return DeadLetter(
            self.key[:STRIPPED_VALUE_BYTES] if self.key else self.key,
            (self.value or b"")[:STRIPPED_VALUE_BYTES],
            [*reversed(ours.items()), (HEADER_HEADERS_DROPPED, str(dropped).encode())],
            True,
            True,
        )


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _headers(original: Any) -> list[tuple[str, bytes]]:
    """The original message's headers as (name, bytes) pairs (librdkafka gives a list; a dict is accepted too)."""
    items = original.items() if isinstance(original, dict) else (original or [])
    return [(str(k), _bytes(v) or b"") for k, v in items]


def one_line(reason: str) -> str:
    text = " ".join(reason.split())
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "…"


class DeadLetterQueue:
    """Produces dead letters and tells whether all of them were acknowledged.

    ``send`` is asynchronous; ``settle`` waits for the acknowledgements, re-sending what failed (Kafka away:
    librdkafka retries until ``message.timeout.ms``, then we send again), until all are in or ``give_up()`` says so.
    """

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        *,
        truncate_to: int = 900_000,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self.topic = topic
        self.truncate_to = truncate_to
        self._on_retry = on_retry
        producer_conf = {
            "log_level": 5,  # no informational lines on stderr (librdkafka's default, 6, prints them at destroy)
            **conf,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "message.timeout.ms": 60_000,
        }
        self._producer = Producer(producer_conf)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._failed: list[tuple[DeadLetter, KafkaError]] = []
        self.delivered = 0

    def send(self, letter: DeadLetter) -> None:
        with self._lock:
            self._in_flight += 1
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    key=letter.key,
                    value=letter.value,
                    headers=list[tuple[str, str | bytes | None]](letter.headers),
                    on_delivery=lambda err, msg: self._delivered(letter, err),
                )
            except BufferError:  # the local queue is full: serve delivery callbacks, then try again
                self._producer.poll(0.5)
                continue
            except KafkaException as exc:
                with self._lock:
                    self._in_flight -= 1
                    self._failed.append((letter, exc.args[0]))
            break
        self._producer.poll(0)

    def _delivered(self, letter: DeadLetter, err: KafkaError | None) -> None:
        with self._lock:
            self._in_flight -= 1
            if err is None:
                self.delivered += 1
            else:
                self._failed.append((letter, err))

    @property
    def pending(self) -> int:
        with self._lock:
            return self._in_flight + len(self._failed)

    def settle(self, give_up: Callable[[], bool], poll: Callable[[float], None], backoff: Callable[[], float]) -> bool:
        """Wait until every dead letter sent so far is acknowledged; False if ``give_up()`` came first.

        ``poll(seconds)`` is called between attempts (the consumer keeps its group membership there) and
        ``backoff()`` gives the next wait after a failed round.
        """
        while True:
            self._producer.flush(0.5)
            with self._lock:
                failed, self._failed = self._failed, []
                in_flight = self._in_flight
            if not failed and in_flight == 0:
                return True
            if failed:
                first = failed[0][1]
                log.warning(
                    "cannot deliver dead letters to Kafka; retrying",
                    extra=fields(topic=self.topic, count=len(failed), error=first.str(), code=first.name()),
                )
                if self._on_retry is not None:
                    self._on_retry()
                wait = backoff()
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline and not give_up():
                    poll(min(0.5, max(0.0, deadline - time.monotonic())))
                for letter, err in failed:
                    if err.code() in _SIZE_ERRORS:
                        letter = letter.smaller(self.truncate_to) or letter
                    self.send(letter)
            if give_up():
                return False
            poll(0.0)

    def close(self, timeout: float = 5.0) -> None:
        try:
            self._producer.flush(timeout)
        except KafkaException as exc:  # a fatal producer error (e.g. an ACL refusal): said once, never a traceback
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            hint = (
                "; the collector's Kafka user needs WRITE on the dead-letter topic (docs/collector.md)"
                if error is not None and "AUTHORIZATION" in error.name()
                else ""
            )
            log.error(
                'dead-letter producer topic="%s" failed: %s%s',
                self.topic,
                error.str() if error is not None else type(exc).__name__,
                hint,
            )

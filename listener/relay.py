"""The relay: ``python -m sparktap.listener.relay``, started by the Java listener in the Spark driver.

It reads NDJSON events on stdin and produces them to Kafka with confluent-kafka (idempotence on, ``acks=all``,
zstd, key = ``app_id``). Protocol (see RelayProcess.java):

- stdin line 1: the configuration, a JSON object (Kafka settings travel here, never on argv or in the env);
- then one event per line; ``#flush <ms>`` asks for delivery within ``ms`` (what is left goes to the spool) and
  is answered with a ``flushed`` status; EOF means the application ended: deliver briefly, spool the rest, exit;
- stdout: JSON status lines (``ready``, ``stats`` every status interval, ``flushed``, ``exit``, or ``error``) with
  cumulative counts: received, delivered, resent, errors, spooled, lost, in_flight, spool_pending.

While Kafka is away, events wait in librdkafka's queue up to ``buffer_max_events``; beyond that, and whatever
times out or is still undelivered at a flush deadline, goes to the bounded spool directory (spool.py), which is
resent oldest first once deliveries succeed again, by this relay, the next one, or ``sparktap relay-drain``.
The configuration line and the producer settings made from it are relay_config.py's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from sparktap.errors import ConfigError
from sparktap.listener.redaction import scrub_text
from sparktap.listener.relay_config import (
    PROTOCOL,
    RESEND_CHUNK,
    RelayConfig,
    kafka_error_text,
    parse_config,
    translate_jaas,
)
from sparktap.listener.spool import Segment, Spool, safe_key

__all__ = [  # the configuration half lives in relay_config.py; these names stay importable from here
    "PROTOCOL",
    "Relay",
    "RelayConfig",
    "kafka_error_text",
    "main",
    "parse_config",
    "run",
    "translate_jaas",
]

EXIT_FLUSH_SECONDS = 10.0
"""Deadline for delivering at EOF when no ``#flush`` came first (the driver went away without saying goodbye)."""
FINAL_FLUSH_SECONDS = 1.0
"""After a ``#flush``, the few events written at the very end (the final listener_health) get this long."""
KAFKA_OK_SECONDS = 10.0
"""Kafka counts as reachable for resending if a delivery succeeded this recently."""
IDLE_TICK_SECONDS = 0.25
"""Longest the main loop sleeps without input: delivery reports and status lines wait at most this long."""
SPOOL_SCAN_SECONDS = 2.0
"""While Kafka takes events, how often to look for spooled segments (of this relay's predecessors) to resend."""
# delivery failures that spooling cannot fix
_PERMANENT = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG, KafkaError.INVALID_RECORD}
# client errors that mean Kafka cannot be reached (an outage starts)
_UNREACHABLE = {
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}


def _is_health(value: bytes) -> bool:
    # The listener writes schema_version, then event_type first: a prefix check, no JSON parsing.
    return value.find(b'"event_type":"listener_health"', 0, 96) >= 0


class Outage:
    """Kafka out of reach: one stderr line (the driver log) when it starts and one with counts when it ends.

    librdkafka's own log lines (dozens a second while brokers are down) never reach the driver log: they go to
    ``client_log``, which keeps only its configuration warnings and counts the rest for the closing line.
    """

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.since: float | None = None
        self.at_start: dict[str, int] = {}
        self.client_lines = 0

    @property
    def active(self) -> bool:
        return self.since is not None

    def begin(self, reason: str) -> None:
        if self.since is not None:
            return
        self.since = time.monotonic()
        self.at_start = self.relay.counts()
        self.client_lines = 0
        cfg = self.relay.config
        _log_line(
            f"Kafka unreachable ({reason}): events wait in memory (up to {cfg.buffer_max_events}), then in the "
            f'spool dir="{cfg.spool_dir}"; one line follows when Kafka is back'
        )

    def end(self) -> None:
        if self.since is None:
            return
        seconds = time.monotonic() - self.since
        now = self.relay.counts()
        delta = {k: now[k] - self.at_start.get(k, 0) for k in ("received", "spooled", "lost", "errors")}
        _log_line(
            f"Kafka reachable again after {seconds:.1f}s: {delta['received']} events received meanwhile, "
            f"{delta['spooled']} spooled (resent from the spool now), {delta['lost']} lost, "
            f"{delta['errors']} delivery errors, {self.client_lines} client log lines suppressed"
        )
        self.since = None

    def client_log(self, fac: str, message: str) -> None:
        if fac == "CONFWARN":  # a setting librdkafka ignores: once, at start, worth seeing
            _log_line(f"Kafka client: {scrub_text(message)}")
        else:
            self.client_lines += 1


class _ClientLog(logging.Handler):
    """Receives librdkafka's log lines (confluent-kafka's ``logger`` setting)."""

    def __init__(self, outage: Outage) -> None:
        super().__init__(logging.DEBUG)
        self.outage = outage

    def emit(self, record: logging.LogRecord) -> None:
        # confluent-kafka logs ("%s [%s] %s", facility, client name, message)
        args = record.args if isinstance(record.args, tuple) else ()
        fac = str(args[0]) if args else ""
        self.outage.client_log(fac, str(args[2]) if len(args) > 2 else record.getMessage())


def _log_line(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"sparktap relay: {text}\n")
        sys.stderr.flush()


class Relay:
    """One relay process's state: the producer, the spool and the counters it reports."""

    def __init__(self, config: RelayConfig, out: BinaryIO) -> None:
        self.config = config
        self.out = out
        self.key = safe_key(config.app_id)
        self.topic = config.topic
        self.received = 0
        self.delivered = 0
        self.resent = 0
        self.errors = 0
        self.spooled = 0
        self.lost = 0
        self.spool_pending = 0
        self.last_success = 0.0
        self.kafka_down = False  # a flush deadline passed with events undelivered: spool directly from now on
        self.resending: Segment | None = None
        self._out_broken = False
        self._next_status = 0.0
        self._next_flush_spool = 0.0
        self._next_spool_scan = 0.0
        self._fatal: KafkaError | None = None
        self.spool = Spool(config.spool_dir, config.spool_max_bytes, config.topic)
        self.outage = Outage(self)
        self._client_logger = logging.getLogger(f"sparktap.relay.librdkafka.{id(self)}")
        self._client_logger.propagate = False
        self._client_logger.setLevel(logging.DEBUG)
        self._client_logger.addHandler(_ClientLog(self.outage))
        self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        conf = self.config.librdkafka()
        conf["on_delivery"] = self._on_delivery
        conf["error_cb"] = self._on_error
        conf["logger"] = self._client_logger
        return Producer(conf)

    # ------------------------------------------------------------------------------------------- status

    def counts(self) -> dict[str, int]:
        return {
            "received": self.received,
            "delivered": self.delivered,
            "resent": self.resent,
            "errors": self.errors,
            "spooled": self.spooled,
            "lost": self.lost,
            "in_flight": len(self.producer),
            "spool_pending": self.spool_pending,
        }

    def status(self, kind: str, **extra: Any) -> None:
        if self._out_broken:
            return
        try:
            self.out.write(_json_line({"status": kind, **self.counts(), **extra}))
            self.out.flush()
        except (BrokenPipeError, OSError, ValueError):
            self._out_broken = True  # the listener is gone; keep delivering anyway

    # ------------------------------------------------------------------------------------------- delivery

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
            self.last_success = time.monotonic()
            if self.outage.active:
                self.outage.end()
            return
        self._failed(err, msg.value() or b"", resent=False)

    def _failed(self, err: KafkaError, value: bytes, *, resent: bool) -> None:
        self.errors += 1
        if err.code() in _UNREACHABLE:
            self.outage.begin(kafka_error_text(KafkaException(err)))
        if err.fatal():
            self._fatal = err
        if err.code() in _PERMANENT:
            self.lost += 1
            if resent:
                self.spool_pending = max(0, self.spool_pending - 1)
            return
        if resent:
            # it was in the spool before: put it back (it already had room)
            if not self.spool.append(self.key, value, force=True):
                self.lost += 1
                self.spool_pending = max(0, self.spool_pending - 1)
        else:
            self._spool_live(value)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = err
        elif err.code() in _UNREACHABLE and err.code() != KafkaError._TRANSPORT:
            # one broker's connection dropping (_TRANSPORT) is routine; all of them down is an outage
            self.outage.begin(kafka_error_text(KafkaException(err)))

    def _spool_live(self, value: bytes) -> None:
        if self.spool.append(self.key, value, priority=_is_health(value)):
            self.spooled += 1
            self.spool_pending += 1
        else:
            self.lost += 1

    def handle_line(self, line: bytes) -> None:
        if not line:
            return
        if line[0] == 0x23:  # '#': control
            self.control(line[1:].decode(errors="replace").split())
            return
        self.received += 1
        if self.kafka_down or len(self.producer) >= self.config.buffer_max_events:
            self._spool_live(line)
            return
        try:
            self.producer.produce(self.topic, line, self.key)
        except BufferError:
            self._spool_live(line)
        except KafkaException as exc:
            self._failed(exc.args[0], line, resent=False)

    def control(self, words: list[str]) -> None:
        if words and words[0] == "flush":
            try:
                seconds = max(0.0, float(words[1]) / 1000.0) if len(words) > 1 else EXIT_FLUSH_SECONDS
            except ValueError:
                seconds = EXIT_FLUSH_SECONDS
            undelivered = self.flush(seconds)
            self.status("flushed", undelivered=undelivered)

    def flush(self, seconds: float) -> int:
        """Deliver within ``seconds``; whatever is left is purged into the spool. Returns how many were left."""
        deadline = time.monotonic() + seconds
        while len(self.producer) > 0 and (remaining := deadline - time.monotonic()) > 0:
            self.producer.flush(min(remaining, 0.1))
        left = len(self.producer)
        if left > 0:
            self.kafka_down = True
            self.outage.begin(f"{left} events not delivered within {seconds:g}s")
            self.producer.purge(in_queue=True, in_flight=True, blocking=False)
            self.producer.poll(0)  # delivery reports of the purged messages: they go to the spool
            self.producer.flush(0.5)
        self._release_resend()
        self.spool.flush()
        return left

    # ------------------------------------------------------------------------------------------- resending

    def kafka_ok(self) -> bool:
        return not self.kafka_down and self.last_success > 0 and time.monotonic() - self.last_success < KAFKA_OK_SECONDS

    def resend_some(self) -> None:
        """Hand the next chunk of the oldest spooled segment to the producer while Kafka is taking events."""
        if not self.kafka_ok() or len(self.producer) >= self.config.buffer_max_events // 2:
            return
        if self.resending is None:
            now = time.monotonic()
            if now < self._next_spool_scan and self.spool.open_records == 0:
                return  # looking at the directory on every tick would cost more than all the events
            self._next_spool_scan = now + SPOOL_SCAN_SECONDS
            if self.spool.open_records > 0:
                self.spool.seal()  # Kafka is back: the segment being written can go too
            self.resending = self.spool.claim_next()
            if self.resending is None:
                return
        segment = self.resending
        end = min(len(segment.records), segment.next_index + RESEND_CHUNK)
        on_delivery = self._resend_callback(segment)
        for key, value in segment.records[segment.next_index : end]:
            try:
                self.producer.produce(segment.topic, value, key, on_delivery=on_delivery)
            except BufferError:
                break
            segment.next_index += 1
            segment.outstanding += 1
        self._maybe_finish_segment()

    def _resend_callback(self, segment: Segment) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            segment.outstanding -= 1
            if err is None:
                self.resent += 1
                self.last_success = time.monotonic()
                self.spool_pending = max(0, self.spool_pending - 1)
                if self.outage.active:
                    self.outage.end()
            else:
                self._failed(err, msg.value() or b"", resent=True)
            if segment is not self.resending and segment.finished:
                self.spool.finish(segment)

        return on_delivery

    def _maybe_finish_segment(self) -> None:
        segment = self.resending
        if segment is not None and segment.fully_produced:
            self.resending = None
            if segment.outstanding == 0:
                self.spool.finish(segment)

    def _release_resend(self) -> None:
        """Give back the unsent part of the segment being resent (at a flush deadline or at exit)."""
        segment = self.resending
        if segment is None:
            return
        self.resending = None
        with contextlib.suppress(OSError):
            self.spool.write_back(segment.topic, segment.records[segment.next_index :])
        segment.next_index = len(segment.records)
        if segment.outstanding == 0:
            self.spool.finish(segment)

    # ------------------------------------------------------------------------------------------- main loop

    def tick(self) -> None:
        now = time.monotonic()
        self.producer.poll(0)
        if self._fatal is not None:
            self._replace_producer()
        if now >= self._next_status:
            self._next_status = now + self.config.status_interval_s
            self.status("stats")
        if now >= self._next_flush_spool:
            self._next_flush_spool = now + 1.0
            self.spool.flush()
        self.resend_some()

    def _replace_producer(self) -> None:
        """An idempotent producer that hit a fatal error is unusable: spool what it held and start a new one."""
        err, self._fatal = self._fatal, None
        text = scrub_text(err.str()) if err is not None else "unknown"
        sys.stderr.write(f"sparktap relay: fatal producer error, restarting the producer: {text}\n")
        self.producer.purge(in_queue=True, in_flight=True, blocking=False)
        self.producer.flush(1.0)
        self._fatal = None
        self.producer = self._new_producer()

    def finish(self, eof_flush_seconds: float) -> None:
        """EOF: deliver what is left within the deadline (or spool it straight away if Kafka was found away)."""
        if self.kafka_down:
            self.producer.purge(in_queue=True, in_flight=True, blocking=False)
            self.producer.poll(0)
            self.producer.flush(0.5)
        else:
            self.flush(eof_flush_seconds)
        self._release_resend()
        self.spool.close()
        self.status("exit")


def run(stdin: BinaryIO, stdout: BinaryIO) -> int:
    """The relay's main loop; returns the exit code."""
    stop = {"signal": False}

    def on_signal(_signum: int, _frame: object) -> None:
        stop["signal"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    fd = stdin.fileno()
    first = _read_line(fd)
    try:
        config = parse_config(first)
        relay = Relay(config, stdout)
    except ConfigError as exc:
        _error(stdout, str(exc))
        return 2
    except KafkaException as exc:
        _error(stdout, f"invalid Kafka setting in spark.sparktap.kafka.*: {kafka_error_text(exc)}")
        return 2
    if not relay.spool.usable and config.spool_max_bytes > 0:
        sys.stderr.write(f"sparktap relay: {relay.spool.problem}; events Kafka cannot take will be lost\n")
    relay.status("ready", pid=os.getpid())
    buffered = b""
    saw_flush = False
    # input wakes the loop at once; otherwise tick often enough for the status interval, and no more (an idle
    # relay's wake-ups are most of its CPU)
    idle_wait = min(IDLE_TICK_SECONDS, config.status_interval_s)
    while not stop["signal"]:
        ready, _, _ = select.select([fd], [], [], idle_wait)
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            lines = (buffered + chunk).split(b"\n")
            buffered = lines.pop()
            for line in lines:
                try:
                    if line[:1] == b"#":
                        saw_flush = True
                    relay.handle_line(line)
                except Exception as exc:  # one bad line must not take the relay down
                    sys.stderr.write(f"sparktap relay: cannot handle a line ({type(exc).__name__})\n")
        relay.tick()
    if buffered:
        relay.handle_line(buffered)
    relay.finish(FINAL_FLUSH_SECONDS if saw_flush else EXIT_FLUSH_SECONDS)
    return 0


def _read_line(fd: int) -> bytes:
    data = bytearray()
    while True:
        chunk = os.read(fd, 1)
        if not chunk or chunk == b"\n":
            return bytes(data)
        data += chunk


def _json_line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _error(stdout: BinaryIO, message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        stdout.write(_json_line({"status": "error", "message": message}))
        stdout.flush()
    sys.stderr.write(f"sparktap relay: {message}\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sparktap.listener.relay", description=__doc__.splitlines()[0])
    parser.add_argument("--app-id", default="", help="for ps only; the real settings arrive on stdin")
    parser.parse_args(argv)
    code = run(sys.stdin.buffer, sys.stdout.buffer)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)  # never wait on librdkafka teardown: everything owed is delivered or spooled by now


if __name__ == "__main__":
    main()

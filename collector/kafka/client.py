"""librdkafka settings of the collector's consumer and dead-letter producer, and its paused partitions."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sparktap import native
from sparktap.collector.health import HealthState
from sparktap.collector.kafka.librdkafka import ChunkConsumer
from sparktap.collector.kafka.rdkafka import load
from sparktap.collector.logfmt import fields
from sparktap.collector.metrics import CollectorMetrics
from sparktap.collector.settings import IngestSettings
from sparktap.errors import ConfigError

log = logging.getLogger("sparktap.collector")
GroupConsumer: TypeAlias = Consumer | ChunkConsumer
"""the collector's group consumer: its own (collector/kafka/librdkafka.py) or confluent-kafka's (``group_consumer``)"""
KAFKA_LOG = logging.getLogger("sparktap.collector.kafka")
"""librdkafka's own log lines go here (as structured log lines, like everything else), each kind at most once per
``KAFKA_LOG_EVERY`` (``ClientLogLimit``)"""
KAFKA_LOG_EVERY = 30.0


class ClientLogLimit(logging.Filter):
    """One line per kind (level and librdkafka facility: ``FAIL``, ``ERROR``, ``CONNECT`` …) per ``every`` seconds:
    while a broker is away each client connection logs and retries many times a second (a restart made 272 lines in
    one). The first line of a kind after the pause says how many were held back."""

    def __init__(self, every: float = KAFKA_LOG_EVERY) -> None:
        super().__init__()
        self.every = every
        self.last: dict[tuple[int, str], float] = {}
        self.held: dict[tuple[int, str], int] = {}
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        kind = (record.levelno, str(args[0]) if args else "")
        now = time.monotonic()
        if now - self.last.get(kind, -1e9) < self.every:
            self.held[kind] = self.held.get(kind, 0) + 1
            self.suppressed += 1
            return False
        self.last[kind] = now
        held = self.held.pop(kind, 0)
        if held:
            record.msg = f"{record.msg} (%d more like it in the last {self.every:g} s)"
            record.args = (*args, held)
        return True


KAFKA_LOG.addFilter(ClientLogLimit())


def consumer_config(
    settings: IngestSettings, error_cb: Callable[[KafkaError], None], protocol: str | None = None
) -> dict[str, Any]:
    """The consumer: defaults < ``SPARKTAP_KAFKA__*`` (incl. ``extra``) < what correctness needs (manual commits).
    ``protocol``: the group protocol ``choose_protocol`` picked (``group.protocol`` in ``extra`` wins)."""
    cfg = settings.collector
    kafka = settings.kafka
    conf: dict[str, Any] = {
        "client.id": "sparktap-collector",
        "auto.offset.reset": "earliest",
        "queued.max.messages.kbytes": cfg.fetch_queue_kbytes,
        "session.timeout.ms": cfg.session_timeout_ms,
        "heartbeat.interval.ms": max(500, min(3000, cfg.session_timeout_ms // 3)),
        **fetch_budget(cfg.batch_bytes, cfg.fetch_queue_kbytes, cfg.max_message_bytes),
    }
    if protocol is not None:
        conf["group.protocol"] = protocol
    conf.update(kafka.librdkafka())
    conf.update(
        {
            "group.id": kafka.group_id,
            "enable.auto.commit": False,  # offsets are committed only after ClickHouse accepted the rows
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "error_cb": error_cb,
            "logger": KAFKA_LOG,
        }
    )
    if cfg.instance_id:
        conf["group.instance.id"] = cfg.instance_id
    if str(conf.get("group.protocol", "classic")).lower() == "consumer":
        # KIP-848: the broker owns session and heartbeat timing; librdkafka refuses a consumer that sets them
        for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
            conf.pop(key, None)
    return conf


PROBE_SECONDS = 5.0
"""longest wait for the KIP-848 probe's assignment (a broker that takes longer gets the classic protocol)"""
_UNSUPPORTED = "ConsumerGroupHeartbeatRequest not supported"
_REFUSED = {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED}


def describe_error(error: KafkaError) -> str:
    return f"{error.name()}: {error.str()}"


def choose_protocol(settings: IngestSettings, topic: str) -> tuple[str | None, str]:
    """(group.protocol to set, why) for the collector's consumer.

    ``auto`` takes KIP-848's protocol (``consumer``) when the broker offers it: the broker assigns partitions in
    one heartbeat, with no JoinGroup/SyncGroup round and no ``group.initial.rebalance.delay.ms`` (3 s on a
    default broker). Whether it does is asked with a throwaway member of a throwaway group on ``topic``
    (librdkafka says only in its debug log that a broker lacks ConsumerGroupHeartbeat; a broker without it, such
    as tansu, would otherwise leave the consumer unassigned without an error). With a static ``instance_id`` auto
    keeps the classic protocol: a static member killed and restarted is back at once in a classic group, while
    KIP-848 holds its instance id until the broker's ``group.consumer.session.timeout.ms`` (45 s by default).
    None: ``group.protocol`` is set in ``SPARKTAP_KAFKA__EXTRA``, which decides."""
    cfg = settings.collector
    extra = settings.kafka.librdkafka()
    if "group.protocol" in extra:
        return None, "group.protocol set in SPARKTAP_KAFKA__EXTRA"
    if cfg.group_protocol != "auto":
        return cfg.group_protocol, f"group_protocol={cfg.group_protocol}"
    if cfg.instance_id:
        return "classic", "static membership (instance_id) keeps the classic protocol"
    supported, why = probe_kip848(extra, f"{settings.kafka.group_id}.kip848-probe", topic)
    return ("consumer" if supported else "classic"), why


class ProtocolChoice:
    """``choose_protocol`` in a thread of its own, started before the storage opens (which takes longer), so the
    probe adds nothing to the time to the first assignment."""

    def __init__(self, settings: IngestSettings, topic: str) -> None:
        import threading

        self._result: tuple[str | None, str] = ("classic", "the probe did not finish")
        self._thread = threading.Thread(target=self._run, args=(settings, topic), name="sparktap-kip848", daemon=True)
        self._thread.start()

    def _run(self, settings: IngestSettings, topic: str) -> None:
        try:
            self._result = choose_protocol(settings, topic)
        except Exception as exc:  # noqa: BLE001 - a probe that cannot run: classic, and the consumer says why
            self._result = ("classic", f"the KIP-848 probe failed: {type(exc).__name__}: {exc}")

    def result(self) -> tuple[str | None, str]:
        self._thread.join(PROBE_SECONDS + 5)
        return self._result


def probe_kip848(conf: dict[str, Any], group: str, topic: str, timeout: float = PROBE_SECONDS) -> tuple[bool, str]:
    """Whether the broker assigns ``topic``'s partitions to a member of ``group`` under KIP-848, and why not."""
    import time
    import uuid

    unsupported: list[str] = []

    class _Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if _UNSUPPORTED in text or "KIP-848" in text:
                unsupported.append(text)

    watch = logging.getLogger(f"sparktap.collector.kafka.client.probe.{uuid.uuid4().hex[:8]}")
    watch.propagate = False
    watch.setLevel(logging.DEBUG)
    watch.addHandler(_Watch())
    assigned: list[int] = []
    errors: list[str] = []
    refused: list[str] = []  # an error that ends the probe at once (ACLs, a fatal error)

    def on_error(err: KafkaError) -> None:
        errors.append(describe_error(err))
        if err.fatal() or err.code() in _REFUSED:
            refused.append(describe_error(err))

    probe = Consumer(
        {
            **conf,
            "group.id": f"{group}-{uuid.uuid4().hex[:8]}",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "debug": "cgrp",
            "logger": watch,
            "error_cb": on_error,
        }
    )
    try:
        probe.subscribe([topic], on_assign=lambda _c, parts: assigned.append(len(parts)))
        deadline = time.monotonic() + timeout
        while not assigned and not unsupported and not refused and time.monotonic() < deadline:
            msg = probe.poll(0.02)
            error = msg.error() if msg is not None else None
            if error is not None and (error.fatal() or error.code() in _REFUSED):
                refused.append(describe_error(error))
    finally:
        probe.close()
    if assigned:
        return True, "the broker offers KIP-848"
    if unsupported:
        return False, "the broker does not offer KIP-848 (no ConsumerGroupHeartbeat)"
    if refused:
        return False, (
            f"the KIP-848 probe's group {group}-* was refused ({refused[0]}): grant the collector's user READ on "
            "groups with that prefix, or set SPARKTAP_COLLECTOR__GROUP_PROTOCOL"
        )
    return False, f"no KIP-848 assignment within {timeout:g}s{': ' + errors[-1] if errors else ''}"


def fetch_budget(batch_bytes: int, fetch_queue_kbytes: int, max_message_bytes: int) -> dict[str, int]:
    """librdkafka's prefetch bounded by the byte budget: its queue holds at most ``batch_bytes`` (or
    ``fetch_queue_kbytes``, the smaller) and one fetch response at most that too, never less than one message of
    ``max_message_bytes`` can need. A partition's share of a response is a quarter of it (4 MiB with the defaults;
    librdkafka's own default is 1 MiB): a backlog on a few partitions then comes in a few large fetches instead
    of a round trip per MiB (50 % more rows/s in ``bench.clickhouse_kafka_engine``, docs/benchmarks.md), within
    the same bound. No budget (0): librdkafka's fetch size and the queue setting alone."""
    if batch_bytes <= 0:
        return {}
    # a record batch's own overhead on top; never below librdkafka's message.max.bytes (it refuses a smaller fetch)
    one_message = max(max_message_bytes, 1 << 20) + 1024
    queue = max(min(batch_bytes, fetch_queue_kbytes << 10), one_message)
    return {
        "queued.max.messages.kbytes": -(-queue // 1024),
        "fetch.max.bytes": queue,
        "max.partition.fetch.bytes": min(queue, max(queue // 4, one_message)),
    }


def consume_queued(consumer: GroupConsumer, num_messages: int, timeout: float) -> Sequence[Message]:
    """Up to ``num_messages`` messages, no more than librdkafka has already fetched when the wait ends.

    One ``consume(n, timeout)`` takes each message off librdkafka's queue as it arrives, so the queue never looks
    full and the fetcher keeps fetching for as long as the call waits: on a backlog of 0.9 MB messages one call
    returned 148 of them past the byte budget (133 MB, the memory test's peak 313-399 MiB against its 304.5 MiB
    bound in a third of the runs). Here the wait is for one message; the rest is what is queued then, bounded by
    ``queued.max.messages.kbytes`` (``fetch_budget``). The collector's own consumer does the same in C and returns
    a ``MessageChunk`` (collector/kafka/librdkafka.py), valid until its ``release()`` or the next call."""
    if isinstance(consumer, ChunkConsumer):
        return cast(Sequence[Message], consumer.consume_queued(num_messages, timeout))
    queued = consumer.consume(num_messages=num_messages, timeout=0)
    if queued or timeout <= 0:
        return queued
    first = consumer.consume(num_messages=1, timeout=timeout)
    if not first or num_messages <= 1:
        return first
    return first + consumer.consume(num_messages=num_messages - 1, timeout=0)


def group_consumer(conf: dict[str, Any], client: str) -> GroupConsumer:
    """The collector's group consumer for ``client`` (``SPARKTAP_COLLECTOR__KAFKA_CLIENT``): ``librdkafka`` (the
    messages read where librdkafka keeps them: librdkafka.py), ``confluent-kafka``, or ``auto``, the first when it
    can run here (else one log line says why not)."""
    if client != "confluent-kafka":
        library, why = load()
        if library is not None:
            return ChunkConsumer(conf, library)
        if client == "librdkafka":
            fix = (
                f"unset {native.ENV}"
                if native.mode() == "off"
                else "reinstall sparktap with a C compiler and the Python headers"
            )
            raise ConfigError(
                f"SPARKTAP_COLLECTOR__KAFKA_CLIENT=librdkafka cannot run here: {why}; {fix}, or set it to auto or "
                "confluent-kafka"
            )
        log.warning(
            "consuming with confluent-kafka's consumer (a Python object per message)",
            extra=fields(why=why, setting="SPARKTAP_COLLECTOR__KAFKA_CLIENT"),
        )
    return Consumer(conf)


def client_of(consumer: GroupConsumer) -> tuple[str, str]:
    """Which group consumer runs, and on which librdkafka: ``("librdkafka", "2.16.0")`` for the collector's own,
    ``("confluent-kafka", "2.16.1 (librdkafka 2.16.0)")`` for confluent-kafka's (/metrics, /healthz)."""
    if isinstance(consumer, ChunkConsumer):
        return "librdkafka", consumer.library.release
    import confluent_kafka

    return "confluent-kafka", f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"


def reread_config(settings: IngestSettings, error_cb: Callable[[KafkaError], None]) -> dict[str, Any]:
    """The short-lived consumer that reads refused rows' messages back by offset (``reread.py``): the collector's
    settings without its group membership (it is assigned partitions, never subscribes nor commits), an end of
    partition reported, and a prefetch of about one message."""
    cfg = settings.collector
    conf = consumer_config(settings, error_cb)
    for key in (
        "group.instance.id",
        "group.protocol",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "partition.assignment.strategy",
    ):
        conf.pop(key, None)
    conf.update(
        {
            "client.id": "sparktap-collector-reread",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            **fetch_budget(1, cfg.fetch_queue_kbytes, cfg.max_message_bytes),
        }
    )
    return conf


def producer_config(settings: IngestSettings, error_cb: Callable[[KafkaError], None]) -> dict[str, Any]:
    """The dead-letter producer (DeadLetterQueue adds idempotence and acks=all)."""
    return {
        **settings.kafka.librdkafka(),
        "client.id": "sparktap-collector-dlq",
        "error_cb": error_cb,
        "logger": KAFKA_LOG,
    }


class Pauses:
    """The partitions this collector paused (ClickHouse away, or messages fetched while a flush waits), reflected in
    /healthz and ``sparktap_collector_consumption_paused``."""

    def __init__(self, health: HealthState, metrics: CollectorMetrics) -> None:
        self.health = health
        self.metrics = metrics
        self.parts: list[TopicPartition] = []

    def __bool__(self) -> bool:
        return bool(self.parts)

    def pause(self, consumer: GroupConsumer | None, parts: list[TopicPartition]) -> None:
        if consumer is None or not parts:
            return
        try:
            consumer.pause(parts)
        except KafkaException as exc:
            log.warning("cannot pause partitions", extra=fields(error=str(exc)))
            return
        known = {(tp.topic, tp.partition) for tp in self.parts}
        self.parts.extend(tp for tp in parts if (tp.topic, tp.partition) not in known)
        self._set(True)

    def resume(self, consumer: GroupConsumer | None) -> None:
        if not self.parts or consumer is None:
            return
        parts, self.parts = self.parts, []
        try:
            owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
            mine = [tp for tp in parts if (tp.topic, tp.partition) in owned]
            if mine:
                consumer.resume(mine)
        except KafkaException as exc:
            log.warning("cannot resume partitions", extra=fields(error=str(exc)))
        self._set(False)
        log.info("consumption resumed", extra=fields(partitions=len(parts)))

    def forget(self, keys: set[tuple[str, int]]) -> None:
        """Partitions revoked: they come back unpaused if they come back."""
        self.parts = [tp for tp in self.parts if (tp.topic, tp.partition) not in keys]
        if not self.parts:
            self._set(False)

    def _set(self, paused: bool) -> None:
        self.health.paused = paused
        self.metrics.paused.set(1 if paused else 0)
